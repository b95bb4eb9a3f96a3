"""The data stall a rank reports (client/stall.py), on a fake clock: the share of its loop's recent
time spent waiting in next(), exponentially weighted over ~10 s."""

from __future__ import annotations

import math

import pytest

from shardstream.client.stall import STALL_WINDOW_S, StallMeter


class Loop:
    """A training loop on a fake clock: each step waits in next(), then works."""

    def __init__(self) -> None:
        self.now = 100.0
        self.meter = StallMeter()

    def steps(self, n: int, wait_s: float, work_s: float) -> None:
        for _ in range(n):
            self.meter.wait_started(self.now)
            self.now += wait_s
            self.meter.wait_ended(self.now)
            self.now += work_s

    def ratio(self) -> float:
        ratio = self.meter.ratio(self.now)
        assert ratio is not None
        return ratio


def test_nothing_before_the_first_wait() -> None:
    assert StallMeter().ratio(5.0) is None


@pytest.mark.parametrize(("wait_s", "work_s", "expected"), [
    (0.1, 0.0, 1.0),  # every batch waited for, nothing else done: all stall
    (0.0, 0.2, 0.0),  # batches always ready
    (0.5, 0.5, 0.5),
    (0.1, 0.9, 0.1),
    (0.3, 0.1, 0.75),
])
def test_a_steady_loop_reports_its_waiting_share(wait_s: float, work_s: float, expected: float) -> None:
    loop = Loop()
    loop.steps(int(60 / (wait_s + work_s)), wait_s, work_s)  # a minute: ~6 windows
    assert loop.ratio() == pytest.approx(expected, abs=0.03)


def test_it_follows_the_last_seconds_not_the_whole_run() -> None:
    loop = Loop()
    loop.steps(100, 1.0, 0.0)  # 100 s of waiting for every batch (a cold start, say)
    assert loop.ratio() > 0.99
    loop.steps(100, 0.0, 0.3)  # then 30 s with batches always ready
    # what is left is the old stall's weight after 3 windows: e^-3 of it
    assert loop.ratio() == pytest.approx(math.exp(-30 / STALL_WINDOW_S), rel=0.01)
    loop.steps(200, 0.0, 0.3)
    assert loop.ratio() < 0.001


def test_a_wait_still_going_on_counts_so_far() -> None:
    loop = Loop()
    loop.steps(200, 0.0, 0.3)  # a minute of batches always ready
    loop.meter.wait_started(loop.now)
    assert loop.meter.ratio(loop.now + 1.0) == pytest.approx(1 - math.exp(-0.1), rel=0.01)
    assert loop.meter.ratio(loop.now + STALL_WINDOW_S) == pytest.approx(1 - math.exp(-1), rel=0.01)
    assert loop.meter.ratio(loop.now + 60) > 0.99  # stuck for a minute


def test_reading_it_changes_nothing_and_the_sums_are_exact_wherever_they_are_carried() -> None:
    """The weighting is integrated exactly, so how often the loop calls in (or the fetcher reads
    the value) does not change the number: one 10 s wait equals a hundred 0.1 s waits back to back."""
    one, many = Loop(), Loop()
    one.steps(1, 10.0, 5.0)
    for _ in range(100):
        many.steps(1, 0.1, 0.0)
        many.ratio()
    many.now += 5.0
    assert many.ratio() == pytest.approx(one.ratio(), abs=1e-9)


def test_a_wait_ended_twice_or_a_clock_read_out_of_order_is_harmless() -> None:
    meter = StallMeter()
    meter.wait_ended(1.0)  # never waited: nothing to end
    assert meter.ratio(1.0) is None
    meter.wait_started(10.0)
    meter.wait_ended(12.0)
    meter.wait_ended(13.0)  # the iteration's end after the last batch's: the second is loop time
    assert meter.ratio(14.0) == pytest.approx(0.5, abs=0.1)
    assert 0.0 <= (meter.ratio(13.5) or 0.0) <= 1.0  # an earlier instant than the last update
