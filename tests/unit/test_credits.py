"""CreditWindow: at most N batches and B bytes sent and not yet consumed."""

from __future__ import annotations

import threading
import time

import pytest

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.credits import CreditWindow


def always() -> bool:
    return True


def test_bounded_in_batches() -> None:
    window = CreditWindow(max_batches=2, max_bytes=1000)
    assert window.acquire(0, 10, always) and window.acquire(1, 10, always)
    assert window.in_flight == (2, 20)
    got: list[bool] = []
    blocked = threading.Thread(target=lambda: got.append(window.acquire(2, 10, always)))
    blocked.start()
    blocked.join(0.5)
    assert blocked.is_alive()  # a third batch waits for credit
    window.consume_through(0)
    blocked.join(5)
    assert got == [True] and window.in_flight == (2, 20)


def test_bounded_in_bytes() -> None:
    window = CreditWindow(max_batches=10, max_bytes=100)
    assert window.acquire(0, 60, always)
    done = threading.Event()
    threading.Thread(target=lambda: window.acquire(1, 60, always) and done.set(), daemon=True).start()
    assert not done.wait(0.5)
    window.consume_through(0)
    assert done.wait(5)
    assert window.in_flight == (1, 60)


def test_a_batch_larger_than_the_window_is_a_clear_error() -> None:
    with pytest.raises(InvalidJobSpec, match="raise the client's prefetch_bytes"):
        CreditWindow(max_batches=4, max_bytes=100).acquire(0, 101, always)


def test_waiters_leave_when_the_stream_ends() -> None:
    window = CreditWindow(max_batches=1, max_bytes=100)
    window.acquire(0, 1, always)
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(window.acquire(1, 1, always)))
    waiter.start()
    window.close()
    waiter.join(5)
    assert results == [False]


def test_waiters_leave_when_the_client_goes_away() -> None:
    window = CreditWindow(max_batches=1, max_bytes=100)
    window.acquire(0, 1, always)
    checks = iter([True, True, False])
    started = time.monotonic()
    assert not window.acquire(1, 1, lambda: next(checks))
    assert time.monotonic() - started < 5


def test_wait_drained() -> None:
    window = CreditWindow(max_batches=3, max_bytes=100)
    window.acquire(0, 1, always)
    window.acquire(1, 1, always)
    threading.Timer(0.2, window.consume_through, args=(1,)).start()
    assert window.wait_drained(always)
    window.acquire(2, 1, always)
    assert not window.wait_drained(lambda: False)
