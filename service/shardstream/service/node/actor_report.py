"""What a decode actor reports to the pool each second (its liveness probe, doubling as the
direct data plane's accounting): what its batch server sent, by job, the data stalls ranks sent
with their wants, and what reading cost."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardstream.service.node.read_counters import ReadCounters


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


__all__ = ["DirectReport", "JobServed"]
