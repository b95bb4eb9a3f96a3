"""bench.cache_write_cost times what the prepared-sample cache's write budget is about: decoding a
sample, encoding its entry, allocating, writing and reading it in each tier, per sample, and leaves
nothing behind."""

from __future__ import annotations

from pathlib import Path

from bench.cache_write_cost import measure


def test_each_step_is_timed_per_sample_and_the_tiers_are_removed(tmp_path: Path) -> None:
    figures = measure(samples=4, rounds=2, disk_dir=str(tmp_path))
    assert set(figures) == {"decode (Pillow)", "encode entry", *(f"{step} {tier} tier{end}" for tier in ("memory", "disk")
                            for step, end in (("allocate in", ""), ("write to", ""), ("read + verify,", "")))}
    assert all(0 < seconds < 1 for seconds in figures.values())
    assert list(tmp_path.iterdir()) == []
