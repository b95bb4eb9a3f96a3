"""A tier's chunk files: allocated, surveyed, and opened for entries to be written and read.

A chunk is a file (of up to CHUNK_BYTES) that one actor appends a dataset's entries to (prepared_tier.py).
It is allocated whole (``posix_fallocate``) when an actor needs one: on a tmpfs the kernel then
allocates, zeroes and accounts its pages in one call, about 50 us per 200 KB sample on this
project's test machines against 80-100 us for a file per sample (``python -m
bench.cache_write_cost``). Entries go in and out by ``pwritev``/``preadv``, never through a
mapping: there each first touch of a mapped 4 KiB page costs 1-3 us (about 140 us for a 200 KB
sample, more than the copy), while a call copies the same sample in 15-30 us. A chunk cut short by
damage then reads short: a miss, not a fault that kills the process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from dataclasses import dataclass

import numpy as np

from shardstream.service.node.open_files import OpenFiles

CHUNK_BYTES = 32 << 20
FREE = "free"  # the directory of chunks allocated and not claimed: given back by a dataset removed
MAX_CHUNK_ID = 1 << 43  # ids are random below this (sample_index.py keeps 43 bits for one)
OPEN_CHUNKS = 256  # chunk files a process keeps open per tier (least recently used closed first)


def chunk_id(name: str) -> int | None:
    return int(name) if name.isdigit() else None


def chunk_size_for(bound: int) -> int:
    """The chunk size of a tier of `bound` bytes: CHUNK_BYTES, or a sixteenth of a small tier (at
    least 1 MiB), so what a partly filled chunk leaves unused stays small beside the tier."""
    return max(1 << 20, min(CHUNK_BYTES, bound // 16 >> 20 << 20))


@dataclass(frozen=True)
class Survey:
    free_bytes: int  # chunks allocated and unclaimed
    claimed_bytes: int  # chunks datasets hold

    @property
    def allocated_bytes(self) -> int:
        return self.free_bytes + self.claimed_bytes


def survey(root: str) -> Survey:
    free = claimed = 0
    with contextlib.suppress(FileNotFoundError):
        for directory in os.scandir(root):
            if not directory.is_dir(follow_symlinks=False):
                continue
            size = 0
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(directory.path):
                    if chunk_id(entry.name) is not None:
                        with contextlib.suppress(FileNotFoundError):
                            size += entry.stat(follow_symlinks=False).st_size
            if directory.name == FREE:
                free += size
            else:
                claimed += size
    return Survey(free, claimed)


def add_chunk(root: str, size: int, into: str = FREE) -> int:
    """Allocate one chunk of `size` bytes into the tier's directory `into` (a dataset's, or free/);
    its id. Ids are random (2**43 of them): the node's actors allocate at once without a lock, and an
    id is never given twice in practice, so a chunk renamed into place never replaces another."""
    chunk = secrets.randbelow(MAX_CHUNK_ID)
    directory = os.path.join(root, into)
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{chunk}.tmp")
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    finally:
        os.close(fd)
    os.rename(temp, os.path.join(directory, str(chunk)))
    return chunk


def allocate(root: str, chunks: int, chunk_bytes: int = CHUNK_BYTES) -> None:
    """Allocate `chunks` free chunks ahead (bench.cache_write_cost times the allocation apart)."""
    for _ in range(chunks):
        add_chunk(root, chunk_bytes)


class OpenChunk:
    """One chunk file, open for reading entries (and appending them, for the actor that claimed it)."""

    def __init__(self, path: str, writable: bool = False) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def write(self, offset: int, parts: list[bytes | memoryview]) -> None:
        os.pwritev(self.fd, parts, offset)

    def read(self, offset: int, length: int) -> np.ndarray:
        """`length` bytes from `offset`; fewer when the file is, or has become, shorter (damage). A
        damaged length never allocates more than the chunk's size."""
        return self.read_into(np.empty(min(length, max(0, self.size - offset)), np.uint8), offset)

    def read_into(self, out: np.ndarray, offset: int) -> np.ndarray:
        """`out`'s bytes from `offset`, or as many as the chunk holds there: the part of `out` read."""
        out = out[: max(0, self.size - offset)]
        return out[: os.preadv(self.fd, [out.data], offset) if len(out) else 0]

    def close(self) -> None:
        os.close(self.fd)


class ChunkCache:
    """The chunk files one process has open in one tier, the least recently used closed first."""

    def __init__(self, capacity: int = OPEN_CHUNKS) -> None:
        self._open: OpenFiles[OpenChunk] = OpenFiles(capacity, OpenChunk.close)
        self._lock = threading.Lock()

    def read(self, path: str, offset: int, length: int) -> np.ndarray:
        """`length` bytes of the chunk at `path` from `offset` (fewer when it is shorter); OSError
        (FileNotFoundError) when it cannot be read. Under the lock, so no other thread closes the
        file while it is read."""
        with self._lock:
            chunk = self._open.get(path) or self._open.add(path, OpenChunk(path))
            return chunk.read(offset, length)

    def read_many(self, places: list[tuple[str, int]], length: int) -> list[np.ndarray | OSError]:
        """`length` bytes (fewer where a chunk ends sooner) at each (path, offset), into one buffer,
        under one hold of the lock; an OSError in place of a read that failed."""
        out = np.empty(len(places) * length, np.uint8)
        got: list[np.ndarray | OSError] = []
        with self._lock:
            last_path, chunk = "", None
            for n, (path, offset) in enumerate(places):
                try:
                    if path != last_path:
                        last_path, chunk = path, self._open.get(path) or self._open.add(path, OpenChunk(path))
                    assert chunk is not None
                    got.append(chunk.read_into(out[n * length: (n + 1) * length], offset))
                except OSError as exc:
                    last_path = ""
                    got.append(exc)
        return got

    def forget(self, prefix: str) -> None:
        """Close the chunks whose path starts with `prefix` (a dataset moved away, a damaged chunk)."""
        with self._lock:
            self._open.forget(prefix)


__all__ = ["CHUNK_BYTES", "FREE", "ChunkCache", "OpenChunk", "Survey", "add_chunk", "allocate", "chunk_id",
           "chunk_size_for", "survey"]
