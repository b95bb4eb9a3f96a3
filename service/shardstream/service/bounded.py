"""Calls that may block on remote storage, bounded by the RPC's deadline.

Opening a job lists and reads Parquet footers through fsspec. A store that
does not answer (no route, a credentials probe that retries) can block a
thread for minutes. Such calls run on a thread of their own, and the RPC waits
for them only until shortly before its deadline, then answers
DEADLINE_EXCEEDED with a message naming what was being done: the gRPC worker
is free again and the client hears why, instead of its own bare deadline.
A call left running finishes (or fails) in the background; a later open of
the same job waits for it through the registry's per-job lock.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from shardstream.proto.errors import DeadlineExceeded

log = logging.getLogger(__name__)

T = TypeVar("T")

MARGIN_S = 0.5  # answer this long before the client's deadline, so our message reaches it


def run_bounded(call: Callable[[], T], timeout_s: float | None, what: str) -> T:
    """`call()`'s result, or DeadlineExceeded once `timeout_s` (None: no limit) is nearly up.

    The call runs on a daemon thread of its own, so one stuck for good never holds up shutdown.
    """
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def work() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=work, name="shardstream-storage", daemon=True).start()
    wait_s = None if timeout_s is None else max(0.0, timeout_s - MARGIN_S)
    try:
        return future.result(timeout=wait_s)
    except concurrent.futures.TimeoutError:
        log.warning("%s did not finish within %.1f s; left running in the background", what, wait_s)
        raise DeadlineExceeded(
            f"{what} did not finish within the request's deadline ({timeout_s:.1f} s): is the "
            "storage reachable from the service, and does the service have credentials for it?"
        ) from None


__all__ = ["run_bounded"]
