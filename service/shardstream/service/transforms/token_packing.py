"""A batch of tokenized documents packed into rows of `seq_len` tokens (transform "tokenize", `pack`).

Greedy in order, within the batch: the batch's documents, in its sample order, one after
another, cut into rows of `seq_len`; only the last row is padded. A document longer than what
is left of a row goes on in the next one (so long documents are split, never dropped or cut).

Why within a batch, and in order: the batch is a pure function of the samples the plan gives
it, so the exact order, exactly-once delivery and resume hold as for any batch, and nothing is
carried from one step to the next (a step decoded twice, or by another actor, packs the same).
Best-fit over a window would pad less, but only by moving documents across steps (and ranks),
which the order contract forbids. Padding is at most one row per batch: with B documents of
mean length m, under seq_len / (B * m + seq_len) of the tokens; `pad_fraction` says how much.

Per batch of B documents packed into R rows:
- ``input_ids`` int64 [R, L], the last row padded with `pad_id`;
- ``labels`` int64 [R, L]: the next token of the stream (a document split across rows goes on
  in the next row), -100 at padding and after the batch's last token, and with
  `mask_across_documents` at each document's last token (the next document's first token is not
  predicted from it);
- ``position_ids``, ``cu_seqlens``, ``num_documents`` as the tokens format gives them
  (formats/token_documents.py): documents restart positions, so does each row and the padding;
- ``document_lengths`` int64 [B]: each sample's tokens, in the batch's order (what the mixture
  counts count as a source's tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardstream.service.formats.token_documents import IGNORE_INDEX, boundary_columns


def pack_documents(documents: Sequence[np.ndarray], seq_len: int, pad_id: int,
                   mask_across_documents: bool = False) -> dict[str, np.ndarray]:
    lengths = np.array([len(d) for d in documents], dtype=np.int64)
    total = int(lengths.sum())
    rows = max(1, -(-total // seq_len))
    stream = np.concatenate([np.asarray(d, dtype=np.int64) for d in documents]) if documents else \
        np.empty(0, dtype=np.int64)
    inputs = np.full(rows * seq_len, pad_id, dtype=np.int64)
    inputs[:total] = stream
    labels = np.full(rows * seq_len, IGNORE_INDEX, dtype=np.int64)
    labels[: max(total - 1, 0)] = stream[1:]
    ends = np.cumsum(lengths)  # one past each document's last token, in the stream
    if mask_across_documents:
        last = ends[lengths > 0] - 1
        labels[last] = IGNORE_INDEX
    starts = np.zeros(rows * seq_len, dtype=bool)
    starts[ends[:-1][lengths[1:] > 0]] = True  # where the next non-empty document begins
    starts[::seq_len] = True
    if total < rows * seq_len:
        starts[total] = True  # the padding is a segment of its own
    columns = boundary_columns(starts.reshape(rows, seq_len))
    return {"input_ids": inputs.reshape(rows, seq_len), "labels": labels.reshape(rows, seq_len), **columns,
            "document_lengths": lengths}


def pad_fraction(batch: dict[str, np.ndarray]) -> float:
    """The share of a packed batch's places that are padding."""
    places = batch["input_ids"].size
    return 1.0 - float(batch["document_lengths"].sum()) / places if places else 0.0


__all__ = ["pack_documents", "pad_fraction"]
