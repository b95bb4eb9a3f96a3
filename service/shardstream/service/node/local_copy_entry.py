"""One row group of the local copy as a file: its own key, a checksum, and the Arrow IPC bytes.

The file proves what it is each time an actor maps it: which row group it holds (the shard's
identity with its version, the row group, the columns) and that its bytes are the ones written.
A file that fails is refused with a CacheFault (cache_fault.py), and the row group is fetched
from storage again.

Layout (little-endian)::

    0   magic  b"SSCOPY2\\n"
    8   u32    CRC32C of every byte from offset 12 to the end
    12  u32    header length
    16  u64    the file's whole length
    24  header JSON {"key": [shard identity, row group, columns or null]}
        padding to a multiple of 64, then an uncompressed Arrow IPC file, mapped without copying
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.entry_frame import PREFIX, open_frame, seal

MAGIC = b"SSCOPY2\n"
FORMAT = 2  # part of every file's name: files of an older format are never looked up
ALIGN = 64  # Arrow's preferred buffer alignment


def key_fields(shard_identity: str, row_group: int, columns: Sequence[str] | None) -> list[Any]:
    """A row group's key as the header stores it."""
    return [shard_identity, row_group, list(columns) if columns is not None else None]


def write_entry(path: str, key: list[Any], table: pa.Table) -> int:
    """Write the row group's file at `path` (a temporary name: the caller renames it); its size."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    payload = sink.getvalue()
    header = json.dumps({"key": key}).encode()
    pad = b"\0" * (-(PREFIX.size + len(header)) % ALIGN)
    length = PREFIX.size + len(header) + len(pad) + payload.size
    with open(path, "wb") as f:
        f.writelines(seal(MAGIC, header, [pad, memoryview(payload)], length))
    return length


Stamp = tuple[int, int, int]  # a file's (inode, size, mtime in ns): any write or replacement changes it


def stamp_of(st: os.stat_result) -> Stamp:
    return st.st_ino, st.st_size, st.st_mtime_ns


@dataclass(frozen=True)
class MappedEntry:
    table: pa.Table  # the row group, its buffers views of the mapped file
    stamp: Stamp  # the file as verified: a file written in place or replaced since has another
    nbytes: int
    verify_seconds: float


def read_entry(path: str, key: list[Any]) -> MappedEntry | None:
    """The row group at `path`, memory-mapped and verified to be `key`'s; None when there is no
    file. CacheFault when the file cannot be read or does not prove to be that row group."""
    try:
        with pa.memory_map(path) as mapped:
            stamp = stamp_of(os.fstat(mapped.fileno()))
            data = mapped.read_buffer(mapped.size())
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowException) as exc:  # a directory in the file's place, no permission, EIO
        raise CacheFault("io_error", f"{type(exc).__name__}: {exc}") from exc
    started = time.perf_counter()
    stored_header, start = open_frame(data, MAGIC, "local-copy")
    stored = stored_header["key"]
    if stored != key:
        raise CacheFault("key", f"holds row group {stored[1:]} of {stored[0]!r}, not {key[1:]} of {key[0]!r}"
                         if isinstance(stored, list) and len(stored) == 3 else f"holds {stored!r}, not {key!r}")
    start += -start % ALIGN
    try:
        table = pa.ipc.open_file(data.slice(start)).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise CacheFault("format", f"unreadable Arrow IPC: {exc}") from exc
    return MappedEntry(table, stamp, int(data.size), time.perf_counter() - started)


__all__ = ["FORMAT", "MappedEntry", "Stamp", "key_fields", "read_entry", "stamp_of", "write_entry"]
