"""Data waits by name in profiler traces: each ``next()`` on a loader is a ``shardstream.next`` range.

A training loop that waits for its input shows it in ``torch.profiler`` traces
(``record_function``) and, with CUDA, in Nsight Systems (an NVTX range), so
a data stall is visible next to the steps it delays. Outside a profiler both
cost a few microseconds per batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Generic, TypeVar

import torch

RANGE_NAME = "shardstream.next"
T = TypeVar("T")


class NamedWaits(Generic[T]):
    """An iterator whose every ``next()`` is a named range in profiler traces."""

    def __init__(self, inner: Iterator[T]) -> None:
        self._inner = inner
        self._nvtx = torch.cuda.is_available()

    def __iter__(self) -> NamedWaits[T]:
        return self

    def __next__(self) -> T:
        with torch.profiler.record_function(RANGE_NAME), self._nvtx_range():
            return next(self._inner)

    def _nvtx_range(self) -> contextlib.AbstractContextManager[None]:
        return torch.cuda.nvtx.range(RANGE_NAME) if self._nvtx else contextlib.nullcontext()

    def close(self) -> None:
        """End the iteration early (a generator's close), as a loop that breaks out would."""
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


__all__ = ["RANGE_NAME", "NamedWaits"]
