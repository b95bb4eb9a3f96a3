"""bench.procstats: CPU deltas of descendants and of a server's process tree."""

from __future__ import annotations

import os

import pytest

from bench.procstats import PeakRss, cpu_delta, process_tree_cpu, tree_cpu_delta


def test_cpu_delta_counts_new_processes_from_zero_and_never_goes_negative() -> None:
    before = {1: 2.0, 2: 5.0}
    after = {1: 3.5, 2: 4.0, 3: 0.25}  # pid 2 was reused by a fresh process: never negative
    assert cpu_delta(before, after) == pytest.approx(1.5 + 0.0 + 0.25)


def test_tree_cpu_delta_sums_by_role() -> None:
    before = {10: ("main", 1.0), 11: ("decoders", 2.0), 12: ("runtime", 0.5)}
    after = {10: ("main", 1.5), 11: ("decoders", 4.0), 12: ("runtime", 0.75),
             13: ("decoders", 1.0)}  # a decode actor that restarted
    assert tree_cpu_delta(before, after) == {"main": 0.5, "decoders": 3.0, "runtime": 0.25}


def test_process_tree_cpu_of_this_process_names_it_main() -> None:
    tree = process_tree_cpu(os.getpid())
    role, cpu = tree[os.getpid()]
    assert role == "main" and cpu > 0


def test_process_tree_cpu_of_a_missing_process_is_empty() -> None:
    assert process_tree_cpu(2**22 + 12345) == {}


def test_peak_rss_sees_an_allocation_made_after_start() -> None:
    peak = PeakRss()
    peak.start()
    block = bytearray(64 << 20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page
    high = peak.stop()
    del block
    assert peak.method in ("VmHWM", "sampled")
    assert high >= 64 << 20
