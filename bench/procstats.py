"""CPU time and resident memory of the consumer process and of its descendants.

* CPU of this process: user + system time of all its threads (getrusage).
* CPU of descendants (DataLoader workers, a local Ray started by the
  consumer): psutil, summed over every descendant alive at the end, minus what
  the ones already alive at the start had used then.
* CPU of a server's process tree (the shardstream service and the decode
  actors under it, the tf.data service), by role, between two snapshots.
* Peak RSS: Linux keeps a high-water mark (VmHWM) that writing ``5`` to
  /proc/self/clear_refs resets, so the peak of the measured window is exact.
  Where that is not possible a sampling thread stands in.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def self_page_faults() -> int:
    """Minor page faults of this process so far: each a fresh page the kernel zeroed and mapped,
    which is what a process pays when its allocator hands freed memory back and takes it again."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def machine_busy_s() -> float:
    """CPU seconds all cores of the machine spent busy since boot (steal included: a VM's
    neighbours take those cycles from this machine, like any other foreign load)."""
    t = psutil.cpu_times()
    return float(sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal")))


def _cpu_with_reaped(process: psutil.Process) -> float:
    """A process's CPU plus that of its children it has already reaped: a worker that a
    raylet started and stopped during the window still counts."""
    times = process.cpu_times()
    return float(times.user + times.system + getattr(times, "children_user", 0.0)
                 + getattr(times, "children_system", 0.0))


def descendants_cpu() -> dict[int, float]:
    """pid -> CPU seconds of every live descendant of this process (with what each reaped)."""
    out: dict[int, float] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            out[child.pid] = _cpu_with_reaped(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU the descendants used between two snapshots (new processes count from zero)."""
    return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())


def process_tree_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds) for a server process and every live descendant.

    Roles: ``main`` (the process itself), ``decoders`` (Ray workers titled
    ``ray::DecodeWorker``), ``runtime`` (everything else under it: raylet, GCS,
    Ray's agents).
    """
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out: dict[int, tuple[str, float]] = {}
    for process in processes:
        try:
            cpu = _cpu_with_reaped(process)
            title = " ".join(process.cmdline()[:1])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if process.pid == pid:
            role = "main"
        elif title.startswith("ray::DecodeWorker"):
            role = "decoders"
        else:
            role = "runtime"
        out[process.pid] = (role, cpu)
    return out


def tree_cpu_delta(before: dict[int, tuple[str, float]],
                   after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per role between two ``process_tree_cpu`` snapshots."""
    totals = {"main": 0.0, "decoders": 0.0, "runtime": 0.0}
    for pid, (role, cpu) in after.items():
        previous = before.get(pid, (role, 0.0))[1]
        totals[role] += max(0.0, cpu - previous)
    return totals


class ForeignLoad:
    """Cores' worth of CPU used by processes outside this process's tree during a block.

    For a parent that runs everything it measures as its descendants (live
    ones via psutil, waited-for ones via RUSAGE_CHILDREN):
    ``with ForeignLoad() as probe: ...`` then ``probe.cores``.
    """

    def __enter__(self) -> ForeignLoad:
        self._busy = machine_busy_s()
        self._tree = descendants_cpu()
        self._own = self_cpu_s() + _waited_children_cpu_s()
        self._start = time.perf_counter()
        self.cores = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._start
        ours = (cpu_delta(self._tree, descendants_cpu())
                + self_cpu_s() + _waited_children_cpu_s() - self._own)
        self.cores = max(0.0, machine_busy_s() - self._busy - ours) / wall if wall > 0 else 0.0


def _waited_children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _status_kib(field: str) -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


@dataclass
class PeakRss:
    """The peak RSS of this process from ``start()`` to ``stop()``, in bytes."""

    interval_s: float = 0.01
    method: str = ""
    _peak: int = 0
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        if self._reset_high_water_mark():
            self.method = "VmHWM"
            return
        self.method = "sampled"
        self._peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
        self._thread.start()

    def stop(self) -> int:
        if self.method == "VmHWM":
            hwm = _status_kib("VmHWM")
            return hwm * 1024 if hwm is not None else rss_bytes()
        assert self._stop is not None and self._thread is not None
        self._stop.set()
        self._thread.join()
        return max(self._peak, rss_bytes())

    def _sample(self) -> None:
        assert self._stop is not None
        while not self._stop.wait(self.interval_s):
            self._peak = max(self._peak, rss_bytes())

    @staticmethod
    def _reset_high_water_mark() -> bool:
        try:
            with open(_CLEAR_REFS, "w") as f:
                f.write("5")
        except OSError as exc:
            log.debug("cannot reset VmHWM (%s): sampling RSS instead", exc)
            return False
        return _status_kib("VmHWM") is not None


__all__ = [
    "ForeignLoad",
    "PeakRss",
    "cpu_delta",
    "descendants_cpu",
    "machine_busy_s",
    "process_tree_cpu",
    "rss_bytes",
    "self_cpu_s",
    "self_page_faults",
    "tree_cpu_delta",
]
