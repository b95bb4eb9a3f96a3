"""bench.thread_cpu: CPU by thread between two /proc snapshots, exited threads kept in the total."""

from __future__ import annotations

import os
import threading

from bench.thread_cpu import PROCESS, busiest_threads, format_threads, thread_times


def test_thread_times_see_this_process_and_each_of_its_threads() -> None:
    done = threading.Event()
    worker = threading.Thread(target=done.wait)
    worker.start()
    try:
        times = thread_times([os.getpid()])
        assert (os.getpid(), PROCESS) in times and (os.getpid(), os.getpid()) in times
        assert (os.getpid(), worker.native_id) in times
        assert all(cpu >= 0 for _, cpu in times.values())
    finally:
        done.set()
        worker.join()
    assert thread_times([2**22 + 1]) == {}  # no such process


def test_threads_are_ranked_by_cpu_named_and_exited_ones_shown_as_the_rest() -> None:
    before = {(7, PROCESS): ("p", 1.0), (7, 7): ("p", 0.5), (7, 8): ("p", 0.5), (9, PROCESS): ("q", 0.0)}
    after = {(7, PROCESS): ("p", 5.0), (7, 7): ("p", 1.0), (7, 8): ("p", 2.5), (7, 10): ("event_engine", 0.5),
             (9, PROCESS): ("q", 0.001)}
    threads = busiest_threads(before, after, {7: {8: "shardstream-batch-decode_0"}})
    assert [(t.tid, t.name, t.cpu_s) for t in threads if t.pid == 7] == [
        (PROCESS, "p", 4.0), (8, "shardstream-batch-decode_0", 2.0), (7, "p", 0.5), (10, "event_engine", 0.5)]
    text = format_threads(threads, {7: "ray::DecodeWorker", 9: "idle"}, seconds=10.0)
    assert "ray::DecodeWorker (pid 7): 0.40 cores" in text
    assert "0.20  shardstream-batch-decode_0 (8)" in text
    assert "0.10  threads that exited in the window" in text  # 4.0 - (2.0 + 0.5 + 0.5)
    assert "idle" not in text  # under 0.01 cores
