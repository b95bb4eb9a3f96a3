"""Services a module compares (a cache on and off, say), started at the same time: each one's
decode actors take seconds to start, and theirs then start together."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shardstream.service.control.server import Service


@contextlib.contextmanager
def side_by_side(*starts: Callable[[], tuple[Service, str]]) -> Iterator[list[tuple[Service, str]]]:
    """Each `start()` at once, in threads; their services and addresses, in that order. Every one
    that started is stopped at the end, whether or not the others did."""
    with ThreadPoolExecutor(len(starts)) as starting:
        started = [starting.submit(start) for start in starts]
    try:
        yield [each.result() for each in started]
    finally:
        for each in started:
            if each.exception() is None:
                each.result()[0].stop(grace=1.0)


__all__ = ["side_by_side"]
