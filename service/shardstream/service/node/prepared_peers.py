"""The other decode nodes' prepared-sample caches: each sample has a home node, asked before preparing.

A shuffled batch is a new random draw every epoch, so its samples were
prepared on every decode node in proportion: whichever node makes the batch
finds about 1/n of them in its own tiers (docs/prepared-cache.md,
"Locality"). So each prepared sample has a home node, picked by rendezvous
hashing of its key over the nodes that run decode actors, and a decoder:

- looks in its own node's tiers first;
- asks the homes for what it lacks: one call per home per batch, every home
  at once, within PEER_TIMEOUT_S (a slow or lost home costs a local prepare,
  never the batch);
- prepares the rest, keeps what is its own node's, and gives each home a copy
  of its samples (a call that is not waited for).

From the second epoch on each sample is then prepared once in the cluster,
and the cluster's tiers hold n nodes' worth of distinct samples. Samples
travel as the cache's own files, the same bytes whichever node prepared them,
so a batch is the same with peers, without them, or with the cache off.
Each file proves what it is (prepared_entry.py): the home verifies it before
sending it and before keeping one given to it, and the node that receives it
verifies its key and checksum again; one that fails is prepared there
(prepared_cache.py).

Peers call each other's decode actors through Ray, the transport and trust
boundary the service's actors already share, so this needs no port, TLS
setting or proto of its own. The pool tells every actor which actors run on
which node whenever that changes (`DecodePool._share_peers`).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections.abc import Sequence
from typing import Any

import ray

log = logging.getLogger(__name__)

PEER_TIMEOUT_S = 5.0  # a batch waits at most this long for the homes of its samples
FileKey = tuple[str, int]  # (the dataset's folder in the tiers, row)


def _score(key: str, node: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{node}".encode(), digest_size=8).digest(), "big")


class PreparedPeers:
    """This actor's view of the decode nodes: who is home to a sample, and how to reach it."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._nodes: dict[str, list[Any]] = {node_id: []}  # node id -> its decode actors' handles
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def set_nodes(self, nodes: dict[str, list[Any]]) -> None:
        """The decode actors of every node, this one's included."""
        with self._lock:
            self._nodes = {**nodes, self.node_id: nodes.get(self.node_id, [])}

    @property
    def active(self) -> bool:
        """Whether any other node runs decode actors (else every sample is this node's)."""
        with self._lock:
            return len(self._nodes) > 1

    def home(self, folder: str, row: int) -> str:
        """The node a prepared sample belongs to."""
        key = f"{folder}/{row}"
        with self._lock:
            nodes = list(self._nodes)
        return max(nodes, key=lambda node: _score(key, node))

    def fetch(self, wanted: dict[str, list[FileKey]]) -> dict[FileKey, bytes]:
        """Ask each home (node id -> keys) for its files at once; what they had, by key. A home
        that fails or does not answer in time gives nothing: its samples are prepared here."""
        calls: dict[Any, list[FileKey]] = {}
        for node, keys in wanted.items():
            actor = self._actor_on(node)
            if actor is not None and keys:
                calls[actor.prepared_files.remote(keys)] = keys
        if not calls:
            return {}
        ready, late = ray.wait(list(calls), num_returns=len(calls), timeout=PEER_TIMEOUT_S)
        if late:
            log.warning("%d home node(s) did not answer for prepared samples within %.0f s: preparing their "
                        "samples here", len(late), PEER_TIMEOUT_S)
        found: dict[FileKey, bytes] = {}
        for ref in ready:
            try:
                files: Sequence[bytes | None] = ray.get(ref)
            except Exception as exc:  # the home died or failed: prepare here
                log.warning("a home node could not send prepared samples: %s", exc)
                continue
            found.update((key, data) for key, data in zip(calls[ref], files, strict=True) if data is not None)
        return found

    def give(self, node: str, files: list[tuple[str, int, bytes]]) -> None:
        """Hand a home the samples of its own prepared here; not waited for (a lost copy is
        prepared again by whoever next lacks it)."""
        actor = self._actor_on(node)
        if actor is not None and files:
            actor.keep_prepared_files.remote(files)

    def _actor_on(self, node: str) -> Any:
        """One of the node's actors, in turn (None for this node or an unknown one)."""
        if node == self.node_id:
            return None
        with self._lock:
            actors = self._nodes.get(node) or []
            return actors[next(self._turn) % len(actors)] if actors else None


__all__ = ["PEER_TIMEOUT_S", "FileKey", "PreparedPeers"]
