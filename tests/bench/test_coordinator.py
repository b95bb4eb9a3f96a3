"""bench.coordinator: the coordinator's CPU per ListDecoders call (a rank's decoder refresh), and the
ranks one core keeps refreshed."""

from __future__ import annotations

import pytest

from bench.coordinator import CoordinatorCost
from shardstream.proto import DECODERS_REFRESH_S


def test_cost_per_call_and_ranks_per_core() -> None:
    cost = CoordinatorCost(ranks=32, seconds=15.0, calls=20_000, serve_cpu_s=10.0)
    assert cost.cpu_ms_per_call == pytest.approx(0.5)
    assert cost.ranks_per_core == pytest.approx(DECODERS_REFRESH_S / 0.0005)


def test_no_calls_is_no_figure() -> None:
    cost = CoordinatorCost(ranks=4, seconds=1.0, calls=0, serve_cpu_s=0.1)
    assert cost.ranks_per_core == 0.0
