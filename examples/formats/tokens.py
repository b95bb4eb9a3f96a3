"""Token streams (format="tokens"): nanoGPT/Megatron-style .bin files, windows of seq_len + 1.

    .venv/bin/python examples/formats/tokens.py --address 127.0.0.1:50051 [--data gs://bucket/tokens/]

Sample i is tokens[i*L : i*L + L + 1] of the files concatenated in sorted path order; a batch is
input_ids and labels (shifted by one), int64 [B, L].
"""

from __future__ import annotations

import os

import numpy as np
from _common import run

SEQ_LEN = 8


def write_sample(directory: str) -> str:
    """Two uint16 token files, as nanoGPT's prepare.py writes train.bin."""
    tokens = np.arange(1000, dtype=np.uint16) % 50257
    tokens[:600].tofile(os.path.join(directory, "train-000.bin"))
    tokens[600:].tofile(os.path.join(directory, "train-001.bin"))
    return directory


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, format="tokens", seq_len=SEQ_LEN, dtype="uint16", shuffle=True)
