"""Hand-framed Batch messages: round trips, and conformance with the official protobuf runtime."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import (
    WIRE_DTYPES,
    BatchFrame,
    FrameHeader,
    TensorSpec,
    WireError,
    encode_batch,
    encode_needs_room,
    parse_batch,
)
from shardstream.proto.writable_bytes import writable_bytes

SHAPES = [(), (0,), (5,), (2, 3), (3, 0, 2), (2, 1, 4, 3)]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _round_trip(array: np.ndarray) -> np.ndarray:
    view = parse_batch(encode_batch(0, 0, 0, {"t": array}, np.array([], np.int64)))
    return view.tensors[0].array()


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    array = _values(dtype, shape)
    back = _round_trip(array)
    assert back.dtype == np.dtype(dtype)
    assert back.shape == shape
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_official_protobuf_reads_what_we_frame(dtype: str, shape: tuple[int, ...]) -> None:
    array = _values(dtype, shape)
    message = pb.Batch.FromString(encode_batch(3, 1, 9, {"t": array, "label": np.arange(2)},
                                               np.array([7, 2**40, 0]), 2))
    assert (message.epoch, message.rank, message.step, message.replaced_samples) == (3, 1, 9, 2)
    assert list(message.sample_indices) == [7, 2**40, 0]
    tensor = message.tensors[0]
    assert (tensor.name, tensor.dtype, tuple(tensor.shape)) == ("t", dtype, shape)
    assert tensor.data == array.astype(array.dtype.newbyteorder("<")).tobytes()
    assert message.tensors[1].name == "label"


@settings(max_examples=100, deadline=None, database=None)
@given(epoch=st.integers(0, 2**62), rank=st.integers(0, 2**31 - 1), step=st.integers(0, 2**62),
       indices=st.lists(st.integers(0, 2**62), max_size=50), replaced=st.integers(0, 2**31 - 1),
       names=st.lists(st.text(min_size=1, max_size=8), unique=True, max_size=4))
def test_we_read_what_the_official_protobuf_writes(epoch: int, rank: int, step: int, indices: list[int],
                                                   replaced: int, names: list[str]) -> None:
    tensors = [pb.Tensor(name=n, dtype="uint8", shape=[len(n)], data=n.encode()[: len(n)].ljust(len(n), b"x"))
               for n in names]
    official = pb.Batch(epoch=epoch, rank=rank, step=step, tensors=tensors, sample_indices=indices,
                        replaced_samples=replaced).SerializeToString()
    view = parse_batch(official)
    assert (view.epoch, view.rank, view.step, view.replaced_samples) == (epoch, rank, step, replaced)
    assert list(view.sample_indices) == indices
    assert [(t.name, t.shape, bytes(t.data)) for t in view.tensors] == [
        (t.name, tuple(t.shape), t.data) for t in tensors]


def test_unknown_fields_are_skipped() -> None:
    """A newer service may add fields; this client must still read the ones it knows."""
    known = encode_batch(1, 0, 4, {"x": np.arange(3, dtype=np.int32)}, np.array([1, 2, 3]))
    unknown = bytes([(15 << 3) | 0, 5]) + bytes([(14 << 3) | 2, 2]) + b"hi"  # varint field 15, bytes field 14
    view = parse_batch(known + unknown)
    assert view.step == 4 and view.tensors[0].array().tolist() == [0, 1, 2]


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
    array = view(np.arange(48, dtype=np.int32).reshape(6, 8))
    back = _round_trip(array)
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)


def test_big_endian_input_is_sent_little_endian() -> None:
    array = np.arange(6, dtype=">i4").reshape(2, 3)
    message = pb.Batch.FromString(encode_batch(0, 0, 0, {"t": array}, np.array([], np.int64)))
    assert message.tensors[0].dtype == "int32"
    assert message.tensors[0].data == np.arange(6, dtype="<i4").tobytes()


def test_parsed_tensor_is_a_read_only_view_without_copy() -> None:
    raw = encode_batch(0, 0, 0, {"t": np.arange(3, dtype=np.int64)}, np.array([], np.int64))
    back = parse_batch(raw).tensors[0].array()
    assert not back.flags.writeable
    assert not back.flags.owndata


@pytest.mark.parametrize("dtype", [object, np.complex64, np.complex128, "U3", "datetime64[s]"], ids=str)
def test_unsupported_dtypes_are_refused_on_encode(dtype: object) -> None:
    with pytest.raises(TypeError, match="'bad'"):
        encode_batch(0, 0, 0, {"bad": np.zeros(2, dtype=dtype)}, np.array([], np.int64))  # type: ignore[call-overload]


def test_unknown_dtype_is_refused_on_read() -> None:
    raw = pb.Batch(tensors=[pb.Tensor(name="t", dtype="complex64", shape=[1], data=bytes(8))]).SerializeToString()
    with pytest.raises(WireError, match="complex64"):
        parse_batch(raw).tensors[0].array()


def test_shape_that_does_not_match_the_bytes_is_refused() -> None:
    raw = pb.Batch(tensors=[pb.Tensor(name="t", dtype="int32", shape=[3], data=bytes(8))]).SerializeToString()
    with pytest.raises(WireError, match="needs 12 bytes, got 8"):
        parse_batch(raw).tensors[0].array()


@pytest.mark.parametrize("cut", [1, 5, 40])
def test_truncated_message_is_refused(cut: int) -> None:
    raw = encode_batch(1, 0, 2, {"t": np.arange(10, dtype=np.int64)}, np.arange(4))
    with pytest.raises(WireError):
        parse_batch(raw[:-cut])


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_frame_filled_in_place_is_the_message_encode_batch_gives(dtype: str, shape: tuple[int, ...]) -> None:
    array, labels, indices = _values(dtype, shape), np.arange(3), np.array([7, 2**40, 0])
    frame = BatchFrame(FrameHeader(3, 1, 9), [TensorSpec("t", array.dtype, array.shape),
                                               TensorSpec("label", labels.dtype, labels.shape)], indices, 2)
    frame.arrays["t"][...] = array
    frame.arrays["label"][...] = labels
    assert frame.message == encode_batch(3, 1, 9, {"t": array, "label": labels}, indices, 2)
    message = pb.Batch.FromString(frame.message)
    assert (message.epoch, message.rank, message.step, message.replaced_samples) == (3, 1, 9, 2)
    assert message.tensors[0].data == array.tobytes() and message.tensors[1].name == "label"


def test_a_frame_of_big_endian_columns_travels_little_endian() -> None:
    frame = BatchFrame(FrameHeader(0, 0, 0), [TensorSpec("t", np.dtype(">i4"), (2, 3))], np.array([], np.int64))
    frame.arrays["t"][...] = np.arange(6).reshape(2, 3)
    assert pb.Batch.FromString(frame.message).tensors[0].data == np.arange(6, dtype="<i4").tobytes()


def test_a_frame_refuses_dtypes_that_cannot_travel_and_repeated_names() -> None:
    with pytest.raises(TypeError, match="'bad'"):
        BatchFrame(FrameHeader(0, 0, 0), [TensorSpec("bad", np.dtype(np.complex64), (2,))], np.array([], np.int64))
    with pytest.raises(ValueError, match="repeat"):
        BatchFrame(FrameHeader(0, 0, 0), [TensorSpec("t", np.dtype(np.uint8), (2,))] * 2, np.array([], np.int64))


def test_a_frames_arrays_keep_its_message_alive_and_write_into_it() -> None:
    frame = BatchFrame(FrameHeader(0, 0, 1), [TensorSpec("t", np.dtype(np.int64), (4,))], np.array([], np.int64))
    view, message = frame.arrays["t"], frame.message
    del frame
    view[...] = [5, 6, 7, 8]
    assert parse_batch(message).tensors[0].array().tolist() == [5, 6, 7, 8]
    del message
    view[0] = 9  # the array still owns a live buffer (would crash or corrupt memory otherwise)
    assert view.tolist() == [9, 6, 7, 8]


@pytest.mark.parametrize("size", [0, 1, 2, 1 << 20])
def test_writable_bytes_are_new_objects_of_that_size(size: int) -> None:
    data, view = writable_bytes(size)
    assert isinstance(data, bytes) and len(data) == size and view.shape == (size,) and view.flags.writeable
    view[...] = 7
    assert data == bytes([7]) * size
    if size == 1:
        assert data is not bytes([7])  # never one of the interpreter's shared one-byte objects


def test_the_room_a_batch_needs_is_a_batch_without_tensors_that_says_its_size() -> None:
    message = encode_needs_room(3, 1, 17, 123_456_789)
    view = parse_batch(message)
    assert (view.epoch, view.rank, view.step, view.needs_room) == (3, 1, 17, 123_456_789)
    assert view.tensors == () and view.shared is None and view.bulk_size == 0
    assert pb.Batch.FromString(message).needs_room == 123_456_789  # what protobuf makes of it
    assert parse_batch(encode_batch(0, 0, 0, {"x": np.zeros(2)}, np.arange(2))).needs_room == 0
