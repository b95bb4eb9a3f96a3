"""How much of a decode actor's time keeping prepared samples may take: a share of the time passing.

Writing a prepared sample to a tier is not free: a decoded 224 x 224 picture
is 150-200 KB, and a file of it costs 60-100 us on a tmpfs and several times
that on a disk, against 300-600 us to decode it. With the cache on by
default, writing every miss at once would slow every first epoch by a
quarter to a half. Instead each actor spends at most `share` of the time
passing on writes (a token bucket: credit grows with the clock, writes spend
it, an idle spell banks at most `burst_s`: a few batches' worth). Under full decode load a first
epoch is at most that share slower than with the cache off; the samples not
kept now are kept in a later epoch, when their decode comes round again; an
actor that waits on its ranks has credit to spare and keeps everything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

WRITE_SHARE = 0.10
# What an idle spell may bank: a few batches' writes. Larger, it is spent at once when work comes:
# 0.5 s per actor added 60% to the cache's cost in the benchmark's 3.5 s first epoch.
BURST_S = 0.05


class WriteBudget:
    def __init__(self, share: float = WRITE_SHARE, burst_s: float = BURST_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share, self.burst_s, self._clock = share, burst_s, clock
        self._lock = threading.Lock()
        self._credit = burst_s
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._credit = min(self.burst_s, self._credit + (now - self._at) * self.share)
        self._at = now

    def allows(self) -> bool:
        """Whether a write may start now (it then reports what it cost with `spent`)."""
        with self._lock:
            self._refill()
            return self._credit > 0

    def spent(self, seconds: float) -> None:
        with self._lock:
            self._refill()
            self._credit -= seconds


__all__ = ["BURST_S", "WRITE_SHARE", "WriteBudget"]
