"""A decode actor's one decoding thread, shared between jobs by weight, not by how many ranks ask.

A decode actor is one CPU and decodes one batch at a time. Each rank's stream
keeps a want or two waiting, so first-come-first-served would give a 64-rank
job 32 times the decoding of a 2-rank job. Here each job has its own queue,
and the thread runs next the job whose decoding so far, divided by its weight,
is least (start-time fair queuing, with each task's cost its measured seconds):
while both wait, the 64-rank and the 2-rank job each get half the time, or
4:1 with weights 4 and 1. A job that was idle starts at the current virtual
time, so idleness is not banked as credit. Within a job tasks run in the order
submitted.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class _JobQueue:
    weight: float
    tasks: collections.deque[tuple[Future[Any], Callable[[], Any]]] = field(default_factory=collections.deque)
    virtual_start: float = 0.0  # the virtual time its next task starts at
    seconds: float = 0.0  # decoding it was given (status and tests)


class FairQueue:
    def __init__(self, name: str = "shardstream-batch-decode",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """`clock` times each task on the decoding thread (its cost, in seconds)."""
        self._clock = clock
        self._jobs: dict[str, _JobQueue] = {}
        self._virtual_now = 0.0  # the start tag of the task running or last run
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: str, weight: float, fn: Callable[[], T]) -> Future[T]:
        """Run `fn` on the decoding thread in `job`'s turn; `weight` > 0 is the job's share."""
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the decoding thread has stopped")
            queue = self._jobs.get(job)
            if queue is None:
                queue = self._jobs[job] = _JobQueue(weight, virtual_start=self._virtual_now)
            elif not queue.tasks:  # back from idle: no credit for the time it asked nothing
                queue.virtual_start = max(queue.virtual_start, self._virtual_now)
            queue.weight = weight
            queue.tasks.append((future, fn))
            self._ready.notify()
        return future

    def seconds(self) -> dict[str, float]:
        """job -> seconds of decoding it was given."""
        with self._ready:
            return {job: q.seconds for job, q in self._jobs.items()}

    def forget(self, job: str) -> None:
        """Drop an idle job's account (a job that is forgotten); one with tasks waiting keeps it."""
        with self._ready:
            if job in self._jobs and not self._jobs[job].tasks:
                del self._jobs[job]

    def close(self) -> None:
        """Stop after the running task; waiting tasks are cancelled."""
        with self._ready:
            self._closed = True
            for queue in self._jobs.values():
                for future, _ in queue.tasks:
                    future.cancel()
                queue.tasks.clear()
            self._ready.notify()

    def _next(self) -> tuple[_JobQueue, Future[Any], Callable[[], Any]] | None:
        with self._ready:
            while True:
                if self._closed:
                    return None
                waiting = [q for q in self._jobs.values() if q.tasks]
                if waiting:
                    queue = min(waiting, key=lambda q: q.virtual_start)
                    self._virtual_now = queue.virtual_start
                    future, fn = queue.tasks.popleft()
                    return queue, future, fn
                self._ready.wait()

    def _run(self) -> None:
        while (picked := self._next()) is not None:
            queue, future, fn = picked
            if not future.set_running_or_notify_cancel():
                continue
            started = self._clock()
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting stream
                future.set_exception(exc)
            else:
                future.set_result(result)
            cost = self._clock() - started
            with self._ready:
                queue.seconds += cost
                queue.virtual_start += cost / queue.weight


__all__ = ["FairQueue"]
