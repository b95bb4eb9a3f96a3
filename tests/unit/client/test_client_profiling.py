"""Data waits by name: every next() on a loader is a "shardstream.next" range in a torch.profiler trace."""

from __future__ import annotations

import torch

from shardstream.client.profiling import RANGE_NAME, NamedWaits


def test_each_wait_is_a_named_range_in_the_trace_and_the_items_pass_through() -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        got = list(NamedWaits(iter([1, 2, 3])))
    assert got == [1, 2, 3]
    # one range per next(), the one that ends the iteration too
    assert [e.name for e in trace.events()].count(RANGE_NAME) == 4


def test_closing_it_closes_what_it_wraps() -> None:
    closed = []

    def batches():  # type: ignore[no-untyped-def]
        try:
            yield 1
            yield 2
        finally:
            closed.append(True)

    waits = NamedWaits(batches())
    assert next(waits) == 1
    waits.close()
    assert closed == [True]
