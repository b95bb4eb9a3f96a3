"""Batch messages -> torch tensors: views without CUDA, right dtype and shape, writable, pin only with CUDA.

This host has no accelerator, so the pinned path runs with a stand-in for the one function that
allocates page-locked memory (`tensors._pinned_empty`) and with `torch.cuda.is_available` reporting
one: the seams a real GPU host goes through, and nothing wider.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from shardstream.client import tensors
from shardstream.client.loader import RemoteLoader
from shardstream.client.tensors import TORCH_DTYPES, batch_to_tensors, pin_available
from shardstream.proto.wire import WIRE_DTYPES, BatchView, encode_batch, parse_batch
from shardstream.proto.wire_values import BFLOAT16, bfloat16_bits, pack_strings


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


def _mixed_message() -> bytes:
    """A batch of every kind the pinned path handles: bytes, aligned or not wide numbers, bfloat16,
    and strings (which stay a list[str], never pinned)."""
    return encode_batch(0, 0, 0, {
        "image": np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4),
        "label": np.array([7, 9], np.int64),
        "x": np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3),
        "half": bfloat16_bits(torch.tensor([1.5, -2.0], dtype=torch.bfloat16).view(torch.int16).numpy()),
        "caption": pack_strings(["a cat", "a dog"]),
    }, np.array([0, 1], np.int64))


def test_with_an_accelerator_every_tensor_is_copied_into_pinned_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pinned: list[torch.Tensor] = []

    def stand_in(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        pinned.append(torch.empty(shape, dtype=dtype))  # ordinary memory stands in for page-locked
        return pinned[-1]

    monkeypatch.setattr(tensors, "_pinned_empty", stand_in)
    assert RemoteLoader._resolve_pin("auto") is True and RemoteLoader._resolve_pin(True) is True
    message = _mixed_message()
    batch = batch_to_tensors(parse_batch(message), pin=RemoteLoader._resolve_pin("auto"))
    numbers = {name: value for name, value in batch.items() if isinstance(value, torch.Tensor)}
    assert sorted(numbers) == ["half", "image", "label", "x"]
    # Each tensor handed out is one of the pinned buffers itself (what .to(device, non_blocking=True)
    # needs to be asynchronous), one buffer per tensor, none a view of the message.
    assert len(pinned) == len(numbers)
    assert all(any(tensor is buffer for buffer in pinned) for tensor in numbers.values())
    start = np.frombuffer(message, np.uint8).ctypes.data
    assert not any(start <= t.data_ptr() < start + len(message) for t in numbers.values())
    assert numbers["image"].flatten().tolist() == list(range(96)) and numbers["label"].tolist() == [7, 9]
    assert numbers["half"].dtype == torch.bfloat16 and numbers["half"].tolist() == [1.5, -2.0]
    assert torch.equal(numbers["x"], torch.linspace(0, 1, 6).reshape(2, 3))
    assert batch["caption"] == ["a cat", "a dog"]


def test_without_an_accelerator_nothing_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def refuse(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        raise AssertionError("pinned memory asked for on a host without an accelerator")

    monkeypatch.setattr(tensors, "_pinned_empty", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert RemoteLoader._resolve_pin("auto") is False
        assert RemoteLoader._resolve_pin(True) is False  # asked for, but there is nothing to pin for
    assert [str(w.message) for w in caught] == ["pin_memory=True but no accelerator is available: not pinning"]
    message = _mixed_message()
    batch = batch_to_tensors(parse_batch(message), pin=RemoteLoader._resolve_pin("auto"))
    start = np.frombuffer(message, np.uint8).ctypes.data
    assert start <= batch["image"].data_ptr() < start + len(message)  # a view, as ever
