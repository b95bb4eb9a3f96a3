"""One job's view of the node's prepared-sample cache (prepared_cache.py): its samples by global
index, looked up a batch at a time (this node's tiers, then the samples' home nodes), and kept
within the job's bound and the actor's write budget."""

from __future__ import annotations

import bisect
import collections
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardstream.service.dataset import DatasetIndex
from shardstream.service.node.cache_fault import CacheFault, record_fault
from shardstream.service.node.entry_frame import sealed_length
from shardstream.service.node.prepared_entry import SampleKey, decode_entry, encode_entry, folder_of
from shardstream.service.node.prepared_peers import PreparedPeers
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.write_budget import REUSE_HIT_RATE

if TYPE_CHECKING:
    from shardstream.service.node.prepared_cache import PreparedCache

log = logging.getLogger(__name__)

HIT_RATE_WEIGHT = 0.1  # each batch's lookups move a job's hit rate this far towards theirs
MAKING_WEIGHT = 0.1  # each new value moves a learnt per-sample cost (`_moved`) this far towards its own


def _moved(average: float | None, value: float) -> float:
    """An average over about the last ten values, `value` the newest."""
    return value if average is None else average + MAKING_WEIGHT * (value - average)


def _by_shard(shards: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(shard, the positions of `shards` holding it, ascending) for each shard, ascending."""
    order = np.argsort(shards, kind="stable")
    ordered = shards[order]
    bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), len(order)]
    return [(int(ordered[start]), order[start:end]) for start, end in itertools.pairwise(bounds) if end > start]


@dataclass
class JobSamples:
    """One job's view of the cache: samples by global index. `max_bytes` (the service's
    job_max_cache_bytes): the most this view keeps from this actor; beyond it the job's samples are
    prepared but not kept, so one large job cannot evict every other job's samples."""

    cache: PreparedCache
    index: DatasetIndex
    identity: str
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        self._starts = [int(start) for start in self.index.file_starts]  # bisect: a tenth of searchsorted's cost
        self._start_array = np.asarray(self._starts, dtype=np.int64)  # a batch's shards, by one searchsorted
        self._shards = [s.identity for s in self.index.shards]
        self._folders = [folder_of(self.identity, shard) for shard in self._shards]
        self._gifts: dict[str, list[tuple[str, int, bytes]]] = {}  # home node -> samples prepared here for it
        self._lock = threading.Lock()
        self.kept_bytes = 0  # what this view stored or gave its homes
        self.at_bound = False  # a sample did not fit within max_bytes: the job keeps no more
        self.hit_rate = 0.0  # of the job's recent lookups (about the last ten batches): what its writes may spend
        # Once its lookups have found samples kept before, the job is one the cache serves for good: a
        # first epoch that kept a few percent gives a second pass a hit rate that the average of ten
        # batches would now and then take below REUSE_HIT_RATE, and its share with it.
        self.reuses = False
        self._making_s: float | None = None  # seconds a batch call takes per sample when it keeps none (`made`)
        # Seconds keeping one sample has cost, recently: making it beyond the batch's own work (`made`),
        # and writing it (`put_many`): what `keeps_now` asks the write budget to cover.
        self._making_kept_s: float | None = None
        self._writing_s: float | None = None

    def _within_limit(self, size: int) -> bool:
        with self._lock:
            if self.max_bytes is not None and self.kept_bytes + size > self.max_bytes:
                self.at_bound = True
                return False
            self.kept_bytes += size
            return True

    def _key(self, index: int) -> SampleKey:
        shard = bisect.bisect_right(self._starts, index) - 1
        return self._key_in(shard, int(index - self._starts[shard]))

    def _key_in(self, shard: int, row: int) -> SampleKey:
        return SampleKey(self.identity, self._shards[shard], row)

    def _peers(self) -> PreparedPeers | None:
        peers = self.cache.peers
        return peers if peers is not None and peers.active else None

    def get(self, index: int) -> dict[str, Any] | None:
        return self.get_many([index]).get(0)

    def get_many(self, indices: Sequence[int]) -> dict[int, dict[str, Any]]:
        """position -> sample, for the samples found: in this node's tiers, else at their home node
        (all homes asked at once). Keys are made only for the samples a tier holds (or a home is
        asked for): a first epoch's batch, which finds none, makes none."""
        found: dict[int, dict[str, Any]] = {}
        counts: collections.Counter[str] = collections.Counter()
        column = np.asarray(indices, dtype=np.int64)
        shards = np.searchsorted(self._start_array, column, side="right") - 1
        rows = column - self._start_array[shards]
        groups = _by_shard(shards)  # (shard, its positions) of the positions no tier has given yet
        for tier in self.cache.tiers:
            if not groups:
                break
            held = self._held(tier, groups, rows)
            found.update(held)
            counts[f"prepared_{tier.name}_hits"] += len(held)
            if held:
                groups = [(shard, kept) for shard, at in groups
                          if len(kept := np.array([p for p in at.tolist() if p not in held], dtype=np.int64))]
        peers = self._peers()
        lacking: dict[str, list[tuple[int, SampleKey]]] = {}  # home node -> (position, key)
        if peers is not None:
            for shard, at in groups:
                for position in at.tolist():
                    key = self._key_in(shard, int(rows[position]))
                    home = peers.home(key.folder, key.row)
                    if home is not None and home != peers.node_id:
                        lacking.setdefault(home, []).append((position, key))
        if peers is not None and lacking:
            files = peers.fetch({home: [(key.folder, key.row) for _, key in wanted]
                                 for home, wanted in lacking.items()})
            for home, wanted in lacking.items():
                for position, key in wanted:
                    sample = self._from_home(home, key, files.get((key.folder, key.row)))
                    if sample is not None:
                        found[position] = sample
                        counts["prepared_peer_hits"] += 1
        counts["prepared_misses"] += len(indices) - len(found)
        self.cache.counters.count(**counts)
        if len(indices):
            self.hit_rate += HIT_RATE_WEIGHT * (len(found) / len(indices) - self.hit_rate)
            self.reuses = self.reuses or self.hit_rate >= REUSE_HIT_RATE
        return found

    def _held(self, tier: SampleTier, groups: list[tuple[int, np.ndarray]],
              rows: np.ndarray) -> dict[int, dict[str, Any]]:
        """position -> the sample `tier` holds for it, verified (not held, or refused: absent), of the
        batch's positions by shard (`groups`; a position's row is `rows[position]`): the index of
        every shard folder read at once, and the entries of a folder read together."""
        out: dict[int, dict[str, Any]] = {}
        wanted = [rows[at] for _, at in groups]
        found = tier.slots([(self._folders[shard], shard_rows)
                                      for (shard, _), shard_rows in zip(groups, wanted, strict=True)])
        for (shard, at), shard_rows, slots in zip(groups, wanted, found, strict=True):
            if isinstance(slots, CacheFault):  # each key alone, so each counts its fault
                for position, row in zip(at.tolist(), shard_rows.tolist(), strict=True):
                    sample = self.cache.load(tier, self._key_in(shard, row))
                    if sample is not None:
                        out[position] = sample
                continue
            hits = np.flatnonzero(slots)
            if not len(hits):
                continue
            held_rows, held_slots = shard_rows[hits].tolist(), slots[hits].tolist()
            loaded = self.cache.load_many(tier, [self._key_in(shard, row) for row in held_rows], held_slots)
            for position, sample in zip(at[hits].tolist(), loaded, strict=True):
                if sample is not None:
                    out[position] = sample
        return out

    def _from_home(self, home: str, key: SampleKey, data: bytes | None) -> dict[str, Any] | None:
        """The sample a home node sent, verified to be `key`'s; None when it sent none or the
        entry is refused (counted as a fault of the peer cache)."""
        if data is None:
            return None
        try:
            started = time.perf_counter()
            sample = decode_entry(bytearray(data), key)
            self.cache.counters.verified(time.perf_counter() - started, len(data))
            return sample
        except CacheFault as fault:
            record_fault(self.cache.counters, "peer", f"node {home}: {key.folder}/{key.row}", fault)
            return None

    def keeps_now(self, count: int = 1) -> bool:
        """Whether `count` samples prepared now are to be kept (then `put` each). Not when nothing
        could keep them: every tier of this node full (and no other node's cache to give them
        to), or the job at its bound; making a sample to keep costs work of its own (a JPEG
        decoded whole), so a job larger than the cache would pay it for every miss. Not when the
        actor's write budget (write_budget.py, at the share this job's hit rate gives it) does not
        cover keeping them, at what keeping a sample has cost this job lately, either: they are
        then counted as deferred, kept when prepared again in a later epoch. Paying before, not
        after, a batch kept at a small share leaves no debt that the job would go on repaying
        once its share has grown."""
        if self.at_bound or (self._peers() is None and not self.cache.accepting()):
            return False
        available = self.cache.budget.available(self._share_rate())
        each = (self._making_kept_s or 0.0) + (self._writing_s or 0.0)
        if available > 0 and available >= count * each:  # (no cost learnt yet: this batch teaches it)
            return True
        self.cache.counters.count(prepared_deferred=count)
        return False

    def put(self, index: int, sample: dict[str, Any]) -> None:
        """Keep a sample prepared here (after `keeps_now`): in this node's tiers when it is its
        home, else as a copy for its home, sent by `send_to_homes`."""
        self.put_many({index: sample})

    def put_many(self, samples: dict[int, dict[str, Any]]) -> None:
        """`put` of each (index -> sample); a sample the cache fails to keep costs a warning, never
        the others. The time they take is spent from the write budget at once: the time passing
        on this (the decode) thread, which is what keeping costs the batch. Its CPU time alone
        would charge an actor that shares its core less than the batch loses."""
        started, claims = time.perf_counter(), self.cache.claims()
        try:
            for index, sample in samples.items():
                try:
                    self._keep(index, sample)
                except Exception:
                    log.warning("cannot cache prepared sample %d", index, exc_info=True)
        finally:
            self.cache.publish()
            seconds = time.perf_counter() - started
            self._charge(seconds)
            # A write that claimed a chunk (a job's first, or a tier growing) paid for space the next
            # thousands of samples use: what it cost says nothing of what keeping one sample costs.
            if samples and self.cache.claims() == claims:
                self._writing_s = _moved(self._writing_s, seconds / len(samples))

    def made(self, seconds: float, count: int, kept: int) -> None:
        """A batch call made `count` samples in `seconds` (time passing, as `put_many` counts), and for
        `kept` of them also the prepared sample to keep, from the same work (a JPEG decoded whole beside its
        crop): more work than the samples alone, and a cost of keeping them. What a call takes per
        sample when it keeps none is learnt; a call that keeps is charged to the write budget what
        it took beyond that (all of it before any call has kept none)."""
        if count <= 0:
            return
        if kept == 0:
            self._making_s = _moved(self._making_s, seconds / count)
            return
        extra = seconds if self._making_s is None else seconds - count * self._making_s
        if extra > 0:
            self._charge(extra)
        if self._making_s is not None:  # (before, `extra` is all of the call's time)
            self._making_kept_s = _moved(self._making_kept_s, max(0.0, extra) / kept)

    def _share_rate(self) -> float:
        """The hit rate the job's share follows (write_budget.share_for): all of them once it reuses."""
        return 1.0 if self.reuses else self.hit_rate

    def _charge(self, seconds: float) -> None:
        """`seconds` of keeping, spent from the write budget and counted for the metric."""
        self.cache.budget.spent(seconds, self._share_rate())
        self.cache.counters.count(keep_seconds=seconds)

    def _keep(self, index: int, sample: dict[str, Any]) -> None:
        key = self._key(index)
        parts = encode_entry(key, sample)
        if parts is None:
            return
        folder, row = key.folder, key.row
        peers = self._peers()
        home = peers.home(folder, row) if peers is not None else None
        size = sealed_length(parts)
        if not self._within_limit(size):
            return
        if peers is not None and home is not None and home != peers.node_id:
            with self._lock:
                self._gifts.setdefault(home, []).append((folder, row, b"".join(parts)))
            return
        if not self.cache.store(folder, row, parts, size):
            with self._lock:  # not kept: it does not count towards the job's bound
                self.kept_bytes -= size

    def send_to_homes(self) -> None:
        """Give each home node the samples of its that were prepared here (after a batch)."""
        with self._lock:
            gifts, self._gifts = self._gifts, {}
        peers = self.cache.peers
        if peers is not None:
            for home, files in gifts.items():
                peers.give(home, files)


__all__ = ["JobSamples"]
