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
- either can build the message in memory other than a new ``bytes`` object
  (``allocate``): a rank's shared-memory slot when the decoder runs on the
  rank's host, and the stream then carries only ``encode_shared``'s small
  message naming the slot (docs/data-plane.md);
- ``parse_batch`` walks the fields and returns each tensor's data as a
  ``memoryview`` into the received bytes: zero copies, so the client makes its
  single copy into (pinned) tensor memory.

No pickle anywhere: a tensor is (name, dtype, shape, raw little-endian bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardstream.proto.protobuf_fields import (
    LEN,
    VARINT,
    fields,
    int_field,
    key,
    len_field,
    packed,
    signed,
    unpack,
    varint,
)
from shardstream.proto.wire_values import (
    BFLOAT16,
    BFLOAT16_BITS,
    STRINGS,
    WireError,
    WireTensor,
    unpack_strings,
)
from shardstream.proto.writable_bytes import writable_bytes

# numpy dtype names that travel; the client maps each to the torch dtype of the same layout.
WIRE_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32",
               "float64")
# Two more travel as a WireTensor (wire_values.py): strings and bfloat16.

# Field numbers of Batch and Tensor in loader.proto.
_BATCH_EPOCH, _BATCH_RANK, _BATCH_STEP, _BATCH_TENSORS, _BATCH_INDICES, _BATCH_REPLACED = 1, 2, 3, 4, 5, 6
_BATCH_SHARED, _BATCH_BULK_OFFER, _BATCH_BULK_SIZE, _BATCH_NEEDS_ROOM = 7, 8, 9, 10
_TENSOR_NAME, _TENSOR_DTYPE, _TENSOR_SHAPE, _TENSOR_DATA = 1, 2, 3, 4
_SHARED_SLOT, _SHARED_SIZE = 1, 2
_OFFER_PORT, _OFFER_TOKEN = 1, 2


@dataclass(frozen=True)
class TensorView:
    name: str
    dtype: str
    shape: tuple[int, ...]
    data: memoryview  # into the received message; valid while it lives

    def array(self) -> np.ndarray:
        """A read-only numpy view over the data (no copy); bfloat16 as its bits (uint16)."""
        if self.dtype == STRINGS:
            raise WireError(f"tensor {self.name!r} holds strings: read it with strings()")
        if self.dtype not in WIRE_DTYPES and self.dtype != BFLOAT16:
            raise WireError(f"tensor {self.name!r} has unknown dtype {self.dtype!r}")
        dtype = BFLOAT16_BITS if self.dtype == BFLOAT16 else np.dtype(self.dtype)
        expected = int(np.prod(self.shape, dtype=np.int64)) * dtype.itemsize
        if expected != len(self.data):
            raise WireError(f"tensor {self.name!r}: shape {self.shape} x {self.dtype} needs {expected} bytes, "
                            f"got {len(self.data)}")
        return np.frombuffer(self.data, dtype=dtype).reshape(self.shape)

    def strings(self) -> list[str]:
        """The strings of a ``str`` tensor, checked against its offsets."""
        if self.dtype != STRINGS or len(self.shape) != 1:
            raise WireError(f"tensor {self.name!r} ({self.dtype} {self.shape}) is not a list of strings")
        return unpack_strings(self.name, self.shape[0], self.data)


@dataclass(frozen=True)
class SharedRef:
    """Where a batch written into shared memory is: the first `size` bytes of a rank's slot."""

    slot: str
    size: int


@dataclass(frozen=True)
class BulkOffer:
    """A decoder's bulk port, and the token a connection to it sends first to join this stream;
    port 0: the decoder has no bulk port (batches come on the stream)."""

    port: int
    token: bytes


@dataclass(frozen=True)
class BatchView:
    epoch: int
    rank: int
    step: int
    tensors: tuple[TensorView, ...]
    sample_indices: tuple[int, ...]
    replaced_samples: int
    nbytes: int  # size of the whole message
    shared: SharedRef | None = None  # set when the batch itself is in a shared-memory slot
    bulk_size: int = 0  # set when the batch itself follows on the bulk socket: its size
    bulk_offer: BulkOffer | None = None  # set on a stream's first message when it has a bulk socket
    needs_room: int = 0  # set instead of the batch when it was larger than the want's room: its size


# ---------------------------------------------------------------- encoding

def _tensor_head(name: str, dtype: str, shape: tuple[int, ...], nbytes: int) -> bytes:
    """Everything of one ``tensors`` entry of a Batch up to its data bytes."""
    head = len_field(_TENSOR_NAME, name.encode()) + len_field(_TENSOR_DTYPE, dtype.encode())
    if shape:
        head += len_field(_TENSOR_SHAPE, packed(list(shape)))
    data_head = key(_TENSOR_DATA, LEN) + varint(nbytes) if nbytes else b""
    body_len = len(head) + len(data_head) + nbytes
    return key(_BATCH_TENSORS, LEN) + varint(body_len) + head + data_head


def _header(epoch: int, rank: int, step: int) -> bytes:
    return int_field(_BATCH_EPOCH, epoch) + int_field(_BATCH_RANK, rank) + int_field(_BATCH_STEP, step)


def _trailer(sample_indices: np.ndarray, replaced_samples: int) -> bytes:
    indices = b""
    if len(sample_indices):
        indices = len_field(_BATCH_INDICES, packed(np.asarray(sample_indices, dtype=np.int64)))
    return indices + int_field(_BATCH_REPLACED, replaced_samples)


def _wire_dtype(name: str, dtype: np.dtype) -> np.dtype:
    """The little-endian dtype a column travels as; TypeError for one that cannot travel."""
    if dtype.name not in WIRE_DTYPES:
        raise TypeError(f"column {name!r} has dtype {dtype}, which cannot travel as a tensor")
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


# size -> (the message object, a writable uint8 array of `size` bytes over it)
Allocate = Callable[[int], tuple[Any, np.ndarray]]


def encode_batch(epoch: int, rank: int, step: int, arrays: Mapping[str, np.ndarray | WireTensor],
                 sample_indices: np.ndarray, replaced_samples: int = 0,
                 allocate: Allocate = writable_bytes) -> Any:
    """A serialized ``Batch`` (``bytes`` unless `allocate` says otherwise): each array copied once,
    straight into the message."""
    specs = [TensorSpec(name, array.data.dtype, array.data.shape, array.dtype, array.shape)
             if isinstance(array, WireTensor) else TensorSpec(name, array.dtype, array.shape)
             for name, array in arrays.items()]
    frame = BatchFrame(FrameHeader(epoch, rank, step), specs, np.asarray(sample_indices, dtype=np.int64),
                       replaced_samples, allocate)
    for name, array in arrays.items():
        np.copyto(frame.arrays[name], array.data if isinstance(array, WireTensor) else array, casting="equiv")
    return frame.message


def encode_shared(epoch: int, rank: int, step: int, where: SharedRef) -> bytes:
    """The stream's message for a batch written into a shared-memory slot."""
    ref = len_field(_SHARED_SLOT, where.slot.encode()) + int_field(_SHARED_SIZE, where.size)
    return _header(epoch, rank, step) + len_field(_BATCH_SHARED, ref)


def encode_bulk(epoch: int, rank: int, step: int, size: int) -> bytes:
    """The stream's message for a batch whose `size` bytes follow on the bulk socket."""
    return _header(epoch, rank, step) + key(_BATCH_BULK_SIZE, VARINT) + varint(size)


def encode_needs_room(epoch: int, rank: int, step: int, size: int) -> bytes:
    """The stream's answer for a batch of `size` bytes, more than the room its want had."""
    return _header(epoch, rank, step) + key(_BATCH_NEEDS_ROOM, VARINT) + varint(size)


def encode_bulk_offer(offer: BulkOffer) -> bytes:
    """A stream's first message when the rank may connect a bulk socket."""
    body = int_field(_OFFER_PORT, offer.port) + (len_field(_OFFER_TOKEN, offer.token) if offer.token else b"")
    return len_field(_BATCH_BULK_OFFER, body)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of a batch before its values exist."""

    name: str
    dtype: np.dtype  # of the array the data is written through
    shape: tuple[int, ...]
    wire_dtype: str = ""  # set for a WireTensor: the dtype and shape the client sees
    wire_shape: tuple[int, ...] = ()

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
    `allocate` gives the memory (a new ``bytes`` object by default) and what
    ``message`` is.
    The data of a tensor starts wherever its header ends: not aligned for its
    dtype in general, which numpy handles on either side.
    """

    def __init__(self, header: FrameHeader, tensors: Sequence[TensorSpec], sample_indices: np.ndarray,
                 replaced_samples: int = 0, allocate: Allocate = writable_bytes) -> None:
        heads, specs = [], []
        for spec in tensors:
            if spec.wire_dtype:
                if spec.wire_dtype not in (STRINGS, BFLOAT16):
                    raise TypeError(f"tensor {spec.name!r}: unknown wire dtype {spec.wire_dtype!r}")
                spec = TensorSpec(spec.name, np.dtype(spec.dtype), tuple(spec.shape), spec.wire_dtype,
                                  tuple(spec.wire_shape))
                heads.append(_tensor_head(spec.name, spec.wire_dtype, spec.wire_shape, spec.nbytes))
            else:
                spec = TensorSpec(spec.name, _wire_dtype(spec.name, np.dtype(spec.dtype)), tuple(spec.shape))
                heads.append(_tensor_head(spec.name, spec.dtype.name, spec.shape, spec.nbytes))
            specs.append(spec)
        if len({spec.name for spec in specs}) != len(specs):
            raise ValueError(f"tensor names repeat: {[spec.name for spec in specs]}")
        first, last = _header(header.epoch, header.rank, header.step), _trailer(sample_indices, replaced_samples)
        size = len(first) + sum(len(h) + spec.nbytes for h, spec in zip(heads, specs, strict=True)) + len(last)
        self.message, whole = allocate(size)
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

def _parse_tensor(buf: memoryview) -> TensorView:
    name, dtype, shape, data = "", "", [], memoryview(b"")
    for field, wire_type, value in fields(buf):
        if field == _TENSOR_NAME and isinstance(value, memoryview):
            name = bytes(value).decode()
        elif field == _TENSOR_DTYPE and isinstance(value, memoryview):
            dtype = bytes(value).decode()
        elif field == _TENSOR_SHAPE:
            shape += unpack(value) if isinstance(value, memoryview) else [signed(value)]
        elif field == _TENSOR_DATA and isinstance(value, memoryview):
            data = value
        elif wire_type == LEN and field in (_TENSOR_NAME, _TENSOR_DTYPE, _TENSOR_DATA):
            raise WireError(f"tensor field {field} has the wrong wire type")
    return TensorView(name=name, dtype=dtype, shape=tuple(shape), data=data)


def parse_batch(message: bytes | memoryview) -> BatchView:
    """Read a serialized ``Batch`` without copying tensor data."""
    buf = memoryview(message)
    ints = {_BATCH_EPOCH: 0, _BATCH_RANK: 0, _BATCH_STEP: 0, _BATCH_REPLACED: 0}
    tensors: list[TensorView] = []
    indices: list[int] = []
    shared: SharedRef | None = None
    bulk_offer: BulkOffer | None = None
    bulk_size = needs_room = 0
    for field, _wire_type, value in fields(buf):
        if field in ints and isinstance(value, int):
            ints[field] = signed(value)
        elif field == _BATCH_TENSORS and isinstance(value, memoryview):
            tensors.append(_parse_tensor(value))
        elif field == _BATCH_INDICES:
            indices += unpack(value) if isinstance(value, memoryview) else [signed(value)]
        elif field == _BATCH_SHARED and isinstance(value, memoryview):
            shared = _parse_shared(value)
        elif field == _BATCH_BULK_SIZE and isinstance(value, int):
            bulk_size = signed(value)
        elif field == _BATCH_BULK_OFFER and isinstance(value, memoryview):
            bulk_offer = _parse_offer(value)
        elif field == _BATCH_NEEDS_ROOM and isinstance(value, int):
            needs_room = signed(value)
    if bulk_size < 0:
        raise WireError(f"a bulk batch's size must be >= 0, got {bulk_size}")
    if needs_room < 0:
        raise WireError(f"the room a batch needs must be >= 0, got {needs_room}")
    return BatchView(epoch=ints[_BATCH_EPOCH], rank=ints[_BATCH_RANK], step=ints[_BATCH_STEP],
                     tensors=tuple(tensors), sample_indices=tuple(indices),
                     replaced_samples=ints[_BATCH_REPLACED], nbytes=len(buf), shared=shared,
                     bulk_size=bulk_size, bulk_offer=bulk_offer, needs_room=needs_room)


def _parse_shared(buf: memoryview) -> SharedRef:
    slot, size = "", -1
    for field, _wire_type, value in fields(buf):
        if field == _SHARED_SLOT and isinstance(value, memoryview):
            slot = bytes(value).decode()
        elif field == _SHARED_SIZE and isinstance(value, int):
            size = signed(value)
    if not slot or size < 0:
        raise WireError(f"a shared batch must name its slot and size (got {slot!r}, {size})")
    return SharedRef(slot, size)


def _parse_offer(buf: memoryview) -> BulkOffer:
    port, token = 0, b""
    for field, _wire_type, value in fields(buf):
        if field == _OFFER_PORT and isinstance(value, int):
            port = value
        elif field == _OFFER_TOKEN and isinstance(value, memoryview):
            token = bytes(value)
    if port and (port >= 65536 or not token):
        raise WireError(f"a bulk offer must name a port and a token (got port {port}, {len(token)}-byte token)")
    return BulkOffer(port, token)


__all__ = ["WIRE_DTYPES", "Allocate", "BatchFrame", "BatchView", "BulkOffer", "FrameHeader", "SharedRef",
           "TensorSpec", "TensorView", "WireError", "encode_batch", "encode_bulk", "encode_bulk_offer",
           "encode_needs_room", "encode_shared", "parse_batch"]
