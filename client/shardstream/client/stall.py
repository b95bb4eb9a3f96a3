"""The data stall a rank reports: the share of its training loop's recent time spent in ``next()``.

The loop's time is everything from its first ``next()`` on the loader on: the
waits inside ``next()`` plus the work between two calls (the step). The
stall is the waiting share of it, each moment weighted by ``exp(-age /
window_s)``, so it follows the last ~``window_s`` seconds without keeping a
history: two numbers, updated when a wait starts or ends (a few floating
point operations), read when a want goes out (fetcher.py). A rank that
waits for every batch tends to 1; one whose batches are always ready, to 0.
"""

from __future__ import annotations

import math

from shardstream.client.stats import LoaderStats

STALL_WINDOW_S = 10.0  # the weighting's time constant


class StallMeter:
    """Exponentially weighted fraction of loop time spent waiting; times are any one clock's
    seconds (the loader uses ``time.perf_counter``). Used from the training loop's thread."""

    def __init__(self, window_s: float = STALL_WINDOW_S) -> None:
        self.window_s = window_s
        self._since: float | None = None  # the time the sums below are up to; None: no wait yet
        self._waiting = False  # inside next() since `_since`
        self._wait = 0.0  # weighted seconds spent waiting, up to `_since`
        self._loop = 0.0  # weighted seconds of loop time (waiting or not), up to `_since`

    def wait_started(self, now: float) -> None:
        """The loop called ``next()``: the time since the last wait ended was the loop's own."""
        self._advance(now)
        self._waiting = True

    def wait_ended(self, now: float) -> None:
        """``next()`` returned (or raised): it waited since `wait_started`. A no-op wait when not waiting."""
        if self._since is not None:
            self._advance(now)
        self._waiting = False

    def ratio(self, now: float) -> float | None:
        """The stall at `now` (a wait still going on counts so far); None before the first wait."""
        if self._since is None:
            return None
        wait, loop = self._sums(now)
        return min(1.0, max(0.0, wait / loop)) if loop > 0 else (1.0 if self._waiting else 0.0)

    def _advance(self, now: float) -> None:
        if self._since is None:
            self._since = now
            return
        self._wait, self._loop = self._sums(now)
        self._since = max(self._since, now)

    def _sums(self, now: float) -> tuple[float, float]:
        """The weighted sums carried to `now`: the interval since `_since` was all waiting or all
        not, and its weight is the integral of exp(-age / window_s) over it (exact, so carrying the
        sums at any instants gives the same numbers)."""
        assert self._since is not None
        elapsed = max(0.0, now - self._since)
        decay = math.exp(-elapsed / self.window_s)
        added = self.window_s * (1.0 - decay)
        return self._wait * decay + (added if self._waiting else 0.0), self._loop * decay + added


class LoopWaits:
    """The training loop's waits in ``next()``, timed once: summed into the loader's
    ``stats.wait_seconds`` and weighted into its stall (`meter`)."""

    def __init__(self, stats: LoaderStats) -> None:
        self.stats = stats
        self.meter = StallMeter()
        self._started: float | None = None

    def started(self, now: float) -> None:
        self.meter.wait_started(now)
        self._started = now

    def ended(self, now: float) -> None:
        """``next()`` returned or raised; a no-op when not waiting."""
        if self._started is not None:
            self.stats.wait_seconds += now - self._started
            self._started = None
        self.meter.wait_ended(now)


__all__ = ["STALL_WINDOW_S", "LoopWaits", "StallMeter"]
