"""Tensors on the wire: encode_array/decode_array round trips and refusals."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import WIRE_DTYPES, decode_array, encode_array

SHAPES = [(0,), (5,), (2, 3), (3, 0, 2), (2, 1, 4, 3)]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype) * 100
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _round_trip(array: np.ndarray) -> np.ndarray:
    tensor = encode_array("t", array)
    # Through the serialized message, as on the real wire.
    return decode_array(pb.Tensor.FromString(tensor.SerializeToString()))


@pytest.mark.parametrize("dtype", sorted(WIRE_DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    array = _values(dtype, shape)
    back = _round_trip(array)
    assert back.dtype == np.dtype(dtype)
    assert back.shape == shape
    np.testing.assert_array_equal(back, array)


def test_message_fields() -> None:
    tensor = encode_array("pixels", np.zeros((2, 3), np.uint8))
    assert (tensor.name, tensor.dtype, list(tensor.shape)) == ("pixels", "uint8", [2, 3])
    assert tensor.data == bytes(6)


def test_extremes_survive() -> None:
    array = np.array([np.inf, -np.inf, np.nan, -0.0, np.finfo(np.float64).tiny])
    np.testing.assert_array_equal(_round_trip(array), array)


@pytest.mark.parametrize("view", [
    lambda a: a.T,
    lambda a: a[:, ::2],
    lambda a: a[::-1],
    lambda a: np.asfortranarray(a),
], ids=["transposed", "strided", "reversed", "fortran"])
def test_non_contiguous_input(view: Callable[[np.ndarray], np.ndarray]) -> None:
    base = np.arange(48, dtype=np.int32).reshape(6, 8)
    array = view(base)
    back = _round_trip(array)
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_big_endian_input_is_sent_little_endian() -> None:
    array = np.arange(6, dtype=">i4").reshape(2, 3)
    tensor = encode_array("t", array)
    assert tensor.dtype == "int32"
    assert tensor.data == np.arange(6, dtype="<i4").tobytes()
    np.testing.assert_array_equal(decode_array(tensor), array)


def test_decoded_array_is_read_only() -> None:
    back = decode_array(encode_array("t", np.arange(3, dtype=np.int64)))
    assert not back.flags.writeable


@pytest.mark.parametrize("dtype", [object, np.complex64, np.complex128, np.uint16, np.uint32,
                                   np.uint64, "U3", "datetime64[s]"], ids=str)
def test_unsupported_dtypes_are_refused_on_encode(dtype: object) -> None:
    with pytest.raises(TypeError, match="'bad'"):
        encode_array("bad", np.zeros(2, dtype=dtype))  # type: ignore[call-overload]


def test_unknown_dtype_is_refused_on_decode() -> None:
    with pytest.raises(TypeError, match="complex64"):
        decode_array(pb.Tensor(name="t", dtype="complex64", shape=[1], data=bytes(8)))


def test_shape_that_does_not_match_the_bytes_is_refused() -> None:
    with pytest.raises(ValueError):
        decode_array(pb.Tensor(name="t", dtype="int32", shape=[3], data=bytes(8)))


def test_zero_dimensional_round_trip() -> None:
    array = np.array(1.5, dtype=np.float32)
    back = _round_trip(array)
    assert back.shape == ()
    np.testing.assert_array_equal(back, array)
