"""The data stream of one (job, epoch, rank): decode ahead, yield in step order.

Up to `prefetch` batches are being decoded at once for a stream; results are
taken strictly in step order, so the order a rank sees never depends on which
actor finishes first. Every wait has a deadline.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Protocol

import ray
from ray.exceptions import GetTimeoutError, RayTaskError

from shardstream.proto.errors import DeadlineExceeded, InvalidJobSpec, ShardstreamError
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import encode_array
from shardstream.service.batching import DecodedBatch
from shardstream.service.jobs import Job
from shardstream.service.pool import DecodePool

log = logging.getLogger(__name__)


class StreamObserver(Protocol):
    """Where a stream reports its latencies (the service's metrics)."""

    def batch_taken(self, wait_s: float, decode_s: float) -> None: ...


def stream_batches(job: Job, pool: DecodePool, epoch: int, rank: int, start_step: int,
                   prefetch: int, decode_timeout_s: float,
                   observer: StreamObserver | None = None) -> Iterator[pb.Batch]:
    steps = job.sampling.batches_per_rank
    if epoch < 0:
        raise InvalidJobSpec(f"epoch must be >= 0, got {epoch}")
    if not 0 <= rank < job.spec.world_size:
        raise InvalidJobSpec(f"rank {rank} is outside world_size {job.spec.world_size}")
    if not 0 <= start_step <= steps:
        raise InvalidJobSpec(f"start_step {start_step} is outside 0..{steps}")
    plan = job.plan(epoch)
    pool.register(job.decode)
    pending: deque[tuple[int, ray.ObjectRef, int]] = deque()
    next_step = start_step
    job.count(streams=1)
    try:
        while pending or next_step < steps:
            while next_step < steps and len(pending) < prefetch:
                ref, slot = pool.submit(job.job_id, epoch, plan.batch_indices(rank, next_step))
                pending.append((next_step, ref, slot))
                next_step += 1
            step, ref, slot = pending.popleft()
            waited = time.perf_counter()
            try:
                decoded = _take(ref, decode_timeout_s, job, epoch, rank, step)
            finally:
                pool.done(slot)
            if observer is not None:
                observer.batch_taken(time.perf_counter() - waited, decoded.decode_seconds)
            message = _to_message(decoded, epoch, rank, step)
            job.count(batches=1, samples=len(decoded.indices), nbytes=decoded.nbytes,
                      replaced=decoded.replaced)
            job.advance(rank, epoch, step)
            yield message
    finally:
        job.count(streams=-1)
        for _, _, slot in pending:
            pool.done(slot)


def _take(ref: ray.ObjectRef, timeout_s: float, job: Job, epoch: int, rank: int,
          step: int) -> DecodedBatch:
    try:
        result: DecodedBatch = ray.get(ref, timeout=timeout_s)
        return result
    except GetTimeoutError:
        raise DeadlineExceeded(
            f"decoding batch {step} of job {job.job_id} (epoch {epoch}, rank {rank}) "
            f"took longer than {timeout_s:.0f} s"
        ) from None
    except RayTaskError as exc:
        cause = exc.cause if hasattr(exc, "cause") else None
        if isinstance(cause, ShardstreamError):
            raise cause from None
        raise


def _to_message(decoded: DecodedBatch, epoch: int, rank: int, step: int) -> pb.Batch:
    return pb.Batch(
        epoch=epoch,
        rank=rank,
        step=step,
        tensors=[encode_array(name, array) for name, array in decoded.arrays.items()],
        sample_indices=decoded.indices.tolist(),
        replaced_samples=decoded.replaced,
    )


__all__ = ["StreamObserver", "stream_batches"]
