"""Packed documents in token windows (format="tokens" with eos_id): where each document begins.

    .venv/bin/python examples/formats/packed_tokens.py --address 127.0.0.1:50051 [--data gs://bucket/tokens/]

Documents ended by an end-of-document token are packed greedily into windows of seq_len tokens;
each window also gives position_ids (restarting per document), cu_seqlens and num_documents, and
labels of -100 where a document ends. varlen_boundaries turns a batch's boundaries into what
variable-length attention (flash_attn_varlen_func) takes.
"""

from __future__ import annotations

import os

import numpy as np
from _common import run

from shardstream.client.packing import varlen_boundaries

SEQ_LEN = 16
EOS = 50256  # GPT-2's <|endoftext|>


def write_sample(directory: str) -> str:
    """Documents of 3 to 20 tokens, each ended by EOS, in two uint16 files."""
    rng = np.random.default_rng(0)
    documents = [np.append(rng.integers(0, 50000, rng.integers(3, 21)), EOS) for _ in range(60)]
    tokens = np.concatenate(documents).astype(np.uint16)
    tokens[:400].tofile(os.path.join(directory, "train-000.bin"))
    tokens[400:].tofile(os.path.join(directory, "train-001.bin"))
    return directory


def boundaries(batch: dict) -> None:
    flat, longest = varlen_boundaries(batch["cu_seqlens"], batch["num_documents"])
    print(f"  flattened: {len(flat) - 1} documents in {int(flat[-1])} tokens, the longest {longest}")


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, format="tokens", seq_len=SEQ_LEN, dtype="uint16", shuffle=True,
        format_args={"eos_id": EOS, "mask_across_documents": True}, on_batch=boundaries)
