"""The decode actor: a Ray actor that serves ranks their batches on its own port.

A rank asks the actor's batch server (batch_server.py, docs/data-plane.md)
for (epoch, rank, step); the actor plans the step itself, reads and decodes
its samples, and the batch goes out over that port: no batch byte passes
through Ray or the `serve` process. Ray carries only the control calls
(open_job, forget, report) and, with the prepared-sample cache on several
nodes, prepared samples between nodes (prepared_peers.py). Decoding is a pure function of its inputs, so a
batch decoded again elsewhere is the same bytes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import ray

from shardstream.proto.errors import InvalidJobSpec, JobNotFound
from shardstream.proto.mixture import served_by_source
from shardstream.proto.wire import Allocate, FrameHeader
from shardstream.proto.writable_bytes import writable_bytes
from shardstream.service.allocator import keep_freed_memory
from shardstream.service.config import ServeSettings
from shardstream.service.identities import IdentityTable
from shardstream.service.node.batch_server import BatchServer
from shardstream.service.node.batching import DecodedBatch, decode_batch
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.node.local_copy import LocalCopy, default_directory
from shardstream.service.node.prepared_cache import open_prepared_cache
from shardstream.service.node.prepared_peers import FileKey, PreparedPeers
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
from shardstream.service.node.storage_reader import StorageReader
from shardstream.service.node_messages import (
    CacheSizing,
    DecodeJob,
    DirectReport,
    JobServed,
    ReadCounters,
    ReadSettings,
)
from shardstream.service.plan import PlanCache, check_step
from shardstream.service.tls import TlsFiles
from shardstream.service.transforms import SampleTransform, build_transform
from shardstream.service.transforms.collate import Collation, build_collation
from shardstream.service.transforms.transform_files import check_pinned

log = logging.getLogger(__name__)

ROW_GROUP_LOADERS = 8  # row groups of one batch loaded at once (storage latency, not CPU)
PLANS_KEPT = 8  # epoch plans an actor keeps, over all jobs (one randperm(N) each)


def _local_copy(settings: ReadSettings, counters: SharedReadCounters) -> LocalCopy | None:
    """The node's local copy; None (reads go to storage, as with the copy off) when its directory
    cannot be used, so a misconfigured volume costs speed, not the decode actors."""
    directory = settings.local_copy_dir or default_directory()
    try:
        return LocalCopy(directory, settings.local_copy_bytes, counters)
    except OSError as exc:
        log.error("cannot keep a local copy in %s (%s): reading every row group from storage; make the "
                  "directory writable for this user or set local_copy_dir", directory, exc)
        return None


class DecodeWorker:
    """Process title: ``ray::DecodeWorker``. One per unit of `decode` resource."""

    def __init__(self, settings: ReadSettings, serving: ServeSettings, tls: TlsFiles | None = None) -> None:
        keep_freed_memory()  # batch arrays reuse mapped heap memory (allocator.py)
        # A decode actor is a core's work: the tokenize transform's batch encode runs on this
        # thread, not on a pool of a thread per core beside the node's other actors.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self._counters = SharedReadCounters()
        local = _local_copy(settings, self._counters) if settings.local_copy_bytes > 0 else None
        self._source = RowGroupSource(StorageReader(self._counters), RowGroupCache(settings.memory_bytes),
                                      local)
        self._loaders = ThreadPoolExecutor(ROW_GROUP_LOADERS, thread_name_prefix="shardstream-load")
        self._peers = PreparedPeers(ray.get_runtime_context().get_node_id())
        self._prepared, self._cache_sizing = open_prepared_cache(
            settings.prepared_memory_dir, settings.prepared_memory_bytes, settings.prepared_disk_dir,
            settings.prepared_disk_bytes, self._counters, self._peers, ray.get_runtime_context().get_node_id(),
            settings.local_copy_dir, settings.prepared_write_share)
        self._jobs: dict[str, tuple[DecodeJob, ShardReader, SampleTransform | None, Collation]] = {}
        self._prepared_samples: dict[str, JobSamples] = {}  # job id -> its view of the cache
        self._plans = PlanCache(PLANS_KEPT)
        self._lock = threading.Lock()  # Ray's calls and the batch server's decode thread share the jobs
        self._report = DirectReport(ReadCounters(), {})
        self._batch_server = BatchServer(self, ray.util.get_node_ip_address(), serving, tls=tls)

    def open_job(self, job_box: list[Any]) -> None:
        """`job_box` is [job_id, ObjectRef(DecodeJob)]: boxed so Ray doesn't fetch it every call."""
        job_id, job_ref = job_box
        with self._lock:
            if job_id in self._jobs:
                return
        job: DecodeJob = ray.get(job_ref)
        reader = ShardReader(job.index, list(job.spec.columns) or None, self._source, self._loaders)
        transform = build_transform(job.spec.transform, job.spec.transform_args, job.allowed_transform_modules,
                                    job.limits)
        check_pinned(transform, job.transform_files)  # the tokenizer the job opened with, or refused
        collation = build_collation(job.spec.collate, job.spec.pad_value, job.allowed_transform_modules)
        prepared = None if self._prepared is None else self._prepared.for_transform(
            job.index, job.spec.transform, job.spec.transform_args, job.spec.columns, transform, job.max_cache_bytes)
        with self._lock:
            self._jobs.setdefault(job_id, (job, reader, transform, collation))
            if prepared is not None:
                self._prepared_samples.setdefault(job_id, prepared)
        log.info("decode worker opened job %s", job_id)

    def decode_step(self, job_id: str, epoch: int, rank: int, step: int,
                    allocate: Allocate = writable_bytes) -> DecodedBatch:
        """Step `step` of `rank` in `epoch`, planned here and framed into what `allocate` gives
        (the batch server's path)."""
        with self._lock:
            entry = self._jobs.get(job_id)
        if entry is None:
            raise JobNotFound(f"job {job_id!r} is not open on this decoder: open it first (OpenJob)")
        job = entry[0]
        if job.sampling is None:
            raise InvalidJobSpec(f"job {job_id!r} carries no sampling spec to plan its steps with")
        check_step(job.sampling, epoch, rank, step)
        batch = self._decode(job_id, epoch, self._plans.get(job.sampling, epoch, job_id).batch_indices(rank, step),
                             FrameHeader(epoch, rank, step), allocate)
        if job.index.sources:  # what the job gets of each source (status, metrics)
            batch.by_source = served_by_source(job.index.source_starts, batch.indices, batch.arrays)
        with self._lock:
            self._report.reads.add(batch.reads)
            self._report.decode_seconds.append(batch.decode_seconds)
            self._report.served.setdefault(job_id, JobServed()).busy_seconds += batch.decode_seconds
        return batch

    def report(self) -> DirectReport:
        """What the batch server sent and its reads cost since the last call (the pool's probe), and
        the latest data stall each rank sent with its wants."""
        with self._lock:
            report, self._report = self._report, DirectReport(ReadCounters(), {})
        served = self._batch_server.take_served()
        for job_id, decoded in report.served.items():  # the time decoding took, beside what was sent
            served.jobs.setdefault(job_id, JobServed()).busy_seconds += decoded.busy_seconds
        report.served, report.queued = served.jobs, served.queued
        report.streaming, report.refusals = served.streaming, served.refusals
        return report

    def drain(self) -> None:
        """The pool gives this actor back: its streams end once the batches they were promised are
        sent (BatchServer.drain); the pool kills it when none is left open."""
        self._batch_server.drain()

    def batch_address(self) -> str:
        """host:port of this actor's batch server (FetchBatches)."""
        return self._batch_server.address

    def _decode(self, job_id: str, epoch: int, indices: np.ndarray, header: FrameHeader | None = None,
                allocate: Allocate = writable_bytes) -> DecodedBatch:
        with self._lock:
            job, reader, transform, collation = self._jobs[job_id]
            prepared = self._prepared_samples.get(job_id)
        started = time.perf_counter()
        batch = decode_batch(job, reader, transform, epoch, indices, header, allocate, prepared,  # framed to send
                             collation)
        batch.decode_seconds = time.perf_counter() - started
        batch.reads = self._counters.take_delta()
        return batch

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)
            self._prepared_samples.pop(job_id, None)
        self._plans.forget(job_id)
        self._batch_server.forget(job_id)

    def job_weight(self, job_id: str) -> float:
        """The job's share of this actor's decoding (its priority class's weight)."""
        with self._lock:
            entry = self._jobs.get(job_id)
        return entry[0].weight if entry is not None else 1.0

    def job_owner(self, job_id: str) -> str | None:
        """The identity that opened the job (tokens file), or None when this actor does not hold it."""
        with self._lock:
            entry = self._jobs.get(job_id)
        return entry[0].owner if entry is not None else None

    def set_identities(self, table: IdentityTable) -> None:
        """The tokens file changed (the pool's, once it has read it): streams opened from now on are
        admitted by the new table."""
        self._batch_server.identities = table

    def set_peers(self, nodes: dict[str, list[Any]]) -> None:
        """The decode actors of every node (the pool's, when they change): the homes of prepared
        samples (prepared_peers.py)."""
        self._peers.set_nodes(nodes)

    def prepared_files(self, keys: list[FileKey]) -> list[bytes | None]:
        """A peer's ask: the stored files of these prepared samples, None for those not here."""
        return self._prepared.read_files(keys) if self._prepared is not None else [None] * len(keys)

    def keep_prepared_files(self, files: list[tuple[str, int, bytes]]) -> None:
        """A peer's gift: samples whose home is this node, prepared there."""
        if self._prepared is not None:
            self._prepared.keep_files(files)

    def hello(self) -> tuple[str, str, CacheSizing]:
        """(the node this actor runs on, its batch server's host:port, the bounds it chose for the node's
        prepared-sample cache): the pool's readiness probe."""
        return ray.get_runtime_context().get_node_id(), self.batch_address(), self._cache_sizing

    def pid(self) -> int:
        return os.getpid()


__all__ = ["DecodeWorker"]
