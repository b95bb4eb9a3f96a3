"""Packed rows against their definition (token_packing.py) written token by token."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.service.transforms.token_packing import pack_documents, pad_fraction

PAD = 7


def oracle(documents: list[list[int]], seq_len: int, mask: bool) -> dict[str, list]:
    """Row by row, place by place: which document's which token, what comes next, where segments start."""
    stream = [(d, j, token) for d, doc in enumerate(documents) for j, token in enumerate(doc)]
    total = len(stream)
    rows = max(1, -(-total // seq_len))
    out: dict[str, list] = {k: [] for k in ("input_ids", "labels", "position_ids", "cu_seqlens", "num_documents")}
    for r in range(rows):
        inputs, labels, positions, starts = [], [], [], []
        for p in range(seq_len):
            i = r * seq_len + p
            if i < total:
                d, j, token = stream[i]
                inputs.append(token)
                last_of_doc = j == len(documents[d]) - 1
                labels.append(-100 if i + 1 >= total or (mask and last_of_doc) else stream[i + 1][2])
                start = p == 0 or j == 0
            else:
                inputs.append(PAD)
                labels.append(-100)
                start = p == 0 or i == total
            if start:
                starts.append(p)
            positions.append(0 if start else positions[-1] + 1)
        out["input_ids"].append(inputs)
        out["labels"].append(labels)
        out["position_ids"].append(positions)
        out["cu_seqlens"].append(starts + [seq_len] * (seq_len + 1 - len(starts)))
        out["num_documents"].append(len(starts))
    return out


@settings(max_examples=200, deadline=None)
@given(documents=st.lists(st.lists(st.integers(0, 50), max_size=30), max_size=8), seq_len=st.integers(1, 24),
       mask=st.booleans())
def test_rows_follow_the_definition_token_by_token(documents: list[list[int]], seq_len: int, mask: bool) -> None:
    packed = pack_documents([np.array(d, dtype=np.int64) for d in documents], seq_len, PAD, mask)
    want = oracle(documents, seq_len, mask)
    for key, rows in want.items():
        assert packed[key].tolist() == rows, key
    assert packed["document_lengths"].tolist() == [len(d) for d in documents]
    assert packed["cu_seqlens"].dtype == np.int32
    total = sum(map(len, documents))
    assert pad_fraction(packed) == 1 - total / packed["input_ids"].size
    assert packed["input_ids"].shape[0] == max(1, -(-total // seq_len))  # only the last row pads


def test_a_long_document_goes_on_in_the_next_rows() -> None:
    packed = pack_documents([np.arange(10), np.arange(100, 103)], 4, PAD)
    assert packed["input_ids"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 100, 101], [102, PAD, PAD, PAD]]
    assert packed["labels"][0].tolist() == [1, 2, 3, 4]  # the split document's next token, in the next row
    assert packed["cu_seqlens"][2].tolist() == [0, 2, 4, 4, 4]
