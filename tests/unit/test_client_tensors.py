"""Batch messages -> torch tensors: views without CUDA, right dtype and shape, writable, pin only with CUDA."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from shardstream.client.loader import RemoteLoader
from shardstream.client.tensors import TORCH_DTYPES, batch_to_tensors, pin_available
from shardstream.proto.wire import WIRE_DTYPES, BatchView, encode_batch, parse_batch
from shardstream.proto.wire_values import BFLOAT16


def _batch(**arrays: np.ndarray) -> BatchView:
    return parse_batch(encode_batch(0, 0, 0, arrays, np.array([], np.int64)))


def test_every_wire_dtype_has_a_torch_dtype() -> None:
    assert set(TORCH_DTYPES) == {*WIRE_DTYPES, BFLOAT16}  # strings become list[str]


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_round_trip_values_dtype_and_shape(dtype: str) -> None:
    source = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    batch = _batch(t=source)
    tensor = batch_to_tensors(batch, pin=False)["t"]
    assert tensor.dtype == TORCH_DTYPES[dtype]
    assert tuple(tensor.shape) == (2, 3, 4)
    assert np.array_equal(tensor.numpy(), source)


def test_without_pinning_tensors_are_views_of_the_message() -> None:
    message = encode_batch(0, 0, 0, {"x": np.arange(1000, dtype=np.uint8)}, np.array([], np.int64))
    tensor = batch_to_tensors(parse_batch(message), pin=False)["x"]
    start = np.frombuffer(message, np.uint8).ctypes.data
    assert start <= tensor.data_ptr() < start + len(message)


def test_views_are_writable_and_belong_to_their_batch_alone() -> None:
    first, second = _batch(x=np.zeros(4, np.float32)), _batch(x=np.zeros(4, np.float32))
    tensor = batch_to_tensors(first, pin=False)["x"]
    tensor += 1
    assert tensor.tolist() == [1.0] * 4
    assert batch_to_tensors(second, pin=False)["x"].tolist() == [0.0] * 4


def test_misaligned_data_is_copied_not_viewed() -> None:
    # Name lengths shift the data's offset in the message; some offsets are not 8-byte aligned.
    for name in ("a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg"):
        message = encode_batch(0, 0, 0, {name: np.arange(5, dtype=np.int64)}, np.array([], np.int64))
        tensor = batch_to_tensors(parse_batch(message), pin=False)[name]
        assert tensor.data_ptr() % 8 == 0
        assert tensor.tolist() == [0, 1, 2, 3, 4]


def test_no_warning_reaches_the_user() -> None:
    # A fresh interpreter: torch warns about a read-only buffer once per process, and pytest
    # resets warning filters around each test.
    code = ("import numpy as np; from shardstream.client.tensors import batch_to_tensors; "
            "from shardstream.proto.wire import encode_batch, parse_batch; "
            "m = encode_batch(0, 0, 0, {'x': np.zeros(4, np.uint8)}, np.array([], np.int64)); "
            "print(batch_to_tensors(parse_batch(m), pin=False)['x'].tolist())")
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 0, 0, 0]" and "Warning" not in done.stderr


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
