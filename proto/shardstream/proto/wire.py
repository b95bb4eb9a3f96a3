"""Batches on the wire: the protobuf encoding of ``shardstream.v1.Batch``, framed by hand.

The bytes are exactly what any protobuf library reads as a ``Batch`` message
(a conformance test checks both directions against the official runtime), but
they are built and read without a protobuf object in between:

- ``BatchFrame`` allocates a whole message first, writes its headers and hands
  out a writable array over each tensor's data, so a decode actor gathers the
  batch straight into the bytes gRPC sends: the collate is the only copy;
- ``encode_batch`` frames arrays that exist already (a transform's collated
  output): one copy into the message, no ``tobytes`` and no
  ``SerializeToString`` pass over the payload;
- ``parse_batch`` walks the fields and returns each tensor's data as a
  ``memoryview`` into the received bytes: zero copies, so the client makes its
  single copy into (pinned) tensor memory.

No pickle anywhere: a tensor is (name, dtype, shape, raw little-endian bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shardstream.proto.writable_bytes import writable_bytes

# numpy dtype names that travel; the client maps each to the torch dtype of the same layout.
WIRE_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")

# Field numbers of Batch and Tensor in loader.proto.
_BATCH_EPOCH, _BATCH_RANK, _BATCH_STEP, _BATCH_TENSORS, _BATCH_INDICES, _BATCH_REPLACED = 1, 2, 3, 4, 5, 6
_TENSOR_NAME, _TENSOR_DTYPE, _TENSOR_SHAPE, _TENSOR_DATA = 1, 2, 3, 4
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MASK64 = (1 << 64) - 1


class WireError(ValueError):
    """Bytes that are not a well-formed Batch message."""


@dataclass(frozen=True)
class TensorView:
    name: str
    dtype: str
    shape: tuple[int, ...]
    data: memoryview  # into the received message; valid while it lives

    def array(self) -> np.ndarray:
        """A read-only numpy view over the data (no copy)."""
        if self.dtype not in WIRE_DTYPES:
            raise WireError(f"tensor {self.name!r} has unknown dtype {self.dtype!r}")
        expected = int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize
        if expected != len(self.data):
            raise WireError(f"tensor {self.name!r}: shape {self.shape} x {self.dtype} needs {expected} bytes, "
                            f"got {len(self.data)}")
        return np.frombuffer(self.data, dtype=self.dtype).reshape(self.shape)


@dataclass(frozen=True)
class BatchView:
    epoch: int
    rank: int
    step: int
    tensors: tuple[TensorView, ...]
    sample_indices: tuple[int, ...]
    replaced_samples: int
    nbytes: int  # size of the whole message


# ---------------------------------------------------------------- encoding

def _varint(value: int) -> bytes:
    value &= _MASK64  # negative int64s are 10-byte two's complement, as protobuf does
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _int_field(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value) if value else b""


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _packed(values: np.ndarray | list[int]) -> bytes:
    return b"".join(_varint(int(v)) for v in values)


def _tensor_head(name: str, dtype: np.dtype, shape: tuple[int, ...], nbytes: int) -> bytes:
    """Everything of one ``tensors`` entry of a Batch up to its data bytes."""
    head = _len_field(_TENSOR_NAME, name.encode()) + _len_field(_TENSOR_DTYPE, dtype.name.encode())
    if shape:
        head += _len_field(_TENSOR_SHAPE, _packed(list(shape)))
    data_head = _key(_TENSOR_DATA, _LEN) + _varint(nbytes) if nbytes else b""
    body_len = len(head) + len(data_head) + nbytes
    return _key(_BATCH_TENSORS, _LEN) + _varint(body_len) + head + data_head


def _header(epoch: int, rank: int, step: int) -> bytes:
    return _int_field(_BATCH_EPOCH, epoch) + _int_field(_BATCH_RANK, rank) + _int_field(_BATCH_STEP, step)


def _trailer(sample_indices: np.ndarray, replaced_samples: int) -> bytes:
    indices = b""
    if len(sample_indices):
        indices = _len_field(_BATCH_INDICES, _packed(np.asarray(sample_indices, dtype=np.int64)))
    return indices + _int_field(_BATCH_REPLACED, replaced_samples)


def _wire_dtype(name: str, dtype: np.dtype) -> np.dtype:
    """The little-endian dtype a column travels as; TypeError for one that cannot travel."""
    if dtype.name not in WIRE_DTYPES:
        raise TypeError(f"column {name!r} has dtype {dtype}, which cannot travel as a tensor")
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def encode_batch(epoch: int, rank: int, step: int, arrays: Mapping[str, np.ndarray],
                 sample_indices: np.ndarray, replaced_samples: int = 0) -> bytes:
    """A serialized ``Batch``; array buffers are joined in without an intermediate copy."""
    parts: list[bytes | memoryview] = [_header(epoch, rank, step)]
    for name, array in arrays.items():
        dtype = _wire_dtype(name, array.dtype)
        if dtype != array.dtype:
            array = array.astype(dtype)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        data = memoryview(array).cast("B") if array.size else memoryview(b"")  # type: ignore[arg-type]
        parts += [_tensor_head(name, dtype, array.shape, len(data)), data]
    parts.append(_trailer(sample_indices, replaced_samples))
    return b"".join(parts)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of a batch before its values exist."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class FrameHeader:
    """Which batch a message carries: a rank's step of an epoch."""

    epoch: int
    rank: int
    step: int


class BatchFrame:
    """A serialized ``Batch`` allocated whole before its tensors are filled.

    ``arrays`` holds a writable array over each tensor's data inside
    ``message``; once every one is filled (and dropped), ``message`` is the
    same bytes ``encode_batch`` would give for those values, ready to send.
    The data of a tensor starts wherever its header ends: not aligned for its
    dtype in general, which numpy handles on either side.
    """

    def __init__(self, header: FrameHeader, tensors: Sequence[TensorSpec], sample_indices: np.ndarray,
                 replaced_samples: int = 0) -> None:
        heads, specs = [], []
        for spec in tensors:
            spec = TensorSpec(spec.name, _wire_dtype(spec.name, np.dtype(spec.dtype)), tuple(spec.shape))
            heads.append(_tensor_head(spec.name, spec.dtype, spec.shape, spec.nbytes))
            specs.append(spec)
        if len({spec.name for spec in specs}) != len(specs):
            raise ValueError(f"tensor names repeat: {[spec.name for spec in specs]}")
        first, last = _header(header.epoch, header.rank, header.step), _trailer(sample_indices, replaced_samples)
        size = len(first) + sum(len(h) + spec.nbytes for h, spec in zip(heads, specs, strict=True)) + len(last)
        self.message, whole = writable_bytes(size)
        self.arrays: dict[str, np.ndarray] = {}
        position = _put(whole, 0, first)
        for head, spec in zip(heads, specs, strict=True):
            position = _put(whole, position, head)
            data = whole[position : position + spec.nbytes]
            self.arrays[spec.name] = data.view(spec.dtype).reshape(spec.shape)
            position += spec.nbytes
        _put(whole, position, last)


def _put(whole: np.ndarray, position: int, part: bytes) -> int:
    whole[position : position + len(part)] = np.frombuffer(part, dtype=np.uint8)
    return position + len(part)


# ---------------------------------------------------------------- parsing

def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def _fields(buf: memoryview) -> list[tuple[int, int, int | memoryview]]:
    """(field, wire type, value) for every field; LEN values are views into buf."""
    out: list[tuple[int, int, int | memoryview]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        value: int | memoryview
        if wire_type == _VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire_type == _LEN:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise WireError(f"field {field} claims {length} bytes, {len(buf) - pos} remain")
            value, pos = buf[pos : pos + length], pos + length
        elif wire_type == _I64:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire_type == _I32:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise WireError(f"unsupported wire type {wire_type} for field {field}")
        out.append((field, wire_type, value))
    if pos != len(buf):
        raise WireError("message ends inside a field")
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _unpack(buf: memoryview) -> list[int]:
    values, pos = [], 0
    while pos < len(buf):
        value, pos = _read_varint(buf, pos)
        values.append(_signed(value))
    return values


def _parse_tensor(buf: memoryview) -> TensorView:
    name, dtype, shape, data = "", "", [], memoryview(b"")
    for field, wire_type, value in _fields(buf):
        if field == _TENSOR_NAME and isinstance(value, memoryview):
            name = bytes(value).decode()
        elif field == _TENSOR_DTYPE and isinstance(value, memoryview):
            dtype = bytes(value).decode()
        elif field == _TENSOR_SHAPE:
            shape += _unpack(value) if isinstance(value, memoryview) else [_signed(value)]
        elif field == _TENSOR_DATA and isinstance(value, memoryview):
            data = value
        elif wire_type == _LEN and field in (_TENSOR_NAME, _TENSOR_DTYPE, _TENSOR_DATA):
            raise WireError(f"tensor field {field} has the wrong wire type")
    return TensorView(name=name, dtype=dtype, shape=tuple(shape), data=data)


def parse_batch(message: bytes) -> BatchView:
    """Read a serialized ``Batch`` without copying tensor data."""
    buf = memoryview(message)
    ints = {_BATCH_EPOCH: 0, _BATCH_RANK: 0, _BATCH_STEP: 0, _BATCH_REPLACED: 0}
    tensors: list[TensorView] = []
    indices: list[int] = []
    for field, _wire_type, value in _fields(buf):
        if field in ints and isinstance(value, int):
            ints[field] = _signed(value)
        elif field == _BATCH_TENSORS and isinstance(value, memoryview):
            tensors.append(_parse_tensor(value))
        elif field == _BATCH_INDICES:
            indices += _unpack(value) if isinstance(value, memoryview) else [_signed(value)]
    return BatchView(epoch=ints[_BATCH_EPOCH], rank=ints[_BATCH_RANK], step=ints[_BATCH_STEP],
                     tensors=tuple(tensors), sample_indices=tuple(indices),
                     replaced_samples=ints[_BATCH_REPLACED], nbytes=len(buf))


__all__ = ["WIRE_DTYPES", "BatchFrame", "BatchView", "FrameHeader", "TensorSpec", "TensorView", "WireError",
           "encode_batch", "parse_batch"]
