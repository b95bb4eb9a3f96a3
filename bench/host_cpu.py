"""Where a multi-host run's CPU goes: each namespace host's processes by role, and the kernel's.

For bench.capped_links: the hosts are network namespaces on one machine, so
every process of every host shares its cores. A snapshot names each live
process of the hosts by role (``decoders``: Ray workers titled
``ray::DecodeWorker``; ``raylets``: Ray's raylet, GCS and agents and every
other Ray worker; ``service``: ``shardstream serve``; ``rank``: the consumer),
and the machine's own counters add ``softirq`` (the network stack's receive and
forwarding across the bridge and veths, which no process is charged for) and
the CPU of everything else on the machine (``other``). The difference of two
snapshots is CPU-seconds per role; busy over cores x wall time is how
saturated the machine was.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

ROLES = ("decoders", "raylets", "service", "rank", "softirq", "other")
_MACHINE_BUSY = ("user", "nice", "system", "irq", "softirq", "steal")


def _role(cmdline: list[str]) -> str:
    title = " ".join(cmdline)
    if title.startswith("ray::DecodeWorker"):
        return "decoders"
    if "link_consumer" in title:
        return "rank"
    if "serve" in cmdline and any(part.endswith("/shardstream") for part in cmdline[:2]):
        return "service"
    return "raylets"


def namespace_pids(netns: Iterable[str]) -> list[int]:
    """Every process inside these network namespaces (by the namespace's inode: no `ip` per call)."""
    inodes = set()
    for name in netns:
        try:
            inodes.add(os.stat(f"/var/run/netns/{name}").st_ino)
        except OSError:
            continue
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


@dataclass(frozen=True)
class CpuSnapshot:
    at: float  # time.monotonic()
    processes: dict[int, tuple[str, float]]  # pid -> (role, CPU seconds so far)
    busy_s: float  # the machine's busy CPU seconds since boot
    softirq_s: float

    @staticmethod
    def take(netns: Iterable[str]) -> CpuSnapshot:
        processes: dict[int, tuple[str, float]] = {}
        for pid in namespace_pids(netns):
            try:
                process = psutil.Process(pid)
                times = process.cpu_times()
                processes[pid] = (_role(process.cmdline()), times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        machine = psutil.cpu_times()
        busy = sum(getattr(machine, f, 0.0) for f in _MACHINE_BUSY)
        return CpuSnapshot(time.monotonic(), processes, busy, getattr(machine, "softirq", 0.0))


def cpu_by_role(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """CPU seconds per role between two snapshots (a process new in `after` counts from zero);
    ``busy`` is the machine's total, ``wall_s`` the time between them, ``cores`` its core count."""
    out = dict.fromkeys(ROLES, 0.0)
    for pid, (role, cpu) in after.processes.items():
        out[role] += max(0.0, cpu - before.processes.get(pid, (role, 0.0))[1])
    out["softirq"] = after.softirq_s - before.softirq_s
    busy = after.busy_s - before.busy_s
    out["other"] = max(0.0, busy - sum(out[r] for r in ROLES if r != "other"))
    out["busy"] = busy
    out["wall_s"] = after.at - before.at
    out["cores"] = float(os.cpu_count() or 1)
    return out


def saturation(cpu: dict[str, float]) -> float:
    """The machine's busy share of all its cores over the window (1.0: every core busy throughout)."""
    return cpu["busy"] / (cpu["cores"] * cpu["wall_s"]) if cpu["wall_s"] > 0 else 0.0


class CpuSampler:
    """Snapshots of the hosts every `interval_s` while a block runs (``with CpuSampler(...) as s``),
    so a window can be cut out afterwards to line up with the consumer's steady seconds."""

    def __init__(self, netns: Sequence[str], interval_s: float = 0.25) -> None:
        self._netns = list(netns)
        self._interval_s = interval_s
        self.snapshots: list[CpuSnapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-host-cpu", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            self.snapshots.append(CpuSnapshot.take(self._netns))
            if self._stop.wait(self._interval_s):
                return

    def window(self, start: float, end: float) -> dict[str, float] | None:
        """CPU by role between the snapshots nearest `start` and `end` (monotonic); None when the
        window holds fewer than two."""
        inside = [s for s in self.snapshots if start - self._interval_s / 2 <= s.at <= end + self._interval_s / 2]
        if len(inside) < 2:
            return None
        return cpu_by_role(inside[0], inside[-1])


__all__ = ["ROLES", "CpuSampler", "CpuSnapshot", "cpu_by_role", "namespace_pids", "saturation"]
