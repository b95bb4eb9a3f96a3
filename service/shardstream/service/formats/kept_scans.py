"""What a format learns by scanning a file at open (a tar's member table, a JSON Lines file's line
starts), kept by file version: a file is scanned once however many jobs open it, and the scans
kept are bounded (least recently used go first)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Scan = TypeVar("Scan")


class KeptScans(Generic[Scan]):
    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._scans: OrderedDict[Hashable, Scan] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, scan: Callable[[], Scan]) -> Scan:
        """The scan kept for `key` (a file's URL, size and version, ...), else `scan()`'s, kept.
        Two callers may scan the same file at once; both get equal scans."""
        with self._lock:
            found = self._scans.get(key)
            if found is not None:
                self._scans.move_to_end(key)
                return found
        made = scan()  # outside the lock: other files' scans go on meanwhile
        with self._lock:
            self._scans[key] = made
            while len(self._scans) > self.kept:
                self._scans.popitem(last=False)
        return made


__all__ = ["KeptScans"]
