"""How much of a decode actor's time keeping prepared samples may take: a small share of the time
passing until the cache serves the job, most of it once it does.

Writing a prepared sample is not free: a decoded 224 x 224 picture is 150-200 KB, and encoding and
writing its entry costs about 50 us (``python -m bench.cache_write_cost``) against 250-600 us to
decode it. With the cache on by default, writing every miss at once would slow every first epoch by
a sixth or more. So each actor spends on writes at most a share of the time passing (a token bucket:
credit grows with the clock, writes spend the time they take on the decode thread, and the extra work
of making a sample to keep is charged as theirs (job_samples.py), an idle spell banks at most BANK_S
of it), and the share depends on whether the cache already serves the job whose sample it is:

- a job whose samples all miss (its first epoch) writes in at most MIN_SHARE of the time (the
  service's prepared_cache_write_share): it runs at most that much slower than with the cache off,
  beside its lookups (about 1%), and keeps what it can;
- a job whose recent lookups find samples kept before (REUSE_HIT_RATE of them or more: its second
  epoch, or a job of a sweep reading what an earlier one kept) reads samples again, and is one the
  cache will serve: it writes in up to MAX_SHARE of the time, keeping what is left of the dataset
  in that pass, so the next runs warm. A hit saves most of a decode and a write costs a fraction of
  one.

The first epoch's share only has to seed that evidence. When the share grew with the level of the
hit rate instead (four times as fast, MAX_SHARE at a quarter), the second pass's fill followed the
first epoch's closely: a first epoch that kept 9.6% of the samples let the second keep 97% of the
dataset, one that kept 6.8% only 69%, and the warm epochs after it ran a third slower. A batch
keeps only what the budget covers already, or with a full bank (`JobSamples.keeps_now`), so what
it keeps at the small share leaves at most a batch's debt to repay after the share has grown.

An actor that waits on its ranks has credit to spare and keeps everything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MIN_SHARE = 0.03  # a job the cache does not serve yet
MAX_SHARE = 0.9  # a job that reads samples kept before
REUSE_HIT_RATE = 0.01  # a job whose recent lookups hit this often reads samples kept before
# What an idle spell may bank, in seconds of time passing (at MIN_SHARE: 15 ms of writes). Larger, it
# is spent at once when work comes: banking 5 s added 60% to the cache's cost in the benchmark's 3.5 s
# first epoch.
BANK_S = 0.5


def share_for(hit_rate: float, first_share: float = MIN_SHARE) -> float:
    """The share of an actor's time a job's writes may take, given its recent hit rate (0..1) and
    the share of a job the cache does not serve yet (the service's prepared_cache_write_share)."""
    return max(first_share, MAX_SHARE) if hit_rate >= REUSE_HIT_RATE else first_share


class WriteBudget:
    def __init__(self, bank_s: float = BANK_S, clock: Callable[[], float] = time.monotonic,
                 first_share: float = MIN_SHARE) -> None:
        if bank_s <= 0:
            raise ValueError(f"bank_s must be > 0, got {bank_s}")
        if not 0 < first_share <= 1:
            raise ValueError(f"first_share must be in (0, 1], got {first_share}")
        self.bank_s, self._clock, self.first_share = bank_s, clock, first_share
        self._lock = threading.Lock()
        self._credit = bank_s  # seconds of time passing not yet spent
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._credit = min(self.bank_s, self._credit + (now - self._at))
        self._at = now

    def available(self, hit_rate: float = 0.0) -> float:
        """Seconds of writing a job whose recent lookups hit at `hit_rate` may spend now (0 when
        the budget is in debt); infinite with a full bank, as waiting would add nothing to it."""
        with self._lock:
            self._refill()
            if self._credit >= self.bank_s:
                return float("inf")
            return max(0.0, self._credit) * share_for(hit_rate, self.first_share)

    def allows(self) -> bool:
        """Whether the budget is out of debt: some writing is `available`."""
        return self.available() > 0

    def spent(self, seconds: float, hit_rate: float = 0.0) -> None:
        """A write took `seconds`, for a job whose recent lookups hit at `hit_rate`: it used the time
        passing that gives it those seconds at the job's share."""
        with self._lock:
            self._refill()
            self._credit -= seconds / share_for(hit_rate, self.first_share)


__all__ = ["BANK_S", "MAX_SHARE", "MIN_SHARE", "REUSE_HIT_RATE", "WriteBudget", "share_for"]
