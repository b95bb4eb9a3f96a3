"""Run a generator on its own thread, a few items ahead of its consumer.

A gRPC response stream is sent from one thread: while it writes message k,
nothing prepares message k+1. Reading ahead lets taking a decoded batch from
Ray and framing it overlap with sending the previous one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

_POLL_S = 0.25
_DONE = object()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def read_ahead(source: Iterator[T], depth: int, is_active: Callable[[], bool], name: str) -> Iterator[T]:
    items: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set() and is_active():
            try:
                items.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in source:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:
            put(_Raised(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()  # run the source's finally blocks on this thread

    producer = threading.Thread(target=produce, name=name, daemon=True)
    producer.start()
    try:
        while True:
            try:
                item = items.get(timeout=_POLL_S)
            except queue.Empty:
                if not producer.is_alive() and items.empty():
                    return
                continue
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        producer.join(timeout=5.0)


__all__ = ["read_ahead"]
