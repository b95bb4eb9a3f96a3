"""One prepared sample as a cache entry: its own key, a checksum of its bytes, and the arrays.

An entry proves what it is on every read: which sample it holds (the prepare identity, the source
shard's identity with its version, the row in that shard) and that its bytes (header included)
are the ones written. A reader that expects another key, or finds other bytes, refuses it with a
CacheFault (cache_fault.py), and the sample is prepared again.

Layout (little-endian)::

    0   magic  b"SSPREP3\n"
    8   u32    CRC32C of every byte from offset 12 to the end
    12  u32    header length
    16  u64    the entry's whole length
    24  header: 32 bytes   the key's digest, SHA-256 of (FORMAT, prepare identity, shard identity)
                u64        the row in that shard
                JSON       the fields: [[name, kind, dtype, shape], ...]
        then each field's raw array, aligned to ALIGN bytes

The key is held as its digest, not its text, and the fields' description is parsed once per
distinct description: reading a small entry (a tokenized document of a few hundred bytes) cost
about 7 us with a JSON header of the whole key, most of a cached document's cost, and about 2 us
so (``python -m bench.cache_reads``). A SHA-256 digest proves the key as well as its text does.

Arrays read back as writable views of the bytes read, with the values, dtypes and Python types
that ``prepare`` returned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.entry_frame import PREFIX, check_frame, seal

MAGIC = b"SSPREP3\n"
FORMAT = 3  # part of every folder name: entries of an older format are never looked up
ALIGN = 16
SCALAR_KINDS = {"int": int, "float": float, "bool": bool}
KEY = struct.Struct("<32sQ")  # the key's digest, the row
Stored = bytearray | np.ndarray  # an entry's bytes as read: writable, so the arrays read back are too


@functools.lru_cache(maxsize=4096)
def key_digest(prepare: str, shard: str) -> bytes:
    """What an entry holds of its prepare and shard identities; its folder is named from it."""
    return hashlib.sha256(f"{FORMAT}\0{prepare}\0{shard}".encode()).digest()


@functools.lru_cache(maxsize=4096)
def folder_of(prepare: str, shard: str) -> str:
    """Where a (prepare identity, shard identity)'s samples are in a tier: "<dataset>/<shard>", the
    dataset being the prepare identity (prepared_tier.py)."""
    dataset = hashlib.sha256(f"{FORMAT}\0{prepare}".encode()).hexdigest()[:32]
    return f"{dataset}/{key_digest(prepare, shard).hex()[:32]}"


@dataclass(frozen=True)
class SampleKey:
    """What a prepared sample is: the prepare identity (transform, arguments, columns, code), the
    source shard's identity (URL, size, version, how it is read) and the row in that shard."""

    prepare: str
    shard: str
    row: int

    @property
    def folder(self) -> str:
        return folder_of(self.prepare, self.shard)


def encode_entry(key: SampleKey, sample: dict[str, Any]) -> list[bytes | memoryview] | None:
    """The entry's parts; None when a value is not numbers (a string, None): such a sample is
    prepared every time."""
    described, blocks = [], []
    for name, value in sample.items():
        kind = _SCALAR_KIND.get(type(value))
        if kind is None:
            if not isinstance(value, (np.ndarray, np.generic)):
                return None
            kind = "generic" if isinstance(value, np.generic) else "array"
        array = np.asarray(value)  # not ascontiguousarray: it makes 0-d values 1-d
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        if array.dtype.kind not in "biuf":
            return None
        described.append((name, kind, array.dtype.str, array.shape))
        blocks.append(array.reshape(-1).view(np.uint8).data if array.size else memoryview(b""))
    fields, pads, length = _described(tuple(described))
    rest: list[bytes | memoryview] = []
    for pad, block in zip(pads, blocks, strict=True):
        rest += [pad, block]
    return seal(MAGIC, KEY.pack(key_digest(key.prepare, key.shard), key.row) + fields, rest, length)


_SCALAR_KIND = {t: k for k, t in SCALAR_KINDS.items()}


@functools.lru_cache(maxsize=4096)
def _described(described: tuple[tuple[str, str, str, tuple[int, ...]], ...]) -> tuple[bytes, list[bytes], int]:
    """The fields' description as an entry holds it, the padding before each field's array, and
    the entry's whole length: the same for every sample of the same fields and shapes."""
    fields = json.dumps([[name, kind, dtype, list(shape)] for name, kind, dtype, shape in described]).encode()
    pads, position = [], PREFIX.size + KEY.size + len(fields)
    for _, _, dtype, shape in described:
        pad = -position % ALIGN
        pads.append(b"\0" * pad)
        position += pad + math.prod(shape) * np.dtype(dtype).itemsize
    return fields, pads, position


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    count: int
    offset: int  # from the entry's start


@functools.lru_cache(maxsize=4096)
def _layout(fields: bytes, start: int) -> tuple[tuple[_Field, ...], int]:
    """The fields a description names, where each begins in an entry whose header ends at `start`,
    and where the last ends; CacheFault when the description cannot be read."""
    try:
        described = json.loads(fields)
        layout, position = [], start
        for name, kind, dtype, shape in described:
            if kind not in (*SCALAR_KINDS, "generic", "array"):
                raise ValueError(f"kind {kind!r}")
            shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
            if any(n < 0 for n in shape) or dtype.kind not in "biuf":
                raise ValueError(f"{dtype} {shape}")
            position += -position % ALIGN
            count = math.prod(shape)  # np.prod on a short shape costs 3 us
            layout.append(_Field(str(name), kind, dtype, shape, count, position))
            position += count * dtype.itemsize
    except (ValueError, TypeError, KeyError) as exc:
        raise CacheFault("format", f"unreadable fields: {exc}") from exc
    return tuple(layout), position


def _checked_key(data: Stored) -> tuple[bytes, int, bytes, int]:
    """(the key's digest, the row, the fields' description, where the header ends) of a sound
    entry; CacheFault when the bytes are not the ones written."""
    header, end = check_frame(data, MAGIC, "prepared-sample")
    if len(header) < KEY.size:
        raise CacheFault("format", f"a header of {len(header)} bytes, shorter than a key")
    digest, row = KEY.unpack_from(header)
    return digest, row, bytes(header[KEY.size:]), end


def verify_file(data: Stored, folder: str, row: int) -> None:
    """Check that `data` is a sound entry stored as (folder, row): what a home node checks before
    it sends a sample or keeps one given to it (it knows the place, not the whole key)."""
    digest, stored_row, _, _ = _checked_key(data)
    samples = folder.split("/", 1)[-1]
    if (digest.hex()[: len(samples)], stored_row) != (samples, row):
        raise CacheFault("key", f"holds row {stored_row} of {digest.hex()[:32]}, not row {row} of {samples}")


def decode_entry(data: Stored, key: SampleKey) -> dict[str, Any]:
    """The sample `data` holds, verified to be `key`'s; arrays are writable views of `data`."""
    digest, row, fields, start = _checked_key(data)
    if digest != key_digest(key.prepare, key.shard):
        raise CacheFault("key", f"holds row {row} of another shard or prepare (key digest {digest.hex()[:16]}), "
                                f"not row {key.row} of {key.shard!r} (prepare {key.prepare})")
    if row != key.row:
        raise CacheFault("key", f"holds row {row}, not row {key.row} of {key.shard!r} (prepare {key.prepare})")
    layout, end = _layout(fields, start)
    if end != len(data):
        raise CacheFault("format", f"the fields end at {end} of {len(data)} bytes")
    sample: dict[str, Any] = {}
    for field in layout:
        array = np.frombuffer(data, dtype=field.dtype, count=field.count, offset=field.offset).reshape(field.shape)
        sample[field.name] = (SCALAR_KINDS[field.kind](array.item()) if field.kind in SCALAR_KINDS
                              else array[()] if field.kind == "generic" else array)
    return sample


__all__ = ["FORMAT", "SampleKey", "decode_entry", "encode_entry", "folder_of", "key_digest", "verify_file"]
