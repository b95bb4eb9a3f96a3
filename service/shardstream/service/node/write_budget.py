"""How much of a decode actor's time keeping prepared samples may take: a share of the time passing
that grows as the cache serves the job.

Writing a prepared sample is not free: a decoded 224 x 224 picture is 150-200 KB, and encoding and
writing its entry costs about 50 us (``python -m bench.cache_write_cost``) against 250-600 us to
decode it. With the cache on by default, writing every miss at once would slow every first epoch by
a sixth or more. So each actor spends on writes at most a share of the time passing (a token bucket:
credit grows with the clock, writes spend the time they take on the decode thread, and the extra work
of making a sample to keep is charged as theirs (job_samples.py), an idle spell banks at most BANK_S
of it), and the share depends on how much the cache already serves the job whose sample it is:

- a job whose samples all miss (its first epoch) writes in at most MIN_SHARE of the time: it runs at
  most that much slower than with the cache off, beside its lookups (about 1%), and keeps what it
  can;
- as the job's recent lookups hit, the share grows, four times as fast as the hit rate, up to
  MAX_SHARE once a quarter of them hit. A hit saves most of a decode and a write costs a fraction of one, so a job
  the cache already serves is one it will serve: its second epoch invests in keeping most of what
  is left, and its third runs warm, instead of the cache filling a few percent an epoch.

An actor that waits on its ranks has credit to spare and keeps everything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MIN_SHARE = 0.05  # a job the cache does not serve yet
MAX_SHARE = 0.9  # a job the cache serves a quarter of or more
FULL_SHARE_AT = 4.0  # the share grows this much faster than the hit rate
# What an idle spell may bank, in seconds of time passing (at MIN_SHARE: 25 ms of writes). Larger, it
# is spent at once when work comes: banking 5 s added 60% to the cache's cost in the benchmark's 3.5 s
# first epoch.
BANK_S = 0.5


def share_for(hit_rate: float) -> float:
    """The share of an actor's time a job's writes may take, given its recent hit rate (0..1): the
    most once a quarter of its lookups hit."""
    return MIN_SHARE + (MAX_SHARE - MIN_SHARE) * min(1.0, max(0.0, FULL_SHARE_AT * hit_rate))


class WriteBudget:
    def __init__(self, bank_s: float = BANK_S, clock: Callable[[], float] = time.monotonic) -> None:
        if bank_s <= 0:
            raise ValueError(f"bank_s must be > 0, got {bank_s}")
        self.bank_s, self._clock = bank_s, clock
        self._lock = threading.Lock()
        self._credit = bank_s  # seconds of time passing not yet spent
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._credit = min(self.bank_s, self._credit + (now - self._at))
        self._at = now

    def allows(self) -> bool:
        """Whether a write may start now (it then reports what it cost with `spent`)."""
        with self._lock:
            self._refill()
            return self._credit > 0

    def spent(self, seconds: float, hit_rate: float = 0.0) -> None:
        """A write took `seconds`, for a job whose recent lookups hit at `hit_rate`: it used the time
        passing that gives it those seconds at the job's share."""
        with self._lock:
            self._refill()
            self._credit -= seconds / share_for(hit_rate)


__all__ = ["BANK_S", "MAX_SHARE", "MIN_SHARE", "WriteBudget", "share_for"]
