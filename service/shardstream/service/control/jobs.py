"""The job registry: ranks of one training job share one job and its plans.

A job is named by the client (ranks agree on the name) and identified by
(name, spec fingerprint). Opening is idempotent; a rank that brings a
different spec under the same name is refused with the differences spelled
out. Plans are cached for the few most recent epochs.

With a tokens file (identities.py) every job has an owner, the identity that
opened it, and job names are each identity's own: the same name under another
identity is another job (and another job id), so no identity can join,
stream or see another's job by naming it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from shardstream.proto.errors import (
    DatasetNotAllowed,
    InvalidJobSpec,
    JobNotFound,
    JobSpecConflict,
    ShardstreamError,
    TooManyJobs,
)
from shardstream.proto.job_options import JobOptions
from shardstream.proto.mixture import read_mixture
from shardstream.service.control.access import DatasetAccess
from shardstream.service.control.open_errors import opening_error
from shardstream.service.control.per_sample import read_lengths, read_weights
from shardstream.service.control.rate import RateMeter
from shardstream.service.control.reproducibility import job_manifest
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset, job_format_args
from shardstream.service.limits import DEFAULT_LIMITS, DEFAULT_MAX_JOBS, RequestLimits
from shardstream.service.mixture_index import index_mixture
from shardstream.service.node_messages import (
    DEFAULT_MAX_BATCH_BYTES,
    DecodeJob,
    JobServed,
    add_lists,
)
from shardstream.service.plan import SamplingSpec
from shardstream.service.shares import DEFAULT_CLASS
from shardstream.service.transforms import build_transform
from shardstream.service.transforms.collate import build_collation
from shardstream.service.transforms.job_schema import check_job_schema
from shardstream.service.transforms.transform_files import argument_urls, files_of

log = logging.getLogger(__name__)

@dataclass
class JobCounters:
    batches_served: int = 0
    samples_served: int = 0
    bytes_served: int = 0
    samples_replaced: int = 0
    busy_seconds: float = 0.0  # decode-actor seconds its batches took (the scaling policy's demand)
    # a mixture's samples and tokens served of each source, in the spec's order; []: not a mixture
    source_samples: list[int] = field(default_factory=list)
    source_tokens: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RankProgress:
    """One rank of a job as its decoders last reported it (GetStatus's RankStatus, the metrics)."""

    rank: int
    epoch: int
    step: int  # the latest sent to it
    position: int  # epoch * batches_per_rank + step + 1; 0: nothing sent yet
    lag: int  # batches behind the job's furthest rank
    batches_per_second: float  # sent to it, over the last few seconds
    data_stall: float | None  # the share of its loop's time spent waiting for data; None: not reported


@dataclass
class Job:
    job_id: str
    name: str
    spec: JobOptions
    index: DatasetIndex
    sampling: SamplingSpec
    decode: DecodeJob
    manifest: dict[str, Any] = field(default_factory=dict)  # reproducibility.py
    priority: str = DEFAULT_CLASS  # its priority class (shares.py); decode.weight is the class's weight
    owner: str = ""  # the identity that opened it (a tokens file, identities.py); "": none asked
    counters: JobCounters = field(default_factory=JobCounters)
    _positions: dict[int, int] = field(default_factory=dict)  # rank -> epoch * batches + step
    _rates: dict[int, RateMeter] = field(default_factory=dict)  # rank -> batches sent per second
    _stalls: dict[int, tuple[float, float]] = field(default_factory=dict)  # rank -> (data stall, when sent)
    _stall_arrived: dict[int, float] = field(default_factory=dict)  # rank -> time.monotonic() its stall came here
    last_active: float = field(default_factory=time.monotonic)
    opened_at: float = field(default_factory=time.monotonic)
    throughput: RateMeter = field(default_factory=RateMeter)  # samples served per second
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def label(self) -> str:
        """Its name in metrics: `owner/name` with a tokens file (names are each identity's own)."""
        return f"{self.owner}/{self.name}" if self.owner else self.name

    def advance(self, rank: int, epoch: int, step: int) -> None:
        """Record that `rank` was served batch `step` of `epoch` (for lag metrics)."""
        with self._lock:
            position = epoch * self.sampling.batches_per_rank + step + 1
            before = self._positions.get(rank)
            self._positions[rank] = position
            if before is not None and position > before:  # the first report only sets where it starts
                self._rates.setdefault(rank, RateMeter()).add(position - before)

    def rank_positions(self) -> dict[int, int]:
        with self._lock:
            return dict(self._positions)

    def report_stall(self, rank: int, stall: float, at: float) -> None:
        """A data stall `rank` sent with a want at `at` (time.time() on the decoder that got it).
        Each decoder reports the latest it got; the newest across decoders wins."""
        with self._lock:
            if at >= self._stalls.get(rank, (0.0, float("-inf")))[1]:
                self._stalls[rank] = (min(1.0, max(0.0, stall)), at)
                self._stall_arrived[rank] = time.monotonic()

    def worst_stall(self, since: float) -> float | None:
        """The largest data stall of the ranks whose stall reached the service at or after `since`
        (time.monotonic()): the ranks fetching now. None: none did."""
        with self._lock:
            recent = [self._stalls[rank][0] for rank, arrived in self._stall_arrived.items() if arrived >= since]
        return max(recent, default=None)

    def ranks(self) -> list[RankProgress]:
        """Every rank decoders have sent a batch to or heard a data stall from, by rank."""
        with self._lock:
            positions, stalls = dict(self._positions), {r: s for r, (s, _at) in self._stalls.items()}
            rates = {r: meter.per_second() for r, meter in self._rates.items()}
        per_rank = max(self.sampling.batches_per_rank, 1)
        furthest = max(positions.values(), default=0)
        progress = []
        for rank in sorted(positions.keys() | stalls.keys()):
            position = positions.get(rank, 0)
            epoch, step = divmod(position - 1, per_rank) if position else (0, 0)
            progress.append(RankProgress(rank, epoch, step, position, furthest - position, rates.get(rank, 0.0),
                                         stalls.get(rank)))
        return progress

    def count(self, batches: int = 0, samples: int = 0, nbytes: int = 0, replaced: int = 0,
              busy_s: float = 0.0, source_samples: list[int] | None = None,
              source_tokens: list[int] | None = None) -> None:
        with self._lock:
            self.last_active = time.monotonic()
            c = self.counters
            c.batches_served += batches
            c.samples_served += samples
            if samples:
                self.throughput.add(samples)
            c.bytes_served += nbytes
            c.samples_replaced += replaced
            c.busy_seconds += busy_s
            if source_samples and len(source_samples) == len(self.index.sources):
                c.source_samples = add_lists(c.source_samples, source_samples)
                c.source_tokens = add_lists(c.source_tokens, source_tokens or [0] * len(source_samples))


def _both(first: Callable[[str], None], then: Callable[[str], None], url: str) -> None:
    first(url)
    then(url)


class JobRegistry:
    def __init__(self, allowed_transform_modules: tuple[str, ...],
                 access: DatasetAccess | None = None, priority_weights: dict[str, float] | None = None,
                 max_cache_bytes: int | None = None, max_jobs: int = DEFAULT_MAX_JOBS,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 max_line_bytes: int = DEFAULT_LIMITS.line_bytes, limits: RequestLimits = DEFAULT_LIMITS) -> None:
        self.allowed_transform_modules = allowed_transform_modules
        self.access = access or DatasetAccess(())
        self.priority_weights = priority_weights or {DEFAULT_CLASS: 1.0}
        self.max_cache_bytes = max_cache_bytes  # per job, of each decode actor's prepared samples
        self.max_jobs = max_jobs  # jobs held at once; a new one past it is refused (TooManyJobs)
        self.max_batch_bytes = max_batch_bytes  # one batch, as a decode actor builds it (max_message_bytes)
        self.max_line_bytes = max_line_bytes  # a JSON Lines file's longest line, unless the job asks for less
        self.limits = limits  # the request limits, as built-in transforms take them (max_seq_len)
        self._jobs: dict[str, Job] = {}
        self._by_name: dict[tuple[str, str], Job] = {}  # (owner, name) -> the job
        self._opening: dict[tuple[str, str], list[Any]] = {}  # (owner, name) -> [its lock, holders]
        self._lock = threading.Lock()

    def find(self, name: str, spec: JobOptions, rank: int, priority: str = "", owner: str = "") -> Job | None:
        """The open job this rank joins, or None when it must be opened (which reads storage).
        Every rank but the first joins, and joins again when it reconnects: this is that path.
        `owner`: the caller's identity; only its own jobs are found."""
        if not 0 <= rank < spec.world_size:
            raise InvalidJobSpec(f"rank {rank} is outside world_size {spec.world_size} (0..{spec.world_size - 1})")
        priority = priority or DEFAULT_CLASS
        if priority not in self.priority_weights:
            raise InvalidJobSpec(f"priority class {priority!r} is not one of this service's: "
                                 f"{', '.join(sorted(self.priority_weights))} (its priority_classes setting)")
        existing = self._by_name.get((owner, name or spec.identity))
        if existing is not None and existing.spec != spec:
            raise JobSpecConflict(f"rank {rank}'s spec differs from job {name or spec.identity!r}: "
                                  + "; ".join(spec.differences(existing.spec)))
        if existing is not None and existing.priority != priority:
            raise JobSpecConflict(f"rank {rank} asks for priority class {priority!r}, but job "
                                  f"{existing.name!r} is in {existing.priority!r}: give every rank the same class")
        return existing

    def open(self, name: str, spec: JobOptions, rank: int, priority: str = "", owner: str = "",
             allow: Callable[[str], None] | None = None) -> Job:
        """Open the job (or join it, when another rank just did). `owner`: the caller's identity;
        `allow`: its own check of each dataset URL, before the service's (allowed_dataset_prefixes)."""
        existing = self.find(name, spec, rank, priority, owner)
        if existing is not None:
            return existing
        name = name or spec.identity
        with self._lock:  # [the lock, how many callers hold it]
            opening = self._opening.setdefault((owner, name), [threading.Lock(), 0])
            opening[1] += 1
        try:
            with opening[0]:  # ranks opening the same job concurrently index it once
                existing = self.find(name, spec, rank, priority, owner)
                if existing is not None:
                    return existing
                self._check_room(name)
                try:
                    job = self._create(name, spec, priority or DEFAULT_CLASS, owner, allow)
                except ShardstreamError:
                    raise
                except Exception as exc:  # whatever else storage or a reader raised: typed, never INTERNAL
                    raise opening_error(spec.dataset, exc) from exc
                with self._lock:
                    self._jobs[job.job_id] = job
                    self._by_name[(owner, name)] = job
        finally:  # kept no longer than it is held: every name ever tried (a failed open too) would stay
            with self._lock:
                opening[1] -= 1
                if not opening[1]:
                    del self._opening[(owner, name)]
        log.info("opened job %s (%r): %d samples, %d batches per rank x %d ranks",
                 job.job_id, name, job.index.num_rows, job.sampling.batches_per_rank,
                 spec.world_size)
        return job

    def _check_room(self, name: str) -> None:
        with self._lock:
            held = len(self._jobs)
        if held >= self.max_jobs:
            raise TooManyJobs(f"not opening job {name[:100]!r}: this service holds {held} jobs, its max_jobs "
                              "setting; jobs with no open stream are forgotten after job_idle_ttl_s")

    def _create(self, name: str, spec: JobOptions, priority: str, owner: str = "",
                allow: Callable[[str], None] | None = None) -> Job:
        check = self.access.check if allow is None else functools.partial(_both, allow, self.access.check)
        for arg, url in argument_urls(spec.transform, spec.transform_args).items():  # before it is read
            try:
                check(url)
            except (DatasetNotAllowed, InvalidJobSpec) as exc:
                raise type(exc)(f"transform {spec.transform!r} would read its {arg} file {url[:200]!r}, "
                                f"which is held to the dataset rules: {exc}") from None
        try:
            transform = build_transform(spec.transform, dict(spec.transform_args), self.allowed_transform_modules,
                                        self.limits)
        except ShardstreamError:
            raise
        except Exception as exc:  # a user factory's own error: the spec's, not the service's
            raise InvalidJobSpec(f"transform {spec.transform!r} did not build with its arguments "
                                 f"{spec.transform_args}: {type(exc).__name__}: {exc}") from exc
        columns = spec.columns  # and the plan's columns, wherever the batches leave them out
        for planned in (spec.weights, spec.bucket_by):
            if planned and columns and planned not in columns:
                columns = (*columns, planned)
        mixture = read_mixture(spec.mixture) if spec.mixture else None
        if mixture is not None:
            index = index_mixture(mixture, columns, check, dict(spec.transform_args), self.max_line_bytes)
        else:
            index = index_dataset(spec.dataset, columns, allow=check, format=spec.format,
                                  format_args=job_format_args(spec.format, spec.format_args,
                                                              dict(spec.transform_args), self.max_line_bytes))
        build_collation(spec.collate, spec.pad_value, self.allowed_transform_modules)  # refused here, not mid-epoch
        selected = [f for f in index.schema if not spec.columns or f.name in spec.columns]  # not the plan's
        check_job_schema(pa.schema(selected), transform, spec.collate, index, spec.nulls)
        files = files_of(transform)  # what it read besides the dataset: pinned for the decode actors
        # Stable across restarts; an owner's jobs are its own (the same name under another is another job).
        key = f"{owner}\0{name}\0{spec.identity}" if owner else f"{name}\0{spec.identity}"
        job_id = hashlib.sha256(key.encode()).hexdigest()[:16]
        sampling = SamplingSpec(index.num_rows, spec.world_size, spec.batch_size, spec.shuffle,
                                spec.seed, spec.drop_last, spec.shuffle_block,
                                index.row_group_rows if spec.shuffle_block else (),
                                read_weights(index, spec.weights).astype("<f8").tobytes() if spec.weights else b"",
                                read_lengths(index, spec.bucket_by).astype("<i8").tobytes() if spec.bucket_by else b"",
                                spec.bucket_window, tuple(rows for _, rows in index.sources),
                                mixture.phases if mixture is not None else ())
        decode = DecodeJob(job_id=job_id, index=index, spec=spec,
                           allowed_transform_modules=self.allowed_transform_modules, sampling=sampling,
                           weight=self.priority_weights[priority], max_cache_bytes=self.max_cache_bytes,
                           owner=owner, max_batch_bytes=self.max_batch_bytes, limits=self.limits,
                           transform_files={file.url: file.sha256 for file in files.values()})
        return Job(job_id=job_id, name=name, spec=spec, index=index, sampling=sampling, decode=decode,
                   manifest=job_manifest(spec, index, files), priority=priority, owner=owner)

    def expire(self, idle_ttl_s: float, streaming: Collection[str] = ()) -> list[Job]:
        """Forget jobs that sent nothing for idle_ttl_s and have no open stream (job ids in
        `streaming`); clients reopen them on demand."""
        cutoff = time.monotonic() - idle_ttl_s
        with self._lock:
            idle = [j for j in self._jobs.values() if j.job_id not in streaming and j.last_active < cutoff]
            for job in idle:
                del self._jobs[job.job_id]
                if self._by_name.get((job.owner, job.name)) is job:
                    del self._by_name[(job.owner, job.name)]
        for job in idle:
            log.info("forgot idle job %s (%r)", job.job_id, job.name)
        return idle

    def record_served(self, job_id: str, served: JobServed) -> None:
        """Count what decoders' batch servers sent for a job (the direct data plane), and keep the
        data stalls its ranks sent them."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            return
        job.count(batches=served.batches, samples=served.samples, nbytes=served.nbytes, busy_s=served.busy_seconds,
                  source_samples=served.source_samples, source_tokens=served.source_tokens)
        positions = job.rank_positions()
        for rank, (epoch, step) in served.positions.items():
            # Several actors serve a rank and report apart: a report may be behind another's.
            if epoch * job.sampling.batches_per_rank + step + 1 > positions.get(rank, 0):
                job.advance(rank, epoch, step)
        for rank, (stall, at) in served.stalls.items():
            if 0 <= rank < job.spec.world_size:  # a stream may name any rank; it is refused at its first batch
                job.report_stall(rank, stall, at)

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r} on this service: open it first (OpenJob)")
        return job

    def all(self) -> list[Job]:
        with self._lock:
            return list(self._jobs.values())


__all__ = ["Job", "JobCounters", "JobRegistry", "RankProgress"]
