"""One prepared sample as a cache entry: its own key, a checksum of its bytes, and the arrays.

An entry proves what it is on every read: which sample it holds (the prepare identity, the source
shard's identity with its version, the row in that shard) and that its bytes (header included)
are the ones written. A reader that expects another key, or finds other bytes, refuses it with a
CacheFault (cache_fault.py), and the sample is prepared again.

Layout (little-endian)::

    0   magic  b"SSPREP2\\n"
    8   u32    CRC32C of every byte from offset 12 to the end
    12  u32    header length
    16  u64    the entry's whole length
    24  header JSON {"key": [prepare, shard, row], "fields": [[name, kind, dtype, shape], ...]}
        then each field's raw array, aligned to ALIGN bytes

Arrays read back as writable views of the bytes read, with the values, dtypes and Python types
that ``prepare`` returned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.entry_frame import PREFIX, open_frame, seal

MAGIC = b"SSPREP2\n"
FORMAT = 2  # part of every folder name: entries of an older format are never looked up
ALIGN = 16
SCALAR_KINDS = {"int": int, "float": float, "bool": bool}
Stored = bytearray | np.ndarray  # an entry's bytes as read: writable, so the arrays read back are too


@functools.lru_cache(maxsize=4096)
def folder_of(prepare: str, shard: str) -> str:
    """Where a (prepare identity, shard identity)'s samples are in a tier: "<dataset>/<shard>", the
    dataset being the prepare identity (prepared_tier.py)."""
    dataset = hashlib.sha256(f"{FORMAT}\0{prepare}".encode()).hexdigest()[:32]
    samples = hashlib.sha256(f"{FORMAT}\0{prepare}\0{shard}".encode()).hexdigest()[:32]
    return f"{dataset}/{samples}"


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
    fields, blocks = [], []
    for name, value in sample.items():
        kind = next((k for k, t in SCALAR_KINDS.items() if type(value) is t), None)
        if kind is None:
            kind = "generic" if isinstance(value, np.generic) else "array"
            if not isinstance(value, (np.ndarray, np.generic)):
                return None
        array = np.asarray(value)  # not ascontiguousarray: it makes 0-d values 1-d
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        if array.dtype.kind not in "biuf":
            return None
        fields.append([name, kind, array.dtype.str, list(array.shape)])
        blocks.append(array.reshape(-1).view(np.uint8).data if array.size else memoryview(b""))
    header = json.dumps({"key": [key.prepare, key.shard, key.row], "fields": fields}).encode()
    rest: list[bytes | memoryview] = []
    position = PREFIX.size + len(header)
    for block in blocks:
        pad = -position % ALIGN
        rest += [b"\0" * pad, block]
        position += pad + len(block)
    return seal(MAGIC, header, rest, position)


def _checked_header(data: Stored) -> tuple[dict[str, Any], int]:
    """The header of a sound entry and where the fields begin; CacheFault when the bytes are not
    the ones written."""
    header, end = open_frame(data, MAGIC, "prepared-sample")
    if "fields" not in header:
        raise CacheFault("format", "unreadable header: no fields")
    return header, end


def _key_of(header: dict[str, Any]) -> tuple[str, str, int]:
    try:
        prepare, shard, row = header["key"]
        return str(prepare), str(shard), int(row)
    except (TypeError, ValueError) as exc:
        raise CacheFault("format", f"unreadable key: {exc}") from exc


def verify_file(data: Stored, folder: str, row: int) -> None:
    """Check that `data` is a sound entry stored as (folder, row): what a home node checks before
    it sends a sample or keeps one given to it (it knows the place, not the whole key)."""
    prepare, shard, stored_row = _key_of(_checked_header(data)[0])
    if (folder_of(prepare, shard), stored_row) != (folder, row):
        raise CacheFault("key", f"holds row {stored_row} of {folder_of(prepare, shard)}, not row {row} of {folder}")


def decode_entry(data: Stored, key: SampleKey) -> dict[str, Any]:
    """The sample `data` holds, verified to be `key`'s; arrays are writable views of `data`."""
    header, position = _checked_header(data)
    prepare, shard, row = _key_of(header)
    if (prepare, shard, row) != (key.prepare, key.shard, key.row):
        raise CacheFault("key", f"holds row {row} of {shard!r} (prepare {prepare}), not row {key.row} of "
                                f"{key.shard!r} (prepare {key.prepare})")
    sample: dict[str, Any] = {}
    try:
        for name, kind, dtype, shape in header["fields"]:
            position += -position % ALIGN
            count = math.prod(int(n) for n in shape)  # np.prod on a short shape costs 3 us
            array = np.frombuffer(data, dtype=np.dtype(dtype), count=count, offset=position).reshape(shape)
            position += array.nbytes
            sample[name] = SCALAR_KINDS[kind](array.item()) if kind in SCALAR_KINDS else (
                array[()] if kind == "generic" else array)
    except (ValueError, TypeError, KeyError) as exc:
        raise CacheFault("format", f"the header does not describe the bytes: {exc}") from exc
    if position != len(data):
        raise CacheFault("format", f"the fields end at {position} of {len(data)} bytes")
    return sample


__all__ = ["FORMAT", "SampleKey", "decode_entry", "encode_entry", "folder_of", "verify_file"]
