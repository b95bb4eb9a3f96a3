"""A sliding-window rate: events per second over the last few seconds."""

from __future__ import annotations

import threading
import time
from collections import deque


class RateMeter:
    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, float]] = deque()  # (time, amount)
        self._total = 0.0
        self._lock = threading.Lock()

    def add(self, amount: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._events.append((now, amount))
            self._total += amount
            self._trim(now)

    def per_second(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._trim(now)
            if not self._events:
                return 0.0
            span = max(now - self._events[0][0], 1.0)  # at least a second: no spikes from one event
            return self._total / span

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            self._total -= self._events.popleft()[1]


__all__ = ["RateMeter"]
