"""The data stream of one (job, epoch, rank): decode ahead, send in step order, within credit.

Up to `prefetch` batches are being decoded at once for a stream; results are
taken strictly in step order, so the order a rank sees never depends on which
actor finishes first. A batch is sent only when the client's credit window
has room for it (see credits.py). Every wait has a deadline or ends with the
stream.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

from ray.exceptions import RayTaskError

from shardstream.proto.errors import DeadlineExceeded, InvalidJobSpec, ShardstreamError
from shardstream.proto.wire import encode_batch
from shardstream.service.batching import DecodedBatch
from shardstream.service.credits import CreditWindow
from shardstream.service.jobs import Job
from shardstream.service.plan import check_epoch_and_rank
from shardstream.service.pool import DecodePool, Ticket

log = logging.getLogger(__name__)


class StreamObserver(Protocol):
    """Where a stream reports its latencies (the service's metrics)."""

    def batch_taken(self, wait_s: float, decode_s: float) -> None: ...


def check_stream(job: Job, epoch: int, rank: int, start_step: int) -> None:
    steps = job.sampling.batches_per_rank
    check_epoch_and_rank(job.sampling, epoch, rank)
    if not 0 <= start_step <= steps:
        raise InvalidJobSpec(f"start_step {start_step} is outside 0..{steps}")


def stream_batches(job: Job, pool: DecodePool, epoch: int, rank: int, start_step: int,
                   prefetch: int, window: CreditWindow, decode_timeout_s: float,
                   is_active: Callable[[], bool], observer: StreamObserver | None = None) -> Iterator[bytes]:
    """Serialized Batch messages, in step order, each sent only within credit.

    The caller has validated (epoch, rank, start_step) with check_stream, before
    committing any resources to the stream.
    """
    steps = job.sampling.batches_per_rank
    plan = job.plan(epoch)
    pool.register(job.decode)
    pending: deque[tuple[int, Ticket]] = deque()
    next_step = start_step
    job.count(streams=1)
    try:
        while pending or next_step < steps:
            while next_step < steps and len(pending) < prefetch:
                ticket = pool.submit(job.job_id, epoch, plan.batch_indices(rank, next_step), decode_timeout_s)
                pending.append((next_step, ticket))
                next_step += 1
            step, ticket = pending.popleft()
            waited = time.perf_counter()
            try:
                decoded = _take(pool, ticket, decode_timeout_s, job, epoch, rank, step)
            finally:
                pool.release(ticket)
            if observer is not None:
                observer.batch_taken(time.perf_counter() - waited, decoded.decode_seconds)
            replaced = decoded.replaced
            message = encode_batch(epoch, rank, step, decoded.arrays, decoded.indices, replaced)
            del decoded  # release the shared-memory views before waiting for credit
            if not window.acquire(step, len(message), is_active):
                return
            job.count(batches=1, samples=len(plan.batch_indices(rank, step)), nbytes=len(message),
                      replaced=replaced)
            yield message
        # End the stream only once the loop has taken the last batch, so the
        # service knows the epoch reached the rank (and its position is exact).
        window.wait_drained(is_active)
    finally:
        job.count(streams=-1)
        for _, ticket in pending:
            pool.release(ticket)


def _take(pool: DecodePool, ticket: Ticket, timeout_s: float, job: Job, epoch: int, rank: int,
          step: int) -> DecodedBatch:
    try:
        return pool.take(ticket, timeout_s)
    except DeadlineExceeded:
        raise DeadlineExceeded(
            f"decoding batch {step} of job {job.job_id} (epoch {epoch}, rank {rank}) "
            f"took longer than {timeout_s:.0f} s"
        ) from None
    except RayTaskError as exc:
        cause = exc.cause if hasattr(exc, "cause") else None
        if isinstance(cause, ShardstreamError):
            raise cause from None
        raise


__all__ = ["StreamObserver", "check_stream", "stream_batches"]
