"""CPU by thread over a window, from /proc: what sampling profilers get wrong about busy processes.

py-spy counts a thread blocked inside C code it does not recognise as idle
(Ray's worker loop, gRPC's completion queues) as busy, and it cannot see
native threads at all (gRPC's event engine, which does the socket writes).
The kernel's per-thread CPU times have neither problem. Python threads are
named from ``py-spy dump`` (their OS names are all the process title), native
threads keep their own names.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

_THREAD = re.compile(r'^Thread (\d+) \([^)]*\): "(.*)"')


@dataclass(frozen=True)
class ThreadCpu:
    pid: int
    tid: int
    name: str
    cpu_s: float


# The whole process (its threads that exited included) is kept under this tid.
PROCESS = 0


def _stat_times(path: str) -> tuple[str, float] | None:
    """(name, user + system CPU seconds) from a /proc stat file; None when it is gone."""
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2 :].split()
    return stat[stat.index("(") + 1 : stat.rindex(")")], (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def thread_times(pids: Iterable[int]) -> dict[tuple[int, int], tuple[str, float]]:
    """(pid, tid) -> (the thread's OS name, its user + system CPU seconds so far); (pid, PROCESS)
    holds the whole process's, which keeps the time of threads that exited."""
    times: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in pids:
        whole = _stat_times(f"/proc/{pid}/stat")
        if whole is None:
            continue
        times[(pid, PROCESS)] = whole
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            thread = _stat_times(f"/proc/{pid}/task/{tid}/stat")
            if thread is not None:
                times[(pid, int(tid))] = thread
    return times


def python_thread_names(pid: int, py_spy: str) -> dict[int, str]:
    """tid -> Python thread name, from one ``py-spy dump``; {} for a process it cannot read."""
    try:
        out = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("py-spy dump of %d failed: %s", pid, exc)
        return {}
    return {int(m.group(1)): m.group(2) for m in map(_THREAD.match, out.splitlines()) if m}


def busiest_threads(before: Mapping[tuple[int, int], tuple[str, float]],
                    after: Mapping[tuple[int, int], tuple[str, float]],
                    names: Mapping[int, Mapping[int, str]]) -> list[ThreadCpu]:
    """CPU each thread spent between the two snapshots, busiest first."""
    spent = []
    for (pid, tid), (os_name, cpu) in after.items():
        delta = cpu - before.get((pid, tid), (os_name, 0.0))[1]
        if delta > 0:
            spent.append(ThreadCpu(pid, tid, names.get(pid, {}).get(tid, os_name), delta))
    return sorted(spent, key=lambda t: -t.cpu_s)


def format_threads(threads: list[ThreadCpu], process_names: Mapping[int, str], seconds: float,
                   top: int = 8) -> str:
    """Per process (busiest first): its cores, then its busiest threads' cores."""
    by_pid: dict[int, list[ThreadCpu]] = {}
    totals: dict[int, float] = {}
    for thread in threads:
        if thread.tid == PROCESS:
            totals[thread.pid] = thread.cpu_s
        else:
            by_pid.setdefault(thread.pid, []).append(thread)
    lines = [f"\n== CPU by thread over the {seconds:.0f} s window (/proc; cores = CPU-s / s)"]
    for pid, total in sorted(totals.items(), key=lambda item: -item[1]):
        if total / seconds < 0.01:
            continue
        group = by_pid.get(pid, [])
        lines.append(f"  {process_names.get(pid, '?')} (pid {pid}): {total / seconds:.2f} cores")
        for thread in group[:top]:
            if thread.cpu_s / seconds >= 0.005:
                lines.append(f"    {thread.cpu_s / seconds:5.2f}  {thread.name} ({thread.tid})")
        gone = total - sum(t.cpu_s for t in group)
        if gone / seconds >= 0.005:
            lines.append(f"    {gone / seconds:5.2f}  threads that exited in the window")
    return "\n".join(lines)


__all__ = ["PROCESS", "ThreadCpu", "busiest_threads", "format_threads", "python_thread_names", "thread_times"]
