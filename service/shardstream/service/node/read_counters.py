"""What a decode actor's reads cost: bytes from storage, and hits and misses per cache tier.

An actor sends the counters that grew since its last batch along with each
batch (`ReadCounters.take_delta`), so the pool sums them per node without an
extra call. The tiers' sizes are levels, not counts: the newest report wins.
Two caches are counted: row groups (the actor's LRU, the node's local copy)
and prepared samples (node/prepared_cache.py), with the entries either refused
on reading (cache_fault.py) and the time spent verifying entries.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

TIERS = ("memory", "disk")
# Where a cache entry is read and verified: the prepared cache's tiers, a sample sent by its home
# node, and the local copy of row groups.
FAULT_CACHES = ("memory", "disk", "peer", "local_copy")
LEVELS = ("disk_bytes", "prepared_memory_bytes", "prepared_disk_bytes")


@dataclass
class ReadCounters:
    storage_bytes: int = 0  # bytes read from the dataset's store (footers included)
    storage_reads: int = 0  # row groups read from the store
    memory_hits: int = 0  # row groups found in the actor's in-memory LRU
    memory_misses: int = 0
    disk_hits: int = 0  # row groups found in the node's local copy
    disk_misses: int = 0
    disk_bytes: int = 0  # level: bytes the node's local copy holds (last known)
    prepared_memory_hits: int = 0  # samples found prepared in the node's memory tier
    prepared_disk_hits: int = 0  # ... in its disk tier
    prepared_peer_hits: int = 0  # ... at their home node (another node: prepared_peers.py)
    prepared_misses: int = 0  # samples found nowhere (read and prepared), with the cache on
    prepared_deferred: int = 0  # ... of those, not kept: the write budget was spent (write_budget.py)
    prepared_memory_bytes: int = 0  # levels: bytes each prepared-sample tier holds (last known)
    prepared_disk_bytes: int = 0
    verify_seconds: float = 0.0  # spent checking cache entries' keys and checksums (both caches)
    verified_bytes: int = 0  # ... over this many bytes
    keep_seconds: float = 0.0  # spent keeping prepared samples: encoding, checksums, writes (write_budget.py)
    faults: dict[tuple[str, str], int] = field(default_factory=dict)  # (cache, cause) -> entries refused

    def __post_init__(self) -> None:
        self.faults = dict(self.faults)  # a copy (dataclasses.replace) never shares the counts

    def add(self, other: ReadCounters) -> None:
        """Sum `other` into these counters; levels are replaced where `other` knows them."""
        for key, count in other.faults.items():
            self.faults[key] = self.faults.get(key, 0) + count
        for f in dataclasses.fields(self):
            if f.name == "faults":
                continue
            if f.name not in LEVELS:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
            elif getattr(other, f.name):
                setattr(self, f.name, getattr(other, f.name))

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


__all__ = ["FAULT_CACHES", "LEVELS", "TIERS", "ReadCounters", "SharedReadCounters"]
