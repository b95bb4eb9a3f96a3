"""How a shared service divides its decoders between jobs: priority classes and per-job limits.

Each decode actor shares its decoding time between the jobs waiting on it by
their priority classes' weights (node/fair_queue.py). A job may be held to a
subset of the actors (`job_max_decoders`), chosen by rendezvous hashing so each
job's subset is its own, stays put as actors come and go, and jobs spread over
the pool; and to a bound on the batch bytes its ranks hold (`job_max_in_flight_bytes`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

DEFAULT_CLASS = "default"


def priority_weights(classes: Sequence[str]) -> dict[str, float]:
    """NAME=WEIGHT strings -> {name: weight}; `default` is 1 unless given. A ValueError names a bad one."""
    weights = {DEFAULT_CLASS: 1.0}
    for text in classes:
        name, sep, raw = text.partition("=")
        try:
            weight = float(raw)
        except ValueError:
            weight = math.nan
        if not sep or not name.strip() or not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"priority class {text!r}: write NAME=WEIGHT with a weight > 0, e.g. high=4")
        weights[name.strip()] = weight
    return weights


def job_decoders(job_id: str, addresses: Sequence[str], limit: int | None) -> list[str]:
    """The `limit` decoders (all when None) a job's ranks fetch from, in the pool's order."""
    if limit is None or limit >= len(addresses):
        return list(addresses)
    ranked = sorted(addresses, key=lambda a: hashlib.sha256(f"{job_id}\0{a}".encode()).digest())
    chosen = set(ranked[:limit])
    return [a for a in addresses if a in chosen]


def rank_window(job_limit: int | None, world_size: int) -> int:
    """Each rank's share of the job's in-flight bytes; 0: no limit."""
    return 0 if job_limit is None else max(1, job_limit // world_size)


__all__ = ["DEFAULT_CLASS", "job_decoders", "priority_weights", "rank_window"]
