"""A decode actor's decoding thread is shared between jobs by weight, not by how many tasks wait."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future

import pytest

from shardstream.service.node.fair_queue import FairQueue
from shardstream.service.shares import job_decoders, priority_weights, rank_window

TASK_S = 0.004


class TaskClock:
    """The decoding thread's clock, moved on only by the tasks it times: each `work()` is a task
    costing exactly TASK_S, so the shares follow from the queue's rule alone, not from how long a
    sleep took on a busy machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.now += TASK_S


def _run_backlogged(weights: dict[str, float], tasks: dict[str, int]) -> list[str]:
    """Submit every job's tasks while the thread is held, then release it: the order they ran in."""
    clock = TaskClock()
    queue = FairQueue(clock=clock)
    ran: list[str] = []
    gate = threading.Event()
    queue.submit("gate", 1.0, gate.wait)
    futures: list[Future[None]] = []
    for job, count in tasks.items():
        for _ in range(count):
            futures.append(queue.submit(job, weights[job], lambda job=job: (clock.work(), ran.append(job))[0]))
    gate.set()
    for future in futures:
        future.result(timeout=30)
    queue.close()
    return ran


def test_a_job_with_many_waiting_tasks_gets_no_more_than_one_with_few() -> None:
    """64 ranks' wants against 2 ranks' wants: while both wait, each job gets half the thread."""
    ran = _run_backlogged({"big": 1.0, "small": 1.0}, {"big": 64, "small": 16})
    first = ran[:32]  # both jobs still have tasks waiting throughout
    assert first.count("small") == 16, first  # each task costs the same on the queue's clock


def test_weights_set_the_shares() -> None:
    ran = _run_backlogged({"high": 3.0, "low": 1.0}, {"high": 60, "low": 60})
    first = ran[:40]
    assert first.count("high") == 30, first  # 30 of 40 at 3:1


def test_tasks_of_one_job_run_in_the_order_submitted() -> None:
    queue = FairQueue()
    order: list[int] = []
    futures = [queue.submit("job", 1.0, lambda i=i: order.append(i)) for i in range(50)]
    for future in futures:
        future.result(timeout=10)
    queue.close()
    assert order == list(range(50))


def test_an_idle_job_banks_no_credit() -> None:
    """A job that asked nothing for a while starts at the current virtual time: it does not then
    take the thread for as long as it was away."""
    clock = TaskClock()
    queue = FairQueue(clock=clock)
    for _ in range(20):  # "steady" runs alone for a while
        queue.submit("steady", 1.0, clock.work).result(timeout=10)
    ran: list[str] = []
    gate = threading.Event()
    queue.submit("gate", 1.0, gate.wait)
    futures = [queue.submit(job, 1.0, lambda job=job: (clock.work(), ran.append(job))[0])
               for _ in range(20) for job in ("late", "steady")]
    gate.set()
    for future in futures:
        future.result(timeout=30)
    queue.close()
    assert ran[:10].count("late") == 5, ran  # they alternate from the start


def test_errors_reach_the_caller_and_the_thread_goes_on() -> None:
    queue = FairQueue()

    def fail() -> None:
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        queue.submit("a", 1.0, fail).result(timeout=10)
    assert queue.submit("a", 1.0, lambda: 7).result(timeout=10) == 7
    assert queue.seconds()["a"] >= 0
    queue.close()


def test_close_cancels_waiting_tasks() -> None:
    queue = FairQueue()
    gate, started = threading.Event(), threading.Event()
    running = queue.submit("a", 1.0, lambda: (started.set(), gate.wait()))
    assert started.wait(10)
    waiting = queue.submit("b", 1.0, lambda: None)
    queue.close()
    gate.set()
    running.result(timeout=10)
    with pytest.raises(CancelledError):
        waiting.result(timeout=10)
    with pytest.raises(RuntimeError, match="stopped"):
        queue.submit("a", 1.0, lambda: None)


def test_priority_classes_parse_and_refuse_what_cannot_work() -> None:
    assert priority_weights(["high=4", " batch = 0.5"]) == {"default": 1.0, "high": 4.0, "batch": 0.5}
    assert priority_weights(["default=2"]) == {"default": 2.0}
    for bad in ("high", "=3", "high=0", "high=-1", "high=inf", "high=x"):
        with pytest.raises(ValueError, match="NAME=WEIGHT"):
            priority_weights([bad])


def test_each_job_gets_its_own_stable_subset_of_decoders() -> None:
    pool = [f"10.0.0.{i}:5200" for i in range(8)]
    subsets = {job: job_decoders(job, pool, 3) for job in (f"job{i}" for i in range(20))}
    assert all(len(s) == 3 and set(s) <= set(pool) for s in subsets.values())
    assert len({tuple(s) for s in subsets.values()}) > 5  # jobs spread over the pool
    # An actor that leaves or joins moves only the jobs that had it (or now rank it first).
    moved = sum(set(job_decoders(j, pool[1:], 3)) != set(s) for j, s in subsets.items() if pool[0] not in s)
    assert moved == 0
    assert job_decoders("job0", pool, None) == pool == job_decoders("job0", pool, 8)


def test_rank_window_divides_the_job_limit() -> None:
    assert rank_window(None, 8) == 0
    assert rank_window(1 << 30, 8) == 1 << 27
    assert rank_window(5, 8) == 1
