"""RateMeter: events per second over a sliding window."""

from __future__ import annotations

import pytest

from shardstream.service.control.rate import RateMeter


def test_rate_over_the_window() -> None:
    meter = RateMeter(window_s=10)
    for t in range(10):
        meter.add(100, now=1000.0 + t)
    assert meter.per_second(now=1009.0) == pytest.approx(1000 / 9)


def test_old_events_leave_the_window() -> None:
    meter = RateMeter(window_s=5)
    meter.add(500, now=0.0)
    meter.add(10, now=10.0)
    assert meter.per_second(now=10.0) == pytest.approx(10.0)  # one event: spread over at least 1 s
    assert meter.per_second(now=100.0) == 0.0


def test_no_events() -> None:
    assert RateMeter().per_second() == 0.0
