"""What a decode actor's reads cost: bytes from storage, and hits and misses per cache tier.

An actor sends the counters that grew since its last batch along with each
batch (`ReadCounters.take_delta`), so the pool sums them per node without an
extra call. The disk tier's size is a level, not a count: the newest report
wins.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

TIERS = ("memory", "disk")


@dataclass
class ReadCounters:
    storage_bytes: int = 0  # bytes read from the dataset's store (footers included)
    storage_reads: int = 0  # row groups read from the store
    memory_hits: int = 0  # row groups found in the actor's in-memory LRU
    memory_misses: int = 0
    disk_hits: int = 0  # row groups found in the node's local copy
    disk_misses: int = 0
    disk_bytes: int = 0  # level: bytes the node's local copy holds (last known)

    def add(self, other: ReadCounters) -> None:
        """Sum `other` into these counters; the disk level is replaced where `other` knows it."""
        for f in dataclasses.fields(self):
            if f.name != "disk_bytes":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        if other.disk_bytes:
            self.disk_bytes = other.disk_bytes

    def hits(self, tier: str) -> int:
        return int(getattr(self, f"{tier}_hits"))

    def misses(self, tier: str) -> int:
        return int(getattr(self, f"{tier}_misses"))


class SharedReadCounters:
    """ReadCounters updated from several threads (an actor's parallel row-group fetches)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since_last = ReadCounters()
        self.disk_bytes = 0

    def count(self, **deltas: int) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self._since_last, name, getattr(self._since_last, name) + value)

    def set_disk_bytes(self, nbytes: int) -> None:
        with self._lock:
            self.disk_bytes = nbytes

    def take_delta(self) -> ReadCounters:
        """What grew since the last call (and the disk level), resetting the counts."""
        with self._lock:
            delta, self._since_last = self._since_last, ReadCounters()
            delta.disk_bytes = self.disk_bytes
            return delta


__all__ = ["TIERS", "ReadCounters", "SharedReadCounters"]
