"""Medians over repetitions: the one statistic the benchmark reports."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def median(values: Sequence[float]) -> float:
    """The median of finite values; NaN when there are none."""
    finite = [float(v) for v in values if math.isfinite(float(v))]
    return statistics.median(finite) if finite else math.nan


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per numeric field present in every run, its median over the runs."""
    if not runs:
        return {}
    keys = [k for k, v in runs[0].items() if _is_number(v)
            and all(k in run and _is_number(run[k]) for run in runs)]
    return {key: median([run[key] for run in runs]) for key in keys}


def spread(runs: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float]:
    """(min, max) of one field over the runs; NaNs when it is missing."""
    values = [float(run[key]) for run in runs if _is_number(run.get(key))]
    return (min(values), max(values)) if values else (math.nan, math.nan)


def foreign_load_cores(run: Mapping[str, Any]) -> float:
    """Cores' worth of CPU that processes outside the measurement used during its window.

    The machine's busy CPU over the measured window, minus the consumer's own
    CPU and its children's, minus its server's (whose CPU is known per sample
    for the whole run, so its share of the window is pro-rated by samples).
    """
    window_s = float(run.get("measured_s", 0.0))
    if window_s <= 0:
        return math.nan
    server_s = float(run.get("server_cpu_per_1k", 0.0)) * float(run.get("measured_samples", 0)) / 1000
    ours = float(run.get("cpu_self_s", 0.0)) + float(run.get("cpu_children_s", 0.0)) + server_s
    return max(0.0, float(run.get("machine_busy_s", 0.0)) - ours) / window_s


__all__ = ["foreign_load_cores", "median", "spread", "summarize"]
