"""At most so many files open, by key, the least recently used closed first.

A tier keeps its chunk files (tier_chunks.ChunkCache) and its shards' indexes (sample_index.py) open
between reads. Not locked: each owner uses it under the lock that also covers its reads and writes,
so no file is closed under one.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Generic, TypeVar

File = TypeVar("File")


class OpenFiles(Generic[File]):
    def __init__(self, capacity: int, close: Callable[[File], None]) -> None:
        self.capacity = capacity
        self._close = close
        self._open: collections.OrderedDict[str, File] = collections.OrderedDict()

    def get(self, key: str) -> File | None:
        """The open file of `key`, now the most recently used; None when it is not open."""
        file = self._open.get(key)
        if file is not None:
            self._open.move_to_end(key)
        return file

    def add(self, key: str, file: File) -> File:
        """Keep `file` open as `key`'s, closing the least recently used beyond the capacity."""
        self._open[key] = file
        while len(self._open) > self.capacity:
            self._close(self._open.popitem(last=False)[1])
        return file

    def forget(self, prefix: str) -> None:
        """Close the files whose key starts with `prefix`."""
        for key in [k for k in self._open if k.startswith(prefix)]:
            self._close(self._open.pop(key))

    def __len__(self) -> int:
        return len(self._open)


__all__ = ["OpenFiles"]
