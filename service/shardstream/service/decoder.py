"""The decode actor: a Ray actor that turns (job, epoch, indices) into batch arrays.

Results return through Ray's object store, so numpy arrays reach the batch
server as shared-memory views on the same node. Decoding is a pure function
of its inputs, so Ray may retry a task on a restarted actor without changing
what the client sees.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from shardstream.service.allocator import keep_freed_memory
from shardstream.service.batching import DecodedBatch, DecodeJob, decode_batch
from shardstream.service.local_copy import LocalCopy, default_directory
from shardstream.service.read_counters import SharedReadCounters
from shardstream.service.reader import RowGroupCache, RowGroupSource, ShardReader
from shardstream.service.storage_reader import StorageReader
from shardstream.service.transforms import SampleTransform, build_transform

log = logging.getLogger(__name__)

ROW_GROUP_LOADERS = 8  # row groups of one batch loaded at once (storage latency, not CPU)


@dataclass(frozen=True)
class ReadSettings:
    """How a decode actor reads rows (the service's config, shipped to every actor)."""

    memory_bytes: int  # the actor's in-memory LRU of row groups
    local_copy_dir: str = ""  # "" : default_directory()
    local_copy_bytes: int = 0  # the node's local copy; 0: off, every miss reads storage


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

    def __init__(self, settings: ReadSettings) -> None:
        keep_freed_memory()  # batch arrays reuse mapped heap memory (allocator.py)
        self._counters = SharedReadCounters()
        local = _local_copy(settings, self._counters) if settings.local_copy_bytes > 0 else None
        self._source = RowGroupSource(StorageReader(self._counters), RowGroupCache(settings.memory_bytes),
                                      local)
        self._loaders = ThreadPoolExecutor(ROW_GROUP_LOADERS, thread_name_prefix="shardstream-load")
        self._jobs: dict[str, tuple[DecodeJob, ShardReader, SampleTransform | None]] = {}

    def decode(self, job_box: list[Any], epoch: int, indices: np.ndarray) -> DecodedBatch:
        """`job_box` is [job_id, ObjectRef(DecodeJob)]: boxed so Ray doesn't fetch it every call."""
        job_id, job_ref = job_box
        entry = self._jobs.get(job_id)
        if entry is None:
            job: DecodeJob = ray.get(job_ref)
            reader = ShardReader(job.index, list(job.columns) or None, self._source, self._loaders)
            transform = build_transform(job.transform, job.transform_args, job.allowed_transform_modules)
            entry = self._jobs[job_id] = (job, reader, transform)
            log.info("decode worker opened job %s", job_id)
        job, reader, transform = entry
        started = time.perf_counter()
        batch = decode_batch(job, reader, transform, epoch, indices)
        batch.decode_seconds = time.perf_counter() - started
        batch.reads = self._counters.take_delta()
        return batch

    def forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def ping(self) -> str:
        """The node this actor runs on (also the pool's readiness probe)."""
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()


__all__ = ["DecodeWorker", "ReadSettings"]
