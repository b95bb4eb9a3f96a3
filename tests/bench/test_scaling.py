"""bench.scaling: per-actor throughput and efficiency from measured points."""

from __future__ import annotations

import pytest

from bench.scaling import scaling_rows, scaling_table


def _point(decoders: int, rate: float) -> dict[str, object]:
    return {"decoders": decoders, "median": {"samples_per_s": rate, "cpu_self_per_1k": 0.1,
                                             "foreign_load_cores": 0.05}}


def test_per_actor_rate_and_efficiency_are_relative_to_the_first_point() -> None:
    rows = scaling_rows([_point(1, 1000.0), _point(2, 1500.0), _point(4, 2000.0)])
    assert [r["per_actor"] for r in rows] == [1000.0, 750.0, 500.0]
    assert [r["efficiency"] for r in rows] == pytest.approx([1.0, 0.75, 0.5])


def test_scaling_table_has_a_row_per_point() -> None:
    table = scaling_table(scaling_rows([_point(1, 990.0), _point(2, 1400.0)]))
    lines = table.splitlines()
    assert len(lines) == 4
    assert "| 2 " in lines[3] and "1,400" in lines[3] and "700" in lines[3] and "0.71" in lines[3]
