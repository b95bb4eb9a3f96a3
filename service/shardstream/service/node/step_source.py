"""The one interface between a decode actor and its batch server.

The batch server (batch_server.py) holds streams and sends batches; the actor (decoder.py) holds
jobs and decodes. The server asks the actor only what a `StepSource` answers; the actor asks the
server only for what it served since the last report (`BatchServer.take_served`, a `Served`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from shardstream.proto.wire import Allocate
from shardstream.service.node.batching import DecodedBatch
from shardstream.service.node_messages import JobServed


class StepSource(Protocol):
    """What a batch server needs of the jobs it serves."""

    def decode_step(self, job_id: str, epoch: int, rank: int, step: int, allocate: Allocate) -> DecodedBatch:
        """The step, planned and decoded, framed into what `allocate` gives; ShardstreamError for
        a job not held here or a step outside its epoch."""
        ...

    def job_weight(self, job_id: str) -> float:
        """The job's share of the actor's decoding (its priority class's weight; fair_queue.py)."""
        ...

    def job_owner(self, job_id: str) -> str | None:
        """The identity that opened the job (tokens file); None when the actor does not hold it."""
        ...


@dataclass
class Served:
    """What a batch server did since its last `take_served`: batches sent by job (with each rank's
    latest position and data stall), and, now, the steps it has accepted and not yet sent and the
    ranks with a stream open."""

    jobs: dict[str, JobServed] = field(default_factory=dict)
    queued: int = 0
    streaming: dict[str, set[int]] = field(default_factory=dict)
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)  # (identity, reason) -> streams refused


__all__ = ["Served", "StepSource"]
