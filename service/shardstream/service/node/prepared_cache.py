"""The node's prepared-sample cache: what a transform's ``prepare`` made of each sample, kept.

A loader on the training host decodes every sample again every epoch. Here
the deterministic part of a transform (``prepare``: for the image transform,
the decode and optional resize) is kept per sample on the decode node, so
later epochs, and other jobs with the same dataset and prepare spec (a
hyperparameter sweep), skip reading and decoding it. ``augment`` always runs,
seeded by (seed, epoch, index) as before: a batch is the same bytes whether
the cache is cold, warm or off.

Two tiers in two directories, each bounded in bytes: memory (a tmpfs:
``/dev/shm`` by default) and local disk. A sample prepared here is written
once, to the memory tier while it has room, else to the disk tier; a lookup
tries memory, then disk, then reads and prepares. Writing takes at most a
share of the actor's time (write_budget.py): what does not fit in it is kept
in a later epoch. The files are shared by every decode actor on the node and outlive
jobs and actors; after a node restart an empty tier simply fills again.

Keys: the shard's URL, size and version (generation, ETag or mtime), the row
in it, and the prepare identity (transform name and arguments, the columns
read, the code: shardstream's version for a built-in transform, a digest
of the module's source for a user one, and the transform's `cache_identity`
where it has one: the tokenize transform's tokenizer.json SHA-256). A
rewritten shard has a new version, and a rewritten tokenizer.json another
hash, so it is read and prepared again, never served stale.

One job's view of the cache, samples by global index, is job_samples.py.

With decode actors on several nodes, each sample has a home node, and the
others ask it before preparing the sample themselves (prepared_peers.py); a
node keeps only its own samples.

Each tier is a bounded directory of sample files (prepared_tier.py). Each file
is an entry that carries its own key and a checksum (prepared_entry.py),
verified on every read: from either tier, by a home node before it sends a
sample, by the node that receives it, and by a home before it keeps a sample
given to it. An entry that fails, or a path that cannot be read, is a miss:
dropped, prepared again, counted and logged (cache_fault.py).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import logging
import os
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from shardstream.proto.slots import SHARED_MEMORY_DIR
from shardstream.service.dataset import DatasetIndex
from shardstream.service.node import local_copy
from shardstream.service.node.cache_fault import CacheFault, record_fault
from shardstream.service.node.cache_sizing import (
    given,
    measure_node,
    size_disk_tier,
    size_memory_tier,
)
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.node.prepared_entry import (
    SampleKey,
    decode_entry,
    verify_file,
)
from shardstream.service.node.prepared_peers import FileKey, PreparedPeers
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.write_budget import MIN_SHARE, WriteBudget
from shardstream.service.node_messages import CacheSizing, TierSize

log = logging.getLogger(__name__)


def default_memory_directory() -> str:
    return os.path.join(SHARED_MEMORY_DIR, "shardstream-prepared")


def default_disk_directory(local_copy_dir: str = "") -> str:
    """Beside the row groups the node keeps: in the local copy's directory (local_copy.py)."""
    return os.path.join(local_copy_dir or local_copy.default_directory(), "prepared-samples")


def prepare_identity(name: str, args: dict[str, Any], columns: Sequence[str], transform: Any) -> str:
    """What a prepared sample depends on besides its row: the transform, its arguments, the
    columns read, its code, and what the transform's `cache_identity` names besides (the tokenize
    transform's: its tokenizer.json's SHA-256, so a file rewritten under the same path is another
    key, and the tokenizers library's version)."""
    module = type(transform).__module__
    if module.startswith("shardstream."):
        try:
            code = version("shardstream")
        except PackageNotFoundError:
            code = "unknown"
    else:
        try:
            source = inspect.getsource(importlib.import_module(module))
        except (OSError, TypeError):  # no source to read: nothing tells two versions apart
            source = module
        code = hashlib.sha256(source.encode()).hexdigest()
    identity: list[Any] = [name, args, sorted(columns), code]
    depends = getattr(transform, "cache_identity", None)  # what else its output depends on
    if depends:  # only then: the identities of transforms without it stay as they were
        identity.append(depends)
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# ---------------------------------------------------------------- the cache

class PreparedCache:
    """The node's tiers (memory first); either may be absent (bound 0)."""

    def __init__(self, tiers: Sequence[SampleTier], counters: SharedReadCounters,
                 peers: PreparedPeers | None = None, budget: WriteBudget | None = None) -> None:
        self.tiers = list(tiers)
        self.counters = counters
        self.peers = peers  # the other nodes' caches (prepared_peers.py); None: this node's only
        self.budget = budget or WriteBudget()  # the share of this actor's time keeping samples may take
        self.publish()

    def claims(self) -> int:
        """How many chunks this actor's tiers have claimed (tier.claims): a write that claims one
        costs more than its samples."""
        return sum(tier.claims for tier in self.tiers)

    def load(self, tier: SampleTier, key: SampleKey) -> dict[str, Any] | None:
        """The sample `tier` holds for `key`, verified; None when it holds none or the entry is
        refused (then dropped, counted and logged)."""
        slot = 0
        try:
            found = tier.load_file(key.folder, key.row)
            if found is None:
                return None
            data, slot = found
            started = time.perf_counter()
            sample = decode_entry(data, key)
            self.counters.verified(time.perf_counter() - started, len(data))
            return sample
        except CacheFault as fault:
            self._refused(tier, key.folder, key.row, fault, slot)
            return None

    def load_many(self, tier: SampleTier, keys: Sequence[SampleKey], slots: Sequence[int]) -> list[dict[str, Any] | None]:
        """`load` of many keys of one shard folder at their (nonzero) slots, each verified; None for
        each entry refused (dropped, counted and logged)."""
        if not keys:
            return []
        folder = keys[0].folder
        entries = tier.load_slots(folder, [key.row for key in keys], list(slots))
        started = time.perf_counter()
        samples: list[dict[str, Any] | None] = []
        verified = 0
        for key, slot, entry in zip(keys, slots, entries, strict=True):
            try:
                if isinstance(entry, CacheFault):
                    raise entry
                samples.append(decode_entry(entry, key))
                verified += len(entry)
            except CacheFault as fault:
                self._refused(tier, folder, key.row, fault, 0 if isinstance(entry, CacheFault) else slot)
                samples.append(None)
        self.counters.verified(time.perf_counter() - started, verified)
        return samples

    def read_files(self, keys: Sequence[FileKey]) -> list[bytes | None]:
        """The stored files of these samples (for a peer), each verified to be the entry stored
        at its place; None for those no tier holds soundly."""
        return [self._sound_file(folder, row) for folder, row in keys]

    def _sound_file(self, folder: str, row: int) -> bytes | None:
        for tier in self.tiers:
            slot = 0
            try:
                found = tier.load_file(folder, row)
                if found is None:
                    continue
                data, slot = found
                started = time.perf_counter()
                verify_file(data, folder, row)
                self.counters.verified(time.perf_counter() - started, len(data))
                return bytes(data)
            except CacheFault as fault:
                self._refused(tier, folder, row, fault, slot)
        return None

    def keep_files(self, files: Sequence[tuple[str, int, bytes]]) -> None:
        """Store samples a peer prepared (this node is their home), those that prove to be the
        entry of their place."""
        for folder, row, data in files:
            try:
                verify_file(bytearray(data), folder, row)
            except CacheFault as fault:
                record_fault(self.counters, "peer", f"a sample given for {folder}/{row}", fault)
                continue
            self.store(folder, row, [data], len(data))
        self.publish()

    def accepting(self) -> bool:
        """Whether a tier may take an entry now (one found full is not tried again for a while)."""
        return any(tier.accepting() for tier in self.tiers)

    def store(self, folder: str, row: int, parts: list[bytes | memoryview], size: int) -> bool:
        """Keep an entry in the first tier with room for it: memory, else disk. A tier holds what the
        tiers before it could not, so each byte is written once and the node holds the sum of both."""
        return any(tier.store(folder, row, parts, size) for tier in self.tiers)

    def _refused(self, tier: SampleTier, folder: str, row: int, fault: CacheFault, slot: int) -> None:
        """Count and log an entry the tier could not give soundly, and forget it (slot 0: the tier
        already has)."""
        record_fault(self.counters, tier.name, tier.describe(folder, row), fault)
        if slot:
            tier.drop(folder, row, slot)

    def for_job(self, index: DatasetIndex, identity: str, max_bytes: int | None = None) -> JobSamples:
        return JobSamples(self, index, identity, max_bytes)

    def for_transform(self, index: DatasetIndex, name: str, args: dict[str, Any], columns: Sequence[str],
                      transform: Any, max_bytes: int | None = None) -> JobSamples | None:
        """A job's view of the cache; None when its transform has nothing to keep (no ``prepare``,
        or ``cache_prepared = False``)."""
        if transform is None or not callable(getattr(transform, "prepare", None)):
            return None
        if not getattr(transform, "cache_prepared", True):
            return None
        return self.for_job(index, prepare_identity(name, args, columns, transform), max_bytes)

    def close(self) -> None:
        for tier in self.tiers:
            tier.close()

    def publish(self) -> None:
        """The tiers' sizes, for the actor's next report."""
        levels = {tier.name: tier.stored_bytes for tier in self.tiers}
        self.counters.set_prepared_bytes(levels.get("memory", 0), levels.get("disk", 0))


def open_prepared_cache(memory_dir: str, memory_bytes: int | None, disk_dir: str, disk_bytes: int | None,
                        counters: SharedReadCounters, peers: PreparedPeers | None = None,
                        node_id: str = "", local_copy_dir: str = "", write_share: float = MIN_SHARE,
                        ) -> tuple[PreparedCache | None, CacheSizing]:
    """The node's cache, or None when both tiers are off or neither directory can be used (then
    every sample is prepared, as with the cache off), and the bounds chosen. A bound of None is
    sized from the node (cache_sizing.py); 0 is off. `write_share`: the share of the actor's time
    a job's first epoch may spend keeping samples (write_budget.py)."""
    wanted = {"memory": (memory_dir or default_memory_directory(), memory_bytes),
              "disk": (disk_dir or default_disk_directory(local_copy_dir), disk_bytes)}
    tiers: dict[str, SampleTier] = {}
    sizes: dict[str, TierSize] = {}
    for name, (directory, bound) in wanted.items():
        sizes[name] = given(bound) if bound is not None else TierSize(0, "off")
        if bound == 0:
            continue
        try:
            tiers[name] = SampleTier(name, directory, bound or 0)
        except OSError as exc:
            sizes[name] = TierSize(0, f"off: cannot use {directory} ({exc})")
            log.error("cannot keep prepared samples in %s (%s): the %s tier is off; make the directory writable "
                      "for this user or set prepared_cache_%s_dir", directory, exc, name, name)
    if any(bound is None and name in tiers for name, (_, bound) in wanted.items()):
        held = {name: tier.allocated_bytes for name, tier in tiers.items()}
        facts = measure_node(wanted["memory"][0], held.get("memory", 0), wanted["disk"][0], held.get("disk", 0),
                             node_id)
        for name, sized in (("memory", size_memory_tier(facts)), ("disk", size_disk_tier(facts))):
            if wanted[name][1] is None and name in tiers:
                sizes[name], tiers[name].max_bytes = sized, sized.bytes
    kept = [tier for tier in tiers.values() if tier.max_bytes > 0]  # memory first, as `wanted` is
    cache = PreparedCache(kept, counters, peers, WriteBudget(first_share=write_share)) if kept else None
    return cache, CacheSizing(sizes["memory"], sizes["disk"])


__all__ = ["PreparedCache", "open_prepared_cache", "prepare_identity"]
