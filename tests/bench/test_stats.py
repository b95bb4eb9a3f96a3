"""bench.stats: medians over repetitions."""

from __future__ import annotations

import math

import pytest

from bench.stats import foreign_load_cores, median, spread, summarize


def test_median_of_odd_and_even_counts() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_median_ignores_non_finite_values_and_is_nan_when_none_are_left() -> None:
    assert median([1.0, math.nan, 3.0, math.inf]) == 2.0
    assert math.isnan(median([]))
    assert math.isnan(median([math.nan]))


def test_summarize_takes_the_median_of_every_numeric_field_present_in_every_run() -> None:
    runs = [
        {"samples_per_s": 100.0, "batches": 10, "rss_method": "VmHWM", "only_here": 1.0, "ok": True},
        {"samples_per_s": 300.0, "batches": 10, "rss_method": "VmHWM"},
        {"samples_per_s": 200.0, "batches": 12, "rss_method": "sampled"},
    ]
    assert summarize(runs) == {"samples_per_s": 200.0, "batches": 10}


def test_summarize_of_no_runs_is_empty() -> None:
    assert summarize([]) == {}


def test_spread_is_min_and_max() -> None:
    runs = [{"x": 3.0}, {"x": 1.0}, {"x": 2.0}, {"y": 9.0}]
    assert spread(runs, "x") == (1.0, 3.0)
    low, high = spread(runs, "missing")
    assert math.isnan(low) and math.isnan(high)


def test_foreign_load_is_what_the_machine_did_besides_the_measured_processes() -> None:
    run = {"measured_s": 10.0, "measured_samples": 10_000, "machine_busy_s": 19.0,
           "cpu_self_s": 1.0, "cpu_children_s": 2.0, "server_cpu_per_1k": 1.4}  # server: 14 s
    assert foreign_load_cores(run) == pytest.approx((19.0 - 1.0 - 2.0 - 14.0) / 10.0)


def test_foreign_load_is_never_negative_and_nan_without_a_window() -> None:
    assert foreign_load_cores({"measured_s": 1.0, "machine_busy_s": 0.5, "cpu_self_s": 1.0}) == 0.0
    assert math.isnan(foreign_load_cores({"measured_s": 0.0}))
