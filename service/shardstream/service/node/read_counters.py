"""What a decode actor's reads cost: bytes from storage, and hits and misses per cache tier.

An actor sends the counters that grew since its last batch along with each
batch (`ReadCounters.take_delta`), so the pool sums them per node without an
extra call. The tiers' sizes are levels, not counts: the newest report wins.
Two caches are counted: row groups (the actor's LRU, the node's local copy)
and prepared samples (node/prepared_cache.py), with the entries either refused
on reading (cache_fault.py) and the time spent verifying entries.
"""

from __future__ import annotations

import threading

from shardstream.service.node_messages import ReadCounters


class SharedReadCounters:
    """ReadCounters updated from several threads (an actor's parallel row-group fetches)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since_last = ReadCounters()
        self.disk_bytes = 0
        self.prepared_bytes = (0, 0)  # (memory tier, disk tier)

    def count(self, **deltas: float) -> None:
        with self._lock:
            for name, value in deltas.items():
                setattr(self._since_last, name, getattr(self._since_last, name) + value)

    def fault(self, cache: str, cause: str) -> None:
        """An entry of `cache` refused on reading, for `cause` (cache_fault.py)."""
        with self._lock:
            faults = self._since_last.faults
            faults[cache, cause] = faults.get((cache, cause), 0) + 1

    def verified(self, seconds: float, nbytes: int) -> None:
        """Time spent verifying `nbytes` of cache entries."""
        with self._lock:
            self._since_last.verify_seconds += seconds
            self._since_last.verified_bytes += nbytes

    def set_disk_bytes(self, nbytes: int) -> None:
        with self._lock:
            self.disk_bytes = nbytes

    def set_prepared_bytes(self, memory: int, disk: int) -> None:
        with self._lock:
            self.prepared_bytes = (memory, disk)

    def take_delta(self) -> ReadCounters:
        """What grew since the last call (and the levels), resetting the counts."""
        with self._lock:
            delta, self._since_last = self._since_last, ReadCounters()
            delta.disk_bytes = self.disk_bytes
            delta.prepared_memory_bytes, delta.prepared_disk_bytes = self.prepared_bytes
            return delta


__all__ = ["SharedReadCounters"]
