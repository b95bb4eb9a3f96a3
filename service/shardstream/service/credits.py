"""Credit-based flow control for one stream, sized in batches and bytes.

The service may have at most `max_batches` batches and `max_bytes` bytes sent
but not yet consumed by the client's training loop. The client returns
credit by naming the last step it handed to the loop. This bounds the memory
a rank's client holds for prefetched data, whatever the network buffers.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from shardstream.proto.errors import InvalidJobSpec

_POLL_S = 0.25


class CreditWindow:
    def __init__(self, max_batches: int, max_bytes: int) -> None:
        self.max_batches = max_batches
        self.max_bytes = max_bytes
        self._sent: deque[tuple[int, int]] = deque()  # (step, bytes), oldest first
        self._bytes = 0
        self._closed = False
        self._error: Exception | None = None
        self._cond = threading.Condition()

    def acquire(self, step: int, nbytes: int, is_active: Callable[[], bool]) -> bool:
        """Block until batch `step` fits the window; False if the stream ended meanwhile."""
        if nbytes > self.max_bytes:
            raise InvalidJobSpec(
                f"batch {step} is {nbytes} bytes, more than the stream's window of {self.max_bytes} "
                "bytes: raise the client's prefetch_bytes"
            )
        with self._cond:
            while len(self._sent) >= self.max_batches or self._bytes + nbytes > self.max_bytes:
                if self._error is not None:
                    raise self._error
                if self._closed or not is_active():
                    return False
                self._cond.wait(_POLL_S)
            self._sent.append((step, nbytes))
            self._bytes += nbytes
            return True

    def wait_drained(self, is_active: Callable[[], bool]) -> bool:
        """Block until the client consumed everything sent; False if the stream ended first."""
        with self._cond:
            while self._sent:
                if self._error is not None:
                    raise self._error
                if self._closed or not is_active():
                    return False
                self._cond.wait(_POLL_S)
            return True

    def consume_through(self, step: int) -> None:
        """The client consumed every batch up to and including `step`."""
        with self._cond:
            while self._sent and self._sent[0][0] <= step:
                self._bytes -= self._sent.popleft()[1]
            self._cond.notify_all()

    def close(self, error: Exception | None = None) -> None:
        """No more credit will come; waiters leave (raising `error` if the client misbehaved)."""
        with self._cond:
            self._closed = True
            self._error = self._error or error
            self._cond.notify_all()

    @property
    def in_flight(self) -> tuple[int, int]:
        """(batches, bytes) sent and not yet consumed."""
        with self._cond:
            return len(self._sent), self._bytes


__all__ = ["CreditWindow"]
