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
from typing import Any

import numpy as np
import ray

from shardstream.service.allocator import keep_freed_memory
from shardstream.service.batching import DecodedBatch, DecodeJob, decode_batch
from shardstream.service.reader import RowGroupCache, ShardReader
from shardstream.service.transforms import SampleTransform, build_transform

log = logging.getLogger(__name__)


class DecodeWorker:
    """Process title: ``ray::DecodeWorker``. One per unit of `decode` resource."""

    def __init__(self, cache_bytes: int) -> None:
        keep_freed_memory()  # batch arrays reuse mapped heap memory (allocator.py)
        self._cache = RowGroupCache(cache_bytes)
        self._jobs: dict[str, tuple[DecodeJob, ShardReader, SampleTransform | None]] = {}

    def decode(self, job_box: list[Any], epoch: int, indices: np.ndarray) -> DecodedBatch:
        """`job_box` is [job_id, ObjectRef(DecodeJob)]: boxed so Ray doesn't fetch it every call."""
        job_id, job_ref = job_box
        entry = self._jobs.get(job_id)
        if entry is None:
            job: DecodeJob = ray.get(job_ref)
            reader = ShardReader(job.index, list(job.columns) or None, self._cache)
            transform = build_transform(job.transform, job.transform_args, job.allowed_transform_modules)
            entry = self._jobs[job_id] = (job, reader, transform)
            log.info("decode worker opened job %s", job_id)
        job, reader, transform = entry
        started = time.perf_counter()
        batch = decode_batch(job, reader, transform, epoch, indices)
        batch.decode_seconds = time.perf_counter() - started
        return batch

    def forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def ping(self) -> str:
        """The node this actor runs on (also the pool's readiness probe)."""
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()


__all__ = ["DecodeWorker"]
