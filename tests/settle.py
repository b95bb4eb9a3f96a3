"""Reading counters the decode actors report each second (the direct data plane's accounting)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def settled(read: Callable[[], T], quiet_s: float = 2.5, timeout_s: float = 60.0) -> T:
    """What `read` returns once it has stopped changing for `quiet_s`: every actor has reported
    what it sent before the call (reports come each second)."""
    deadline = time.monotonic() + timeout_s
    last, since = read(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, f"still changing after {timeout_s:.0f} s: {last}"
        time.sleep(0.25)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
    return last
