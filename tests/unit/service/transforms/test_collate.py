"""Strings, bfloat16 and padded values: collated on the service, framed, read by the client."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from shardstream.client.tensors import batch_to_tensors
from shardstream.proto.errors import InvalidJobSpec, TransformNotAllowed
from shardstream.proto.wire import WireError, encode_batch, parse_batch
from shardstream.proto.wire_values import STRINGS, bfloat16_bits, pack_strings
from shardstream.service.transforms.collate import (
    Collation,
    build_collation,
    collate_samples,
    to_wire,
)
from shardstream.service.transforms.columns import BadValue, gather_variable
from shardstream.service.transforms.pieces import Piece


def through_the_wire(arrays: dict[str, object], pin: bool = False) -> dict[str, object]:
    message = encode_batch(0, 0, 0, arrays, np.arange(3))  # type: ignore[arg-type]
    return batch_to_tensors(parse_batch(message), pin)


@pytest.mark.parametrize("values", [[], [""], ["a", "", "ünïcødé ✓", "x" * 1000]])
def test_strings_travel_as_a_list_of_str(values: list[str]) -> None:
    got = through_the_wire({"s": pack_strings(values), "n": np.arange(len(values))})
    assert got["s"] == values and got["n"].tolist() == list(range(len(values)))


def test_malformed_string_tensors_are_refused() -> None:
    from shardstream.proto.wire import TensorView

    good = pack_strings(["ab", "c"]).data.tobytes()
    with pytest.raises(WireError, match="offsets do not describe"):
        TensorView("s", STRINGS, (2,), memoryview(good[:-1])).strings()
    with pytest.raises(WireError, match="need 24 bytes"):
        TensorView("s", STRINGS, (2,), memoryview(good[:8])).strings()
    with pytest.raises(WireError, match="holds strings"):
        TensorView("s", STRINGS, (2,), memoryview(good)).array()


@pytest.mark.parametrize("pin", [False, True])
def test_bfloat16_keeps_its_dtype_and_values(pin: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if pin:  # no accelerator here: the pinned path with a stand-in allocator
        real_empty = torch.empty
        monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: real_empty(*a, **k))
    values = torch.tensor([[1.5, -2.0], [0.0, 3.25]], dtype=torch.bfloat16)
    got = through_the_wire({"b": bfloat16_bits(values.view(torch.int16).numpy())}, pin)["b"]
    assert got.dtype == torch.bfloat16 and torch.equal(got, values)


def test_collate_stacks_strings_and_tensors_and_pads_variable_values() -> None:
    samples = [{"ids": [1, 2, 3], "cap": "a", "t": torch.ones(2, dtype=torch.bfloat16), "img": np.zeros((2, 2))},
               {"ids": [4], "cap": "b", "t": torch.zeros(2, dtype=torch.bfloat16), "img": np.ones((2, 2))}]
    stacked = collate_samples([{k: v for k, v in s.items() if k != "ids"} for s in samples], Collation())
    got = through_the_wire(dict(stacked))
    assert got["cap"] == ["a", "b"] and got["t"].dtype == torch.bfloat16 and tuple(got["img"].shape) == (2, 2, 2)
    with pytest.raises(ValueError, match="same shape"):
        collate_samples(samples, Collation())
    padded = through_the_wire(dict(collate_samples(samples, Collation("pad", -1))))
    assert padded["ids"].tolist() == [[1, 2, 3], [4, -1, -1]] and padded["ids_lengths"].tolist() == [3, 1]
    assert padded["t"].dtype == torch.bfloat16 and padded["t_lengths"].tolist() == [2, 2]
    assert list(padded) == ["ids", "ids_lengths", "cap", "t", "t_lengths", "img"]


def test_list_and_string_columns_gather_in_batch_order() -> None:
    table = pa.table({"ids": pa.array([[1, 2], [], [3, 4, 5], [6]]), "cap": ["w", "x", "y", "z"],
                      "boxes": pa.array([[[1, 1]], [], [[2, 2], [3, 3]], [[4, 4]]],
                                        pa.list_(pa.list_(pa.int32(), 2)))})
    pieces = [Piece(table, np.array([2, 0]), np.array([0, 2])), Piece(table, np.array([1]), np.array([1]))]
    out = gather_variable(pieces, 3, ["ids", "cap", "boxes"], pad_value=9)
    assert out["ids"].tolist() == [[3, 4, 5], [9, 9, 9], [1, 2, 9]] and out["ids_lengths"].tolist() == [3, 0, 2]
    assert out["boxes"].shape == (3, 2, 2) and out["boxes"][0].tolist() == [[2, 2], [3, 3]]
    assert through_the_wire({"cap": out["cap"]})["cap"] == ["y", "x", "w"]
    nulls = pa.table({"ids": pa.array([[1], None])})
    with pytest.raises(BadValue, match="'ids' holds a null"):
        gather_variable([Piece(nulls, np.array([0, 1]), np.array([0, 1]))], 2, ["ids"], 0)


def test_a_user_collate_is_allowlisted_and_its_output_checked() -> None:
    with pytest.raises(TransformNotAllowed, match=r"collate module 'tests\.transforms' is not allowed"):
        build_collation("tests.transforms:sum_collate", 0, ())
    good = build_collation("tests.transforms:sum_collate", 0, ("tests",))
    got = through_the_wire(dict(collate_samples([{"idx": 3}, {"idx": 4}], good)))
    assert got["idx_sum"].tolist() == [7] and got["names"] == ["#3", "#4"]
    bad = build_collation("tests.transforms:bad_collate", 0, ("tests",))
    with pytest.raises(InvalidJobSpec, match=r"collate 'tests\.transforms:bad_collate' returned 'rows'.*cannot travel"):
        collate_samples([{"idx": 3}], bad)
    with pytest.raises(InvalidJobSpec, match="returned list, not a dict"):
        to_wire([1, 2], "m:f")  # type: ignore[arg-type]
