"""Weighted sampling (weights="<column>"): each epoch draws N samples with replacement, by weight.

    .venv/bin/python examples/formats/weights.py --address 127.0.0.1:50051 [--data gs://bucket/train/]

What WeightedRandomSampler(weights, N, generator=seeded(seed + epoch)) draws, split across ranks as
DistributedSampler splits its permutation: a rare class drawn as often as a common one here.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from _common import run


def write_sample(directory: str) -> str:
    """40 samples: 36 of class 0, 4 of class 1, weighted 1/count so both are drawn about equally."""
    labels = [0] * 36 + [1] * 4
    weights = [1 / 36 if label == 0 else 1 / 4 for label in labels]
    pq.write_table(pa.table({"label": labels, "weight": weights}), os.path.join(directory, "train.parquet"))
    return directory


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, weights="weight", columns=["label"], seed=0)
