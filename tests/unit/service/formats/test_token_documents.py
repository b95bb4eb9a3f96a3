"""Document-aware token windows (format="tokens" with eos_id): position_ids, cu_seqlens,
num_documents and masked labels, against a definition written out token by token, over random
document lengths, window lengths and file splits; and the flat boundaries a training step takes."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.client.packing import varlen_boundaries
from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.formats import index_dataset
from tests.unit.service.formats.test_formats import read_all

EOS = 0


def documents_stream(lengths: list[int], seed: int) -> np.ndarray:
    """Documents of these lengths (each its tokens 1.. then EOS), one after another."""
    rng = np.random.default_rng(seed)
    return np.concatenate([np.append(rng.integers(1, 500, n), EOS) for n in lengths]).astype(np.uint16)


def expected(window: list[int], mask: bool) -> dict[str, object]:
    """The definition, token by token: a document starts at the window's first token and after each EOS."""
    inputs, labels = window[:-1], list(window[1:])
    starts = [t for t in range(len(inputs)) if t == 0 or inputs[t - 1] == EOS]
    positions, place = [], 0
    for t in range(len(inputs)):
        place = 0 if t in starts else place + 1
        positions.append(place)
    if mask:
        labels = [-100 if inputs[t] == EOS else labels[t] for t in range(len(inputs))]
    cu = starts + [len(inputs)] * (len(inputs) + 1 - len(starts))
    return {"input_ids": inputs, "labels": labels, "position_ids": positions, "cu_seqlens": cu,
            "num_documents": len(starts)}


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=12), seq_len=st.integers(1, 17),
       cut=st.integers(0, 400), mask=st.booleans())
def test_windows_say_where_their_documents_are(tmp_path_factory: pytest.TempPathFactory, lengths: list[int],
                                               seq_len: int, cut: int, mask: bool) -> None:
    stream = documents_stream(lengths, seed=len(lengths))
    if (len(stream) - 1) // seq_len <= 0:
        return
    directory = tmp_path_factory.mktemp("docs")
    at = min(cut, len(stream))  # two files, cut anywhere: a window may run from one into the next
    stream[:at].tofile(directory / "a.bin")
    stream[at:].tofile(directory / "b.bin")
    args = {"seq_len": seq_len, "dtype": "uint16", "eos_id": EOS, "mask_across_documents": mask}
    with mock.patch("shardstream.service.formats.tokens.UNIT_TOKENS", 9):  # several units per file
        table = read_all(index_dataset((str(directory),), format="tokens", format_args=args))
    got = table.to_pylist()
    windows = [stream[i * seq_len: i * seq_len + seq_len + 1].astype(int).tolist() for i in range(len(got))]
    assert got == [expected(w, mask) for w in windows]


def test_without_eos_id_the_windows_are_as_before(tmp_path: Path) -> None:
    documents_stream([5, 9, 3], seed=1).tofile(tmp_path / "a.bin")
    table = read_all(index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": 4, "dtype": "uint16"}))
    assert table.column_names == ["input_ids", "labels"]


@pytest.mark.parametrize(("args", "match"), [
    ({"eos_id": -1}, "eos_id must be a token id"),
    ({"eos_id": True}, "eos_id must be a token id"),
    ({"eos_id": 70_000}, "eos_id 70000 cannot occur in a stream of uint16"),
    ({"mask_across_documents": True}, "mask_across_documents needs eos_id"),
    ({"eos_id": 0, "mask_across_documents": "yes"}, "must be true or false"),
])
def test_careless_options_are_refused_by_name(tmp_path: Path, args: dict[str, object], match: str) -> None:
    documents_stream([5, 9, 3], seed=1).tofile(tmp_path / "a.bin")
    with pytest.raises(InvalidJobSpec, match=match):
        index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": 4, "dtype": "uint16", **args})


def test_a_batchs_boundaries_flatten_to_each_documents_span(tmp_path: Path) -> None:
    stream = documents_stream([3, 0, 11, 6, 2, 9], seed=3)
    stream.tofile(tmp_path / "a.bin")
    table = read_all(index_dataset((str(tmp_path),), format="tokens",
                                   format_args={"seq_len": 8, "dtype": "uint16", "eos_id": EOS}))
    cu = torch.tensor(table.column("cu_seqlens").to_pylist(), dtype=torch.int32)
    count = torch.tensor(table.column("num_documents").to_pylist())
    flat, longest = varlen_boundaries(cu, count)
    inputs = np.array(table.column("input_ids").to_pylist()).reshape(-1)
    # the definition: a span starts at each window's start and after each EOS, in the flattened batch
    starts = [t for t in range(len(inputs)) if t % 8 == 0 or inputs[t - 1] == EOS]
    assert flat.dtype == torch.int32 and flat.tolist() == [*starts, len(inputs)]
    assert longest == max(b - a for a, b in zip(flat.tolist(), flat.tolist()[1:], strict=False))
    positions = np.array(table.column("position_ids").to_pylist()).reshape(-1)
    for a, b in zip(flat.tolist(), flat.tolist()[1:], strict=False):  # positions count 0.. within each span
        assert positions[a:b].tolist() == list(range(b - a))
