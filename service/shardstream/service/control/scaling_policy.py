"""The decode scaling policy: how many decode actors the jobs' demand calls for.

Once a window it sees what the ranks and decoders reported over it
(`Observation`): each job's data stall (its worst rank's share of time spent
waiting for data, client/stall.py), the seconds decoders spent decoding its
batches, and the samples/s it was served. It returns a `Decision`: how many
decoders it wants, and why.

The estimate: a decode actor decodes one batch at a time, so the decoders a
job kept busy are its decode seconds per second of window, `busy`. A job that
waits a share `s` of its time would take `1 / (1 - s)` times as much without
waiting, so it needs about `busy / (1 - s)` decoders. The pool wants the sum
over jobs, times `headroom`.

Three rules keep it from chasing noise, as Cachew's and tf.data service's
autoscalers do (measure, then judge each step by what it bought):

- **Up** only when a job is starved (stall above `scale_up_stall`), straight to
  the estimate. A window after the new decoders are ready, the step is judged:
  if an added decoder raised the jobs' samples/s by less than `min_gain` of
  what it could have (a decoder's rate before, up to what the jobs wanted),
  decoders were not the limit (storage, the
  network, the rank's own receive): the policy keeps only the decoders the
  rate it reached needs at the old per-decoder rate, and does not go above
  that size again until the demand changes.
- **Down** only when no job is near starving (every stall below `scale_down_stall`)
  and one decoder fewer would still have `headroom` over the busy time: one
  decoder a window, each drained (pool.py) so no batch is lost or repeated.
- **No overshoot**: a starved job whose stall fell by a fifth or more since
  the last window is being served better already (a rank's stall is a ~10 s
  average, so it trails the decoders that just joined): the policy waits.
- **No oscillation**: a step down that leaves a job starved is undone and
  that size becomes a floor until the demand falls; a size judged useless
  becomes a ceiling until it rises. Demand "changes" when the samples/s moves
  by more than `demand_change` from what it was when the bound was set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Direction = Literal["up", "down", "hold"]
MAX_STALL = 0.9  # a stall above this counts as this: at most 10x a job's busy decoders at once
FALLING = 0.8  # a starved job's stall below this share of the last window's: wait, it is being served better


@dataclass(frozen=True)
class JobDemand:
    """One job over the window."""

    name: str
    busy: float  # decode-actor seconds its batches took, per second of window
    samples_per_s: float
    stall: float | None  # its worst rank's data stall reported in the window; None: no rank reported


@dataclass(frozen=True)
class Observation:
    """What the ranks and decoders reported over one window."""

    ready: int  # decode actors serving through the window
    steady: bool  # the same actors all window, none starting or draining: a step can be judged
    jobs: tuple[JobDemand, ...]

    @property
    def busy(self) -> float:
        return sum(job.busy for job in self.jobs)

    @property
    def samples_per_s(self) -> float:
        return sum(job.samples_per_s for job in self.jobs)

    @property
    def fetching(self) -> tuple[JobDemand, ...]:
        """Jobs whose ranks reported a data stall in the window."""
        return tuple(job for job in self.jobs if job.stall is not None)

    def starved(self, threshold: float) -> JobDemand | None:
        """The job waiting longest, if it waits more than `threshold` of its time."""
        worst = max(self.fetching, key=lambda job: job.stall or 0.0, default=None)
        return worst if worst is not None and (worst.stall or 0.0) > threshold else None

    def demand(self) -> float:
        """Samples/s the jobs would take without waiting: each job's rate over (1 - its stall)."""
        return sum(job.samples_per_s / (1.0 - min(job.stall or 0.0, MAX_STALL)) for job in self.jobs)

    def needed(self) -> float:
        """Decoders that would serve every job without waiting (the module docstring)."""
        return sum(job.busy / (1.0 - min(job.stall or 0.0, MAX_STALL)) for job in self.jobs)


@dataclass(frozen=True)
class Decision:
    wanted: int
    direction: Direction
    reason: str


@dataclass(frozen=True)
class PolicySettings:
    min_decoders: int
    max_decoders: int
    scale_up_stall: float = 0.10  # a job waiting for data more than this share of its time is starved
    # Every job below this: decoders may be given back. Not 0: a rank's loop spends a few percent
    # in next() even when every batch is ready (converting, handing over), more with short steps.
    scale_down_stall: float = 0.08
    headroom: float = 1.25  # decoders kept per decoder of measured need
    min_gain: float = 0.5  # an added decoder must bring this share of what a decoder served before
    demand_change: float = 0.2  # samples/s this far from a bound's: the bound no longer holds

    def __post_init__(self) -> None:
        if not 1 <= self.min_decoders <= self.max_decoders:
            raise ValueError(f"need 1 <= min_decoders ({self.min_decoders}) <= max_decoders ({self.max_decoders})")


@dataclass(frozen=True)
class _Bound:
    """A size the policy learned not to cross, and the samples/s when it learned it."""

    decoders: int
    samples_per_s: float
    demand: float = 0.0  # samples/s the jobs would have taken then (Observation.demand)


class ScalingPolicy:
    def __init__(self, settings: PolicySettings, start: int) -> None:
        self.settings = settings
        self.wanted = self._clamp(start)
        self._step_from: _Bound | None = None  # size and samples/s before the last step up, until judged
        self._down_from: _Bound | None = None  # ... before the last step down, until judged
        self._ceiling: _Bound | None = None  # more decoders than this did not raise throughput
        self._floor: _Bound | None = None  # fewer than this left a job starved
        self._stalls: dict[str, float] = {}  # each job's stall at the last judged window

    def _clamp(self, n: int) -> int:
        return max(self.settings.min_decoders, min(self.settings.max_decoders, n))

    def _holds(self, bound: _Bound | None, obs: Observation) -> bool:
        if bound is None:
            return False
        return abs(obs.samples_per_s - bound.samples_per_s) <= self.settings.demand_change * max(bound.samples_per_s,
                                                                                              1e-9)

    def _to(self, wanted: int, direction: Direction, reason: str) -> Decision:
        self.wanted = wanted
        return Decision(wanted, direction, reason)

    def decide(self, obs: Observation) -> Decision:
        s, n = self.settings, obs.ready
        if not obs.fetching:  # a whole window without a rank: nothing to judge, nothing to serve
            self._step_from = self._down_from = self._ceiling = self._floor = None
            self._stalls = {}
            if self.wanted > s.min_decoders:
                return self._to(s.min_decoders, "down", "no rank is fetching: back to the minimum")
            return Decision(self.wanted, "hold", "no rank is fetching")
        if not obs.steady:
            return Decision(self.wanted, "hold", f"waiting for the pool to settle: {n} decoder(s) ready, "
                            f"{self.wanted} wanted")
        rate = obs.samples_per_s
        previous, self._stalls = self._stalls, {job.name: job.stall or 0.0 for job in obs.fetching}
        starved = obs.starved(s.scale_up_stall)

        if self._step_from is not None and n > self._step_from.decoders:  # judge the last step up
            before, self._step_from = self._step_from, None
            share = before.samples_per_s / before.decoders  # what a decoder served before it
            gain = (rate - before.samples_per_s) / (n - before.decoders)
            # What the step could bring: n decoders at that share, up to what the jobs wanted then.
            possible = (min(n * share, before.demand) - before.samples_per_s) / (n - before.decoders)
            if possible > 0 and gain < s.min_gain * possible:
                # Keep what the rate reached needs at the old per-decoder share, no more.
                keep = self._clamp(min(n, max(before.decoders, math.ceil(rate / share - 1e-9))))
                self._ceiling = _Bound(keep, rate)
                return self._to(keep, "down" if keep < n else "hold", (
                    f"{n} decoders served {rate:.0f} samples/s, {before.decoders} served "
                    f"{before.samples_per_s:.0f}: an added decoder brought {gain:.0f} samples/s, under "
                    f"{s.min_gain:.0%} of the {possible:.0f} it could; something else limits the jobs, so "
                    f"{keep} (what that rate needs) is the most this demand gets"))
        self._step_from = None
        if self._down_from is not None:  # judge the last step down
            before, self._down_from = self._down_from, None
            if starved is not None:
                self._floor = before
                return self._to(before.decoders, "up", (
                    f"with {n} decoders job {starved.name} waited {starved.stall:.0%} of its time: back to "
                    f"{before.decoders}, the fewest that serve this demand"))

        if starved is not None and (starved.stall or 0.0) < FALLING * previous.get(starved.name, 0.0):
            return Decision(self.wanted, "hold", (
                f"job {starved.name} waits {starved.stall:.0%} of its time for data, down from "
                f"{previous[starved.name]:.0%} a window ago: the decoders it has are catching up"))
        if starved is not None:
            if not self._holds(self._ceiling, obs):
                self._ceiling = None
            ceiling = self._ceiling.decoders if self._ceiling is not None else s.max_decoders
            target = min(ceiling, s.max_decoders, max(n + 1, math.ceil(obs.needed() * s.headroom)))
            if target <= n:
                limit = ("the most decoders allowed (autoscale_max_decoders)" if ceiling >= s.max_decoders
                         else "the most that raised throughput")
                return self._to(max(self.wanted, n), "hold", (
                    f"job {starved.name} waits {starved.stall:.0%} of its time for data, but {n} decoder(s) "
                    f"is {limit}"))
            self._step_from = _Bound(n, rate, obs.demand())
            return self._to(target, "up", (
                f"job {starved.name} waits {starved.stall:.0%} of its time for data; decoders are busy "
                f"{obs.busy:.1f} of {n}, so about {obs.needed():.1f} would serve it: asking for {target}"))

        calm = all((job.stall or 0.0) < s.scale_down_stall for job in obs.fetching)
        if calm and n > s.min_decoders and math.ceil(obs.needed() * s.headroom) <= n - 1:
            if not self._holds(self._floor, obs):
                self._floor = None
            if self._floor is None or n - 1 >= self._floor.decoders:
                self._down_from = _Bound(n, rate)
                return self._to(n - 1, "down", (
                    f"no job waits for data and decoders are busy {obs.busy:.1f} of {n}: {n - 1} keep "
                    f"{s.headroom:.2g}x headroom; draining one"))
        return Decision(self.wanted, "hold", f"decoders busy {obs.busy:.1f} of {n}; the worst job waits "
                        f"{max(job.stall or 0.0 for job in obs.fetching):.0%} of its time")


__all__ = ["Decision", "Direction", "JobDemand", "Observation", "PolicySettings", "ScalingPolicy"]
