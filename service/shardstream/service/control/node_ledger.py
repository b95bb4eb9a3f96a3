"""What the pool knows of each decode node, beyond its actors: what reading cost there, summed over
every actor the node ran, and the bounds its prepared-sample cache got (node/cache_sizing.py)."""

from __future__ import annotations

import dataclasses
import logging
import threading

from shardstream.service.node_messages import CacheSizing, ReadCounters

log = logging.getLogger(__name__)


class NodeLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: dict[str, ReadCounters] = {}  # node id -> what its actors' reads cost, all time
        self._cache_sizing: dict[str, CacheSizing] = {}  # node id -> what its newest actor chose

    def add_reads(self, node_id: str, reads: ReadCounters) -> None:
        with self._lock:
            self._reads.setdefault(node_id, ReadCounters()).add(reads)

    def note_cache_sizing(self, node_id: str, sizing: CacheSizing) -> None:
        """Keep the bounds a node's actor chose; logged once per node and change."""
        with self._lock:
            known, self._cache_sizing[node_id] = self._cache_sizing.get(node_id), sizing
        if known != sizing:
            log.info("prepared-sample cache on node %s: memory tier %.2f GB (%s); disk tier %.2f GB (%s)",
                     node_id[:12], sizing.memory.bytes / 1e9, sizing.memory.reason, sizing.disk.bytes / 1e9,
                     sizing.disk.reason)

    def reads_by_node(self) -> dict[str, ReadCounters]:
        """Storage bytes read and cache hits and misses, summed per node over every actor it ran."""
        with self._lock:
            return {node: dataclasses.replace(reads) for node, reads in self._reads.items()}

    def cache_sizing_by_node(self) -> dict[str, CacheSizing]:
        """The prepared-sample cache's bounds on each node, as its newest actor chose them."""
        with self._lock:
            return dict(self._cache_sizing)


__all__ = ["NodeLedger"]
