"""Measuring one consumer: how fast batches arrive and what they cost the consuming process.

``measure(open_loader, ...)`` runs inside the consumer process.

* ``ttfb_s``: from before the loader is constructed to the first batch
  (connecting, opening the job, starting workers or a local Ray: what a
  training script waits for before its first step).
* The measured window starts when the last warm-up batch arrives (the harness
  makes the warm-up one whole epoch, so workers are started and warm) and ends
  when the last batch does. Throughput, MB/s, stall fraction and CPU per
  sample are of that window only.
* Peak RSS is of the whole iteration, against the RSS just before ``iter()``.
* Given a server's pid, its process tree's CPU (``server_cpu_s``, by role)
  is taken from before the loader is constructed to the last batch: opening
  the job, the warm-up and the measured epochs, not the consumer's
  interpreter starting and exiting, when the server only idles.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bench.procstats import (
    PeakRss,
    cpu_delta,
    descendants_cpu,
    machine_busy_s,
    process_tree_cpu,
    rss_bytes,
    self_cpu_s,
    self_page_faults,
    tree_cpu_delta,
)

Batch = Mapping[str, Any]  # name -> torch.Tensor or numpy array
LoaderFactory = Callable[[], contextlib.AbstractContextManager[Iterable[Batch]]]

MB = 1e6


@dataclass
class RunMetrics:
    batches: int = 0
    samples: int = 0
    nbytes: int = 0
    batch_bytes: int = 0  # bytes of the first batch (all tensors)
    measured_samples: int = 0  # after the warm-up batches
    measured_bytes: int = 0
    measured_s: float = 0.0
    samples_per_s: float = 0.0
    mb_per_s: float = 0.0
    construct_s: float = 0.0
    ttfb_s: float = 0.0
    stall_fraction: float = 0.0
    cpu_self_s: float = 0.0
    cpu_children_s: float = 0.0
    cpu_self_per_1k: float = 0.0
    cpu_children_per_1k: float = 0.0
    cpu_total_per_1k: float = 0.0
    machine_busy_s: float = 0.0  # CPU all processes on the machine used in the measured window
    page_faults: int = 0  # the consumer's minor page faults in the measured window
    rss_baseline_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_growth_mb: float = 0.0
    rss_method: str = ""
    server_cpu_s: dict[str, float] = dataclasses.field(default_factory=dict)  # role -> CPU-s (see above)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def batch_shape(batch: Batch) -> tuple[int, int]:
    """(samples, bytes) of a batch: the leading dimension of its first tensor, all tensors' bytes."""
    values = list(batch.values())
    if not values:
        return 0, 0
    samples = int(values[0].shape[0]) if len(values[0].shape) else 1
    return samples, int(sum(int(v.nbytes) for v in values))


def measure(open_loader: LoaderFactory, max_batches: int | None = None, warmup_batches: int = 1,
            step_s: float = 0.0, server_pid: int = 0, clock: Callable[[], float] = time.perf_counter,
            sleep: Callable[[float], None] = time.sleep) -> RunMetrics:
    """`clock` times the loader (ttfb, waits, the window) and `sleep` is the consumer's step."""
    if warmup_batches < 1:
        raise ValueError("warmup_batches must be >= 1: the first batch is never a steady-state one")
    m = RunMetrics()
    server0 = process_tree_cpu(server_pid) if server_pid else {}
    start = clock()
    with open_loader() as loader:
        m.construct_s = clock() - start
        baseline = rss_bytes()
        peak = PeakRss()
        peak.start()
        cpu0, children0, busy0, faults0 = 0.0, {}, 0.0, 0
        window_start = last = 0.0
        waited = 0.0
        iterator = iter(loader)
        try:
            while max_batches is None or m.batches < max_batches:
                asked = clock()
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                got = last = clock()
                samples, nbytes = batch_shape(batch)
                m.batches += 1
                m.samples += samples
                m.nbytes += nbytes
                if m.batches == 1:
                    m.ttfb_s = got - start
                    m.batch_bytes = nbytes
                if m.batches == warmup_batches:
                    window_start = got
                    cpu0, children0, busy0 = self_cpu_s(), descendants_cpu(), machine_busy_s()
                    faults0 = self_page_faults()
                elif m.batches > warmup_batches:
                    waited += got - asked
                    m.measured_samples += samples
                    m.measured_bytes += nbytes
                del batch
                if step_s > 0:
                    sleep(step_s)
            if server_pid:
                m.server_cpu_s = tree_cpu_delta(server0, process_tree_cpu(server_pid))
            m.machine_busy_s = machine_busy_s() - busy0
            m.cpu_self_s = self_cpu_s() - cpu0
            m.page_faults = self_page_faults() - faults0
            m.cpu_children_s = cpu_delta(children0, descendants_cpu())
            peak_bytes = peak.stop()
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
    m.rss_method = peak.method
    m.rss_baseline_mb = baseline / MB
    m.rss_peak_mb = peak_bytes / MB
    m.rss_growth_mb = max(0, peak_bytes - baseline) / MB
    if m.batches > warmup_batches:
        m.measured_s = last - window_start
        m.samples_per_s = m.measured_samples / m.measured_s
        m.mb_per_s = m.measured_bytes / MB / m.measured_s
        m.stall_fraction = waited / m.measured_s
        m.cpu_self_per_1k = m.cpu_self_s * 1000 / m.measured_samples
        m.cpu_children_per_1k = m.cpu_children_s * 1000 / m.measured_samples
        m.cpu_total_per_1k = m.cpu_self_per_1k + m.cpu_children_per_1k
    return m


__all__ = ["Batch", "LoaderFactory", "RunMetrics", "batch_shape", "measure"]
