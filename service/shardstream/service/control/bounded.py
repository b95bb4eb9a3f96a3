"""Calls that may block on remote storage, bounded by the RPC's deadline.

Opening a job lists and reads Parquet footers through fsspec. A store that
does not answer (no route, a credentials probe that retries) can block a
thread for minutes. Such calls run on a thread of their own, and the RPC waits
for them only until shortly before its deadline, then answers
DEADLINE_EXCEEDED with a message naming what was being done: the gRPC worker
is free again and the client hears why, instead of its own bare deadline.
A call left running finishes (or fails) in the background; a later open of
the same job waits for it through the registry's per-job lock.

Calls within their deadline are few (each holds a gRPC worker), but calls left
running are not: a store that never answers, opened again and again, would
gather threads without end. Past `max_abandoned` of them, new calls are refused
at once with RESOURCE_EXHAUSTED until some finish.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from shardstream.proto.errors import DeadlineExceeded, StorageBusy

log = logging.getLogger(__name__)

T = TypeVar("T")

MARGIN_S = 0.5  # answer this long before the client's deadline, so our message reaches it


class StorageCalls:
    """Runs storage calls bounded by a deadline, and counts the ones left running past it."""

    def __init__(self, max_abandoned: int) -> None:
        self.max_abandoned = max_abandoned
        self._lock = threading.Lock()
        self._abandoned = 0

    @property
    def abandoned(self) -> int:
        """Calls that outlived their request's deadline and are still running."""
        with self._lock:
            return self._abandoned

    def run(self, call: Callable[[], T], timeout_s: float | None, what: str) -> T:
        """`call()`'s result, or DeadlineExceeded once `timeout_s` (None: no limit) is nearly up.

        The call runs on a daemon thread of its own, so one stuck for good never holds up shutdown.
        """
        with self._lock:
            if self._abandoned >= self.max_abandoned:
                raise StorageBusy(
                    f"not {what}: {self._abandoned} earlier storage calls are still running past their "
                    "deadlines (max_abandoned_storage_calls); the storage is not answering the service")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        abandoned = False  # set (under the lock) once the request stops waiting for the call

        def work() -> None:
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)
            with self._lock:
                if abandoned:
                    self._abandoned -= 1
                    log.info("%s finished after its request's deadline", what)

        threading.Thread(target=work, name="shardstream-storage", daemon=True).start()
        wait_s = None if timeout_s is None else max(0.0, timeout_s - MARGIN_S)
        try:
            return future.result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            with self._lock:
                if future.done():  # finished in the instant between the timeout and the lock
                    return future.result()
                abandoned = True
                self._abandoned += 1
            log.warning("%s did not finish within %.1f s; left running in the background", what, wait_s)
            raise DeadlineExceeded(
                f"{what} did not finish within the request's deadline ({timeout_s:.1f} s): is the "
                "storage reachable from the service, and does the service have credentials for it?"
            ) from None


__all__ = ["StorageCalls"]
