"""Where a tier holds each row of one shard's prepared samples: a file of one 8-byte slot per row.

A slot is 0 when the tier holds no entry for the row, else the chunk and the offset of the entry
(prepared_tier.py). Slots are read and written with ``pread``/``pwrite`` of 8 aligned bytes, so the
file is never mapped: a file cut short by damage is a miss, not a fault that kills the process. The
file grows with ``posix_fallocate``, which never shrinks it, so actors growing it at once lose no
slot. A slot a reader finds half-written, or pointing at another entry, is caught by the entry's
own key and checksum.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time

import numpy as np

from shardstream.service.node.open_files import OpenFiles

SLOT = struct.Struct("<Q")
GROW_ROWS = 8192  # the file grows by this many slots (64 KiB) at a time
OPEN_INDEXES = 256  # index files a process keeps open per tier
ABSENT_S = 1.0  # an index found missing is looked for again after this long (another actor may create it)
GAP_ROWS = 2048  # rows of one shard further apart than this (16 KiB of slots) are read apart
ENTRY_ALIGN = 64  # entries start at multiples of this in a chunk (their arrays at 16-byte multiples)


OFFSET_BITS = 20  # offsets / ENTRY_ALIGN: chunks of up to 64 MiB; the other 44 bits: the chunk's id + 1


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def slot_of(chunk: int, offset: int) -> int:
    """The slot of an entry at `offset` (a multiple of ENTRY_ALIGN) in chunk `chunk` (>= 0)."""
    return (chunk + 1) << OFFSET_BITS | offset // ENTRY_ALIGN


def place_of(slot: int) -> tuple[int, int]:
    """(chunk, offset) of a nonzero slot."""
    return (slot >> OFFSET_BITS) - 1, (slot & ((1 << OFFSET_BITS) - 1)) * ENTRY_ALIGN


class SampleIndex:
    """The open index files of one tier, by shard folder (at most OPEN_INDEXES, the least recently used
    closed first). Every read and write of a slot holds the lock, so no file is closed under one."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._files: OpenFiles[int] = OpenFiles(OPEN_INDEXES, _close_quietly)  # folder -> descriptor
        self._sizes: dict[str, int] = {}  # folder -> a size its open index file has reached
        self._absent: dict[str, float] = {}  # folder -> when its index was found missing
        self._lock = threading.Lock()

    def path(self, folder: str) -> str:
        return os.path.join(self.root, f"{folder}.index")

    def _fd(self, folder: str, create: bool) -> int | None:
        """The folder's open index (the caller holds the lock)."""
        fd = self._files.get(folder)
        if fd is not None:
            return fd
        if not create and time.monotonic() - self._absent.get(folder, -ABSENT_S) < ABSENT_S:
            return None  # looked for just now: a first epoch asks for each shard's rows many times
        path = self.path(folder)
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            if not create:
                self._absent[folder] = time.monotonic()
                return None
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._absent.pop(folder, None)
        self._sizes[folder] = 0  # not known yet: this may be another file than the one last opened
        return self._files.add(folder, fd)

    def get(self, folder: str, row: int) -> int:
        """The row's slot (0: not held). OSError when the index cannot be read."""
        with self._lock:
            fd = self._fd(folder, create=False)
            if fd is None:
                return 0
            data = os.pread(fd, SLOT.size, row * SLOT.size)
        return SLOT.unpack(data)[0] if len(data) == SLOT.size else 0

    def get_many(self, folder: str, rows: np.ndarray) -> np.ndarray:
        """uint64 slots of `rows` (0: not held): one read per run of rows no more than GAP_ROWS
        apart (a shuffled batch's rows of a shard of 100,000 rows are one run, 800 KB), so a read
        covers either rows asked for or few enough slots between them to cost less than a call
        each. OSError as `get`."""
        found = self.get_shards([(folder, rows)])[0]
        if isinstance(found, OSError):
            raise found
        return found

    def get_shards(self, wanted: list[tuple[str, np.ndarray]]) -> list[np.ndarray | OSError]:
        """`get_many` of each (folder, rows), under one hold of the lock: a batch's rows of all its
        shards (the error reading one folder's index in its place)."""
        out: list[np.ndarray | OSError] = []
        with self._lock:
            for folder, rows in wanted:
                try:
                    out.append(self._slots(folder, rows))
                except OSError as exc:
                    out.append(exc)
        return out

    def _slots(self, folder: str, rows: np.ndarray) -> np.ndarray:
        """`get_many` (the caller holds the lock)."""
        fd = self._fd(folder, create=False) if len(rows) else None
        if fd is None:
            return np.zeros(len(rows), dtype=np.uint64)
        low, high = int(rows.min()), int(rows.max())
        runs: list[tuple[np.ndarray | None, int, int]]  # (positions in `rows`, None: all of them; first; last row)
        if high - low <= GAP_ROWS:  # one run (a shard of up to GAP_ROWS rows always is)
            runs = [(None, low, high)]
        else:
            order = np.argsort(rows, kind="stable")
            runs = [(run, int(rows[run[0]]), int(rows[run[-1]]))
                    for run in np.split(order, np.flatnonzero(np.diff(rows[order]) > GAP_ROWS) + 1)]
        slots = np.zeros(len(rows), dtype=np.uint64)
        for run, first, last in runs:
            data = os.pread(fd, (last - first + 1) * SLOT.size, first * SLOT.size)
            held = np.frombuffer(data, dtype="<u8", count=len(data) // SLOT.size)
            wanted = (rows if run is None else rows[run]) - first
            if run is None and len(held) == last - first + 1:  # the file holds every row asked for
                return held[wanted]
            within = wanted < len(held)  # a file shorter than the rows: those are not held
            slots[within if run is None else run[within]] = held[wanted[within]]
        return slots

    def set(self, folder: str, row: int, slot: int) -> None:
        with self._lock:
            fd = self._fd(folder, create=True)
            assert fd is not None
            end = (row // GROW_ROWS + 1) * GROW_ROWS * SLOT.size
            if self._sizes.get(folder, 0) < end:  # the open file never shrinks: a size seen holds
                size = os.fstat(fd).st_size
                if size < end:
                    os.posix_fallocate(fd, 0, end)
                self._sizes[folder] = max(size, end)
            os.pwrite(fd, SLOT.pack(slot), row * SLOT.size)

    def clear(self, folder: str, row: int, slot: int) -> None:
        """Set the row's slot to 0 if it still holds `slot` (a refused entry; another actor may have
        stored a sound one meanwhile)."""
        with contextlib.suppress(OSError):
            if self.get(folder, row) == slot:
                self.set(folder, row, 0)

    def rows(self, folder: str) -> dict[int, int]:
        """row -> slot, for every row held."""
        with self._lock:
            fd = self._fd(folder, create=False)
            if fd is None:
                return {}
            data = os.pread(fd, os.fstat(fd).st_size, 0)
        count = len(data) // SLOT.size
        return {row: slot for row, slot in enumerate(struct.unpack(f"<{count}Q", data[:count * SLOT.size])) if slot}

    def forget(self, prefix: str) -> None:
        """Close the files of folders under `prefix` (a dataset removed to make room)."""
        with self._lock:
            self._files.forget(prefix)

    def close(self) -> None:
        self.forget("")


__all__ = ["ENTRY_ALIGN", "SampleIndex", "place_of", "slot_of"]
