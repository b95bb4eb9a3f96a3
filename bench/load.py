"""Several jobs on one service: fair shares of the decode pool, and bounded service memory.

    python -m bench.load                    # 4 jobs x 2 ranks for 60 s
    python -m bench.load --seconds 300      # a soak run: the memory curve over five minutes

Each (job, rank) is a RemoteLoader on its own thread in this process, looping
over epochs until the time is up. Reported: each job's samples/s against the
fair share (total / jobs; PASS within 25%), and the RSS of the service's whole
process tree (serve, decode actors, Ray) sampled every second, written with
the per-second curve to bench/results/load-<time>.json and a PNG next to it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from bench.config import RESULTS_DIR, WorkloadSpec
from bench.machine import machine_info
from bench.services import shardstream_service
from bench.workload import jpeg_workload

log = logging.getLogger("bench.load")

FAIRNESS_TOLERANCE = 0.25
WARMUP_S = 5.0
WORKLOAD = WorkloadSpec(num_samples=4096, num_shards=4, image_size=128, row_group_rows=128)


def tree_rss(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class Consumer(threading.Thread):
    """One rank of one job: iterate epochs until `deadline`, counting samples after warm-up."""

    def __init__(self, address: str, dataset: str, job: int, rank: int, ranks: int, start: float,
                 deadline: float) -> None:
        super().__init__(name=f"load-job{job}-rank{rank}", daemon=True)
        self.address, self.dataset, self.job, self.rank, self.ranks = address, dataset, job, rank, ranks
        self.start_at, self.deadline = start, deadline
        self.samples = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from shardstream.client import RemoteLoader

        try:
            with RemoteLoader(self.address, dataset=self.dataset, batch_size=32, shuffle=True, seed=self.job,
                              transform="image", transform_args={"size": 112}, columns=["image", "label"],
                              world_size=self.ranks, rank=self.rank, job_name=f"load-{self.job}",
                              prefetch=2) as loader:
                while time.monotonic() < self.deadline:
                    for batch in loader:
                        now = time.monotonic()
                        if now > self.deadline:
                            return
                        if now > self.start_at + WARMUP_S:
                            self.samples += int(batch["label"].shape[0])
        except BaseException as exc:
            self.error = exc


def run(jobs: int, ranks: int, seconds: float, cores: int) -> dict[str, Any]:
    dataset = jpeg_workload(WORKLOAD)
    with tempfile.TemporaryDirectory(prefix="bench-load-") as work, \
            shardstream_service(cores, Path(work)) as service:
        address = f"127.0.0.1:{service.announced}"
        start = time.monotonic()
        deadline = start + seconds
        consumers = [Consumer(address, str(dataset), j, r, ranks, start, deadline)
                     for j in range(jobs) for r in range(ranks)]
        for consumer in consumers:
            consumer.start()
        memory: list[tuple[float, int]] = []
        while any(c.is_alive() for c in consumers):
            memory.append((round(time.monotonic() - start, 1), tree_rss(service.pid)))
            time.sleep(1.0)
        for consumer in consumers:
            consumer.join()
        errors = [f"{c.name}: {c.error!r}" for c in consumers if c.error is not None]
    measured_s = seconds - WARMUP_S
    per_job = [sum(c.samples for c in consumers if c.job == j) / measured_s for j in range(jobs)]
    fair = sum(per_job) / jobs
    deviations = [(rate - fair) / fair if fair else 0.0 for rate in per_job]
    rss = [r for _, r in memory]
    half = len(rss) // 2
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": f"python -m bench.load --jobs {jobs} --ranks {ranks} --seconds {seconds:g}",
        "machine": machine_info(),
        "workload": WORKLOAD.name,
        "jobs": jobs, "ranks": ranks, "seconds": seconds, "decoders": cores,
        "per_job_samples_per_s": per_job,
        "fair_share_samples_per_s": fair,
        "max_deviation": max(abs(d) for d in deviations),
        "fairness": "PASS" if max(abs(d) for d in deviations) <= FAIRNESS_TOLERANCE and not errors else "FAIL",
        "service_rss_bytes": memory,
        "service_rss_max_mb": max(rss) / 1e6 if rss else 0.0,
        "service_rss_growth_second_half_mb": (max(rss[half:]) - max(rss[:half])) / 1e6 if half else 0.0,
        "errors": errors,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [t for t, _ in result["service_rss_bytes"]]
    rss = [r / 1e6 for _, r in result["service_rss_bytes"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(times, rss)
    ax.set_xlabel("seconds")
    ax.set_ylabel("service tree RSS (MB)")
    ax.set_title(f"{result['jobs']} jobs x {result['ranks']} ranks on one service")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.seconds <= WARMUP_S:
        parser.error(f"--seconds must exceed the {WARMUP_S:g} s warm-up")
    result = run(args.jobs, args.ranks, args.seconds, args.cores)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / f"load-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, stem.with_suffix(".png"))
    for job, rate in enumerate(result["per_job_samples_per_s"]):
        print(f"job {job}: {rate:7.1f} samples/s  ({rate / result['fair_share_samples_per_s'] - 1:+.1%} of fair share)")
    print(f"{result['fairness']} fairness: max deviation {result['max_deviation']:.1%} (limit {FAIRNESS_TOLERANCE:.0%})")
    print(f"service tree RSS: max {result['service_rss_max_mb']:.0f} MB, second half grew "
          f"{result['service_rss_growth_second_half_mb']:+.0f} MB over the first")
    for error in result["errors"]:
        print(f"error: {error}")
    print(f"results: {stem.with_suffix('.json')}")
    return 0 if result["fairness"] == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
