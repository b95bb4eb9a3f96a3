"""What the control plane and the decode actors tell each other, in one module both import.

Control sends a node the jobs it decodes (`DecodeJob`) and how it reads (`ReadSettings`); each
actor sends back, every second, what its batch server sent and what its reads cost (`DirectReport`,
`JobServed`, `ReadCounters`) and how it sized its prepared-sample cache (`CacheSizing`). They cross
Ray's pickling between processes, so each is a plain dataclass of values: nothing here reads,
decodes or serves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from shardstream.proto.job_options import JobOptions
from shardstream.service.dataset import DatasetIndex
from shardstream.service.limits import DEFAULT_LIMITS, RequestLimits
from shardstream.service.node.write_budget import MIN_SHARE
from shardstream.service.plan import SamplingSpec

DEFAULT_MAX_BATCH_BYTES = 1 << 30  # ServiceConfig.max_message_bytes's default


# ---------------------------------------------------------------- control -> node

@dataclass(frozen=True)
class DecodeJob:
    """What a decode actor needs to know about a job (shipped once per actor)."""

    job_id: str
    index: DatasetIndex
    spec: JobOptions  # the job's options, whole: an option the node needs is there as it is declared
    allowed_transform_modules: tuple[str, ...] = ()
    sampling: SamplingSpec | None = None  # for decoders that plan steps themselves (batch_server.py)
    weight: float = 1.0  # its share of each decode actor's time (its priority class; fair_queue.py)
    owner: str = ""  # the identity that opened it: only that identity's streams get its batches
    max_cache_bytes: int | None = None  # prepared samples it may keep from each actor (prepared_cache.py)
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES  # one batch as it is built (batch_bytes.py)
    limits: RequestLimits = DEFAULT_LIMITS  # the service's, as built-in transforms take them (max_seq_len)
    # URL -> SHA-256 of each file its transform read when it opened (a tokenizer.json): an actor that
    # reads other bytes refuses the job (transforms/transform_files.py)
    transform_files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def alone(cls, job_id: str, index: DatasetIndex, *, allowed_transform_modules: tuple[str, ...] = (),
              max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, **options: Any) -> DecodeJob:
        """A job decoded in this process alone (`shardstream validate`, benchmarks, tests): `options`
        as JobOptions takes them, its dataset the index's files."""
        dataset = tuple(shard.url for shard in index.shards) or ("-",)
        spec = JobOptions(dataset=dataset, batch_size=1, **options)
        return cls(job_id, index, spec, allowed_transform_modules, max_batch_bytes=max_batch_bytes)


@dataclass(frozen=True)
class ReadSettings:
    """How a decode actor reads rows (the service's config, shipped to every actor)."""

    memory_bytes: int  # the actor's in-memory LRU of row groups
    local_copy_dir: str = ""  # "" : default_directory()
    local_copy_bytes: int = 0  # the node's local copy; 0: off, every miss reads storage
    # The node's prepared-sample cache (prepared_cache.py): a memory and a disk tier; 0: off,
    # None: sized from the node when the actor starts (cache_sizing.py).
    prepared_memory_dir: str = ""  # "": /dev/shm/shardstream-prepared
    prepared_memory_bytes: int | None = None
    prepared_disk_dir: str = ""  # "": <the local copy's directory>/prepared-samples
    prepared_disk_bytes: int | None = None
    # The share of the actor's time a job's first epoch may spend keeping samples (write_budget.py).
    prepared_write_share: float = MIN_SHARE

    @property
    def prepared_cache_on(self) -> bool:
        return self.prepared_memory_bytes != 0 or self.prepared_disk_bytes != 0


# ---------------------------------------------------------------- node -> control

CAUSES = ("checksum", "key", "short_read", "format", "io_error")
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


@dataclass
class JobServed:
    """What an actor's batch server sent for one job since its last report."""

    batches: int = 0
    samples: int = 0
    nbytes: int = 0
    busy_seconds: float = 0.0  # spent decoding its batches (the scaling policy's demand, decode_scaling.py)
    positions: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> latest (epoch, step)
    # rank -> (the data stall its latest want here carried, time.time() that want arrived)
    stalls: dict[int, tuple[float, float]] = field(default_factory=dict)
    # a mixture's samples and tokens sent of each source, in the spec's order; []: not a mixture
    source_samples: list[int] = field(default_factory=list)
    source_tokens: list[int] = field(default_factory=list)

    def add_sources(self, samples: list[int], tokens: list[int]) -> None:
        self.source_samples = add_lists(self.source_samples, samples)
        self.source_tokens = add_lists(self.source_tokens, tokens)


def add_lists(a: list[int], b: list[int]) -> list[int]:
    """Two per-source counts summed (an empty one is all zeros)."""
    return [x + y for x, y in zip(a or [0] * len(b), b or [0] * len(a), strict=True)]


@dataclass
class DirectReport:
    """An actor's report to the pool (each second, doubling as its liveness probe): what its batch
    server sent and what reading for it cost, since the last report."""

    reads: ReadCounters
    served: dict[str, JobServed]
    decode_seconds: list[float] = field(default_factory=list)  # each batch its server decoded
    queued: int = 0  # steps its batch server has accepted and not yet sent, now
    streaming: dict[str, set[int]] = field(default_factory=dict)  # job id -> ranks with a stream open now
    # (identity, reason) -> streams its batch server refused by the tokens file since the last report
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class TierSize:
    """A tier's bound in bytes (0: off) and why."""

    bytes: int
    reason: str


@dataclass(frozen=True)
class CacheSizing:
    """The bounds a node's actor chose for the two tiers, and why (cache_sizing.py)."""

    memory: TierSize
    disk: TierSize


__all__ = ["CAUSES", "DEFAULT_MAX_BATCH_BYTES", "FAULT_CACHES", "LEVELS", "TIERS", "CacheSizing", "DecodeJob",
           "DirectReport", "JobServed", "ReadCounters", "ReadSettings", "TierSize"]
