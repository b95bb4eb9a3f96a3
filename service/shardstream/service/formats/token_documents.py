"""Where documents begin inside token windows, for training on packed sequences.

A token stream holds documents one after another, each ended by an end-of-document token (GPT-2's
``<|endoftext|>``, as nanoGPT's and Megatron's preparation writes them). A window of ``seq_len``
tokens is then several documents packed together, greedily in stream order, cut at the window's
edges. With ``eos_id`` given, each window also says where its documents are:

- ``position_ids`` int64 [L]: each token's place in its document, 0 at the window's first token
  and at each token after an ``eos_id`` (as packed-sequence training and Hugging Face's
  ``DataCollatorWithFlattening`` number them);
- ``cu_seqlens`` int32 [L + 1]: where the window's documents start, then L; padded with L, so
  row r's boundaries are ``cu_seqlens[r, :num_documents[r] + 1]`` (client/packing.py turns a
  batch's into the flat ``cu_seqlens`` and ``max_seqlen`` of variable-length attention);
- ``num_documents`` int64: how many documents (or parts of one) the window holds;
- with ``mask_across_documents``, ``labels`` is -100 where the input is ``eos_id``: the next
  document's first token is not predicted from the one before it.
"""

from __future__ import annotations

import numpy as np

IGNORE_INDEX = -100  # torch.nn.functional.cross_entropy's default ignore_index
DOCUMENT_COLUMNS = ("position_ids", "cu_seqlens", "num_documents")


def document_columns(inputs: np.ndarray, labels: np.ndarray, eos_id: int,
                     mask_across_documents: bool) -> dict[str, np.ndarray]:
    """The columns above for windows `inputs` [n, L] (and `labels`, masked in place when asked)."""
    count, length = inputs.shape
    ended = inputs == eos_id
    starts = np.zeros((count, length), dtype=bool)
    starts[:, 0] = True
    starts[:, 1:] = ended[:, :-1]
    if mask_across_documents:
        labels[ended] = IGNORE_INDEX
    return boundary_columns(starts)


def boundary_columns(starts: np.ndarray) -> dict[str, np.ndarray]:
    """position_ids, cu_seqlens and num_documents of rows [n, L] whose documents begin where
    `starts` is True (every row's first place among them)."""
    count, length = starts.shape
    place = np.arange(length, dtype=np.int64)
    position_ids = place - np.maximum.accumulate(np.where(starts, place, 0), axis=1)
    num_documents = starts.sum(axis=1).astype(np.int64)
    # each row's start positions first, in order (a stable sort of "not a start"), then L
    first_starts = np.argsort(~starts, axis=1, kind="stable")
    cu_seqlens = np.full((count, length + 1), length, dtype=np.int32)
    cu_seqlens[:, :length] = np.where(place < num_documents[:, None], first_starts, length)
    return {"position_ids": position_ids, "cu_seqlens": cu_seqlens, "num_documents": num_documents}


__all__ = ["DOCUMENT_COLUMNS", "IGNORE_INDEX", "boundary_columns", "document_columns"]
