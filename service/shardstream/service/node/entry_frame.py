"""The frame both caches' entries share: what makes a stored entry prove its own bytes.

Layout (little-endian)::

    0   magic  8 bytes, one per kind of entry (and per format version)
    8   u32    CRC32C of every byte from offset 12 to the end
    12  u32    header length
    16  u64    the entry's whole length
    24  header (the entry's key, and what its kind needs), then the kind's payload

`check_frame` refuses, as a CacheFault (a cache miss), anything that is not a whole, unchanged
entry of that kind: too short, no magic, bytes past the end, a checksum that does not match; it
gives the header's bytes. `open_frame` reads a header that is a JSON object (a local copy's). Checking
the key in the header is the kind's (prepared_entry.py, local_copy_entry.py).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.entry_checksum import checksum

PREFIX = struct.Struct("<8sIIQ")  # magic, checksum, header length, whole length
CHECKED_FROM = 12  # the checksum covers everything after itself


def seal(magic: bytes, header: bytes, rest: list[bytes | memoryview], length: int) -> list[bytes | memoryview]:
    """The entry's parts, in order: the prefix, `header`, then `rest` (`length` bytes in all)."""
    checked = struct.pack("<IQ", len(header), length) + header
    return [magic, struct.pack("<I", checksum(checked, *rest)), checked, *rest]


def sealed_length(parts: list[bytes | memoryview]) -> int:
    """The whole length of the entry `seal` gave as `parts`."""
    return int(struct.unpack_from("<Q", parts[2], 4)[0])


def check_frame(data: Any, magic: bytes, what: str) -> tuple[memoryview, int]:
    """The header's bytes of a sound entry in `data` (any bytes-like, a mapped file's too) and the
    offset where it ends; CacheFault when the bytes are not a whole, unchanged `what` entry."""
    view = memoryview(data)
    size = view.nbytes
    if size < PREFIX.size:
        raise CacheFault("short_read", f"{size} bytes, shorter than an entry's prefix")
    found, crc, header_length, length = PREFIX.unpack_from(view)
    if found != magic:
        raise CacheFault("format", f"not a {what} entry (no magic)")
    if size < length:
        raise CacheFault("short_read", f"{size} of {length} bytes")
    if size > length:
        raise CacheFault("format", f"{size - length} bytes past the entry's end")
    try:
        if checksum(view[CHECKED_FROM:]) != crc:
            raise CacheFault("checksum", "the bytes are not the ones written (crc32c)")
    except OSError as exc:  # the mapped pages could not be read (a failing disk)
        raise CacheFault("io_error", f"{type(exc).__name__}: {exc}") from exc
    end = PREFIX.size + header_length
    if end > length:
        raise CacheFault("format", f"a header of {header_length} bytes in an entry of {length}")
    return view[PREFIX.size:end], end


def open_frame(data: Any, magic: bytes, what: str) -> tuple[dict[str, Any], int]:
    """`check_frame`, for a header that is a JSON object with a key: the object."""
    raw, end = check_frame(data, magic, what)
    try:
        header = json.loads(bytes(raw))
        if not isinstance(header, dict) or "key" not in header:
            raise ValueError("no key")
    except ValueError as exc:
        raise CacheFault("format", f"unreadable header: {exc}") from exc
    return header, end


__all__ = ["CHECKED_FROM", "PREFIX", "check_frame", "open_frame", "seal", "sealed_length"]
