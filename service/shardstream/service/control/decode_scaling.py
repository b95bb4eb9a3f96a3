"""Decode capacity that follows demand: the scaling policy run once a window.

Each window (autoscale_window_s) it observes what the ranks and decoders
reported (each job's data stall, decode-busy seconds and samples served),
asks the policy (scaling_policy.py) how many decode actors the demand calls
for, and acts on the answer in two places with one number:

- the Ray autoscaler: `ray.autoscaler.sdk.request_resources` for that many
  `{"CPU": decoder_cpus, "decode": 1}` bundles, so it starts decode nodes
  while ranks starve and may remove the ones the pool gave back;
- the pool (pool.py): actors start as the capacity arrives, and surplus ones
  are drained, then killed;
- and the `shardstream_decoders_wanted` gauge, which the Helm chart's HPA
  scales decode pods on (target: the decode units one pod offers), so on
  Kubernetes the same decision sizes the Deployment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from shardstream.proto import DECODERS_REFRESH_S
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.control.pool import DECODE_RESOURCE, DecodePool
from shardstream.service.control.scaling_policy import (
    Decision,
    JobDemand,
    Observation,
    ScalingPolicy,
)

log = logging.getLogger(__name__)

# A grown pool is judged only this long after it settled: every rank has listed the decoders that
# joined by then (DECODERS_REFRESH_S), and the stall ranks report follows the last ~10 s of their
# loop (client/stall.py), so it shows what the change did. A shrunk one is judged the window after
# its drains: ranks need not list anything, and a rank that starts waiting shows it within seconds.
SETTLE_S = DECODERS_REFRESH_S


def request_from_ray(wanted: int, decoder_cpus: float) -> None:
    """Ask the Ray autoscaler for room for `wanted` decode actors (a cluster without an autoscaler
    ignores the request)."""
    from ray.autoscaler.sdk import request_resources
    request_resources(bundles=[{"CPU": decoder_cpus, DECODE_RESOURCE: 1}] * wanted)


@dataclass(frozen=True)
class ScalingState:
    """The last decision and what it was based on (GetStatus, the metrics)."""

    decision: Decision
    decided_at: float  # time.monotonic()
    busy: float  # decode-actor seconds per second, all jobs, over the window
    ready: int
    up: int = 0  # decisions up so far
    down: int = 0
    last_change: Decision | None = None  # the last decision that changed the size ...
    changed_at: float = 0.0  # ... at this time.monotonic()

    @property
    def busy_ratio(self) -> float:
        """The decoders' busy share over the window."""
        return self.busy / max(self.ready, 1)


class DecodeScaling:
    def __init__(self, policy: ScalingPolicy, pool: DecodePool, registry: JobRegistry, window_s: float,
                 request: Callable[[int], None]) -> None:
        self.policy, self._pool, self._registry, self._window_s = policy, pool, registry, window_s
        self._request = request
        self._seen: dict[str, tuple[int, float]] = {}  # job id -> (samples served, busy seconds) at the last tick
        self._ready_at_start = pool.size
        self._window_started = time.monotonic()
        self._settled_since = float("-inf")  # the pool it starts with is no change: ranks list it when they open
        self._settle_s = SETTLE_S  # after the last change: SETTLE_S after growing, 0 after shrinking
        start = Decision(policy.wanted, "hold", "starting: no window measured yet")
        self.state = ScalingState(start, time.monotonic(), 0.0, pool.size)
        self._act(policy.wanted)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shardstream-scaling", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._window_s):
            try:
                self.tick()
            except Exception:  # the loop must outlive a flaky Ray call
                log.exception("decode scaling: a decision failed")

    def observe(self) -> Observation:
        """The window since the last call, and start the next."""
        now = time.monotonic()
        span = max(now - self._window_started, 1e-3)
        jobs = []
        seen: dict[str, tuple[int, float]] = {}
        for job in self._registry.all():
            samples, busy = job.counters.samples_served, job.counters.busy_seconds
            before = self._seen.get(job.job_id, (0, 0.0))  # a new job: all it was served since it opened
            seen[job.job_id] = (samples, busy)
            here = max(min(span, now - job.opened_at), 1e-3)  # the part of the window it existed
            jobs.append(JobDemand(job.label, (busy - before[1]) / here, (samples - before[0]) / here,
                                  job.worst_stall(self._window_started)))
        self._seen = seen
        ready = self._pool.size
        if ready != self._ready_at_start or not self._pool.settled:
            self._settled_since = now
        steady = self._window_started - self._settled_since >= self._settle_s  # the whole window, and before
        self._ready_at_start, self._window_started = ready, now
        return Observation(ready, steady, tuple(jobs))

    def tick(self) -> Decision:
        obs = self.observe()
        before = self.policy.wanted
        decision = self.policy.decide(obs)
        state, now = self.state, time.monotonic()
        changed = decision.wanted != before
        self.state = ScalingState(decision, now, obs.busy, obs.ready, state.up + (decision.direction == "up"),
                                  state.down + (decision.direction == "down"),
                                  decision if changed else state.last_change, now if changed else state.changed_at)
        if changed:
            self._settle_s = SETTLE_S if decision.wanted > before else 0.0
            log.info("decode scaling: %d -> %d decoders: %s", before, decision.wanted, decision.reason)
        self._act(decision.wanted)
        return decision

    def _act(self, wanted: int) -> None:
        self._pool.set_wanted(wanted)
        try:
            self._request(wanted)
        except Exception as exc:  # the pool still follows what the cluster has
            log.warning("decode scaling: could not ask the Ray autoscaler for %d decoder(s): %s", wanted, exc)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)


__all__ = ["DecodeScaling", "ScalingState", "request_from_ray"]
