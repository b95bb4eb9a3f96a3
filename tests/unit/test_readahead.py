"""read_ahead: same items, same order, errors and cleanup carried across the thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from shardstream.service.readahead import read_ahead


def active() -> bool:
    return True


def test_items_in_order() -> None:
    assert list(read_ahead(iter(range(100)), 2, active, "t")) == list(range(100))


def test_errors_surface_in_the_consumer_after_the_items_before_them() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise KeyError("boom")

    got = []
    with pytest.raises(KeyError, match="boom"):
        for item in read_ahead(source(), 2, active, "t"):
            got.append(item)
    assert got == [1, 2]


def test_consumer_leaving_early_runs_the_source_cleanup() -> None:
    cleaned = threading.Event()

    def source() -> Iterator[int]:
        try:
            yield from range(1000)
        finally:
            cleaned.set()

    stream = read_ahead(source(), 2, active, "t")
    assert next(stream) == 0
    stream.close()
    assert cleaned.wait(5)


def test_producer_stops_when_the_client_is_gone() -> None:
    alive = [True]
    produced = []

    def source() -> Iterator[int]:
        for i in range(1000):
            produced.append(i)
            yield i

    stream = read_ahead(source(), 1, lambda: alive[0], "t")
    assert next(stream) == 0
    alive[0] = False
    stream.close()
    assert len(produced) < 10
