"""A user collate (collate="package.module:function"): the service builds each batch with your function.

    .venv/bin/shardstream serve --port 50051 --allow-transform-module examples.formats   # from the repo root
    .venv/bin/python examples/formats/collate.py --address 127.0.0.1:50051

`join_captions` receives the batch's samples (dicts) and returns a dict of arrays, tensors or lists
of str; it runs on the decoders, so the module must be importable there and allowed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def join_captions(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Captions as one prompt per sample, and their word counts as a tensor."""
    captions = [f"{s['caption']} (#{s['idx']})" for s in samples]
    return {"prompt": captions, "words": np.array([len(c.split()) for c in captions], dtype=np.int64),
            "idx": np.array([s["idx"] for s in samples], dtype=np.int64)}


def write_sample(directory: str) -> str:
    pq.write_table(pa.table({"idx": list(range(16)), "caption": [f"a photo of thing {i}" for i in range(16)]}),
                   os.path.join(directory, "captions.parquet"))
    return directory


if __name__ == "__main__":
    from _common import run

    run(__doc__.splitlines()[0], write_sample, collate="examples.formats.collate:join_captions")
