"""Batch messages -> torch tensors: one copy, right dtype and shape, writable, pin only with CUDA."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from shardstream.client.loader import RemoteLoader
from shardstream.client.tensors import TORCH_DTYPES, batch_to_tensors, pin_available
from shardstream.proto.wire import WIRE_DTYPES, BatchView, encode_batch, parse_batch


def _batch(**arrays: np.ndarray) -> BatchView:
    return parse_batch(encode_batch(0, 0, 0, arrays, np.array([], np.int64)))


def test_every_wire_dtype_has_a_torch_dtype() -> None:
    assert set(TORCH_DTYPES) == set(WIRE_DTYPES)


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_round_trip_values_dtype_and_shape(dtype: str) -> None:
    source = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    batch = _batch(t=source)
    tensor = batch_to_tensors(batch, pin=False)["t"]
    assert tensor.dtype == TORCH_DTYPES[dtype]
    assert tuple(tensor.shape) == (2, 3, 4)
    assert np.array_equal(tensor.numpy(), source)


def test_tensors_own_their_memory_and_are_writable() -> None:
    batch = _batch(x=np.zeros(4, np.float32))
    tensor = batch_to_tensors(batch, pin=False)["x"]
    tensor += 1  # would be undefined behaviour on a view of immutable protobuf bytes
    again = batch_to_tensors(batch, pin=False)["x"]
    assert tensor.tolist() == [1.0] * 4 and again.tolist() == [0.0] * 4


def test_empty_batch_tensor() -> None:
    batch = _batch(e=np.zeros((0, 3), np.int64))
    assert tuple(batch_to_tensors(batch, pin=False)["e"].shape) == (0, 3)


def test_pin_follows_cuda_availability() -> None:
    assert pin_available() == torch.cuda.is_available()
    assert RemoteLoader._resolve_pin("auto") == torch.cuda.is_available()
    assert RemoteLoader._resolve_pin(False) is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-accelerator fallback")
def test_pin_true_without_accelerator_warns_and_does_not_pin() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert RemoteLoader._resolve_pin(True) is False
    assert any("no accelerator" in str(w.message) for w in caught)
