"""Several jobs on one service: fair shares of the decode pool, and bounded service memory.

    python -m bench.load                            # 4 jobs x 2 ranks for 60 s
    python -m bench.load --ranks 8,2 --seconds 90   # unequal jobs: 8 ranks and 2, half each
    python -m bench.load --ranks 2,2 --priority high,default --priority-class high=3  # 3:1
    python -m bench.load --seconds 300              # a soak run: the memory curve over five minutes

Each (job, rank) is a RemoteLoader on its own thread in this process, looping
over epochs until the time is up. `--ranks` gives every job's rank count (one
number: that many for each of `--jobs`), `--priority` each job's priority
class. Reported: each job's samples/s against its target share (its class's
weight over the sum of the jobs' weights, of the total; PASS when every job is
within 15% of its target), and the RSS of the service's whole process tree
(serve, decode actors, Ray) sampled every second, written with the per-second
curve to bench/results/load-<time>.json and a PNG next to it.
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
from shardstream.service.shares import priority_weights

log = logging.getLogger("bench.load")

FAIRNESS_TOLERANCE = 0.15
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

    def __init__(self, address: str, dataset: str, job: int, rank: int, ranks: int, priority: str, prefetch: int,
                 start: float, deadline: float) -> None:
        super().__init__(name=f"load-job{job}-rank{rank}", daemon=True)
        self.address, self.dataset, self.job, self.rank, self.ranks = address, dataset, job, rank, ranks
        self.priority, self.prefetch = priority, prefetch
        self.start_at, self.deadline = start, deadline
        self.samples = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from shardstream.client import RemoteLoader

        try:
            with RemoteLoader(self.address, dataset=self.dataset, batch_size=32, shuffle=True, seed=self.job,
                              transform="image", transform_args={"size": 112}, columns=["image", "label"],
                              world_size=self.ranks, rank=self.rank, job_name=f"load-{self.job}",
                              prefetch=self.prefetch, priority=self.priority) as loader:
                while time.monotonic() < self.deadline:
                    for batch in loader:
                        now = time.monotonic()
                        if now > self.deadline:
                            return
                        if now > self.start_at + WARMUP_S:
                            self.samples += int(batch["label"].shape[0])
        except BaseException as exc:
            self.error = exc


def target_shares(priorities: Sequence[str], classes: Sequence[str]) -> list[float]:
    """Each job's share of the decoders: its class's weight over the sum of the jobs' weights."""
    weights = priority_weights(classes)
    job_weights = [weights[p or "default"] for p in priorities]
    return [w / sum(job_weights) for w in job_weights]


def run(ranks: Sequence[int], priorities: Sequence[str], classes: Sequence[str], seconds: float,
        cores: int, prefetch: int = 4) -> dict[str, Any]:
    jobs = len(ranks)
    dataset = jpeg_workload(WORKLOAD)
    # Shares of decode time: every epoch decodes (the prepared-sample cache would skip it).
    config = {"prepared_cache": "false", **({"priority_classes": ",".join(classes)} if classes else {})}
    with tempfile.TemporaryDirectory(prefix="bench-load-") as work, \
            shardstream_service(cores, Path(work), config=config) as service:
        address = f"127.0.0.1:{service.announced}"
        start = time.monotonic()
        deadline = start + seconds
        consumers = [Consumer(address, str(dataset), j, r, ranks[j], priorities[j], prefetch, start, deadline)
                     for j in range(jobs) for r in range(ranks[j])]
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
    targets = [share * sum(per_job) for share in target_shares(priorities, classes)]
    deviations = [(rate - target) / target if target else 0.0 for rate, target in zip(per_job, targets, strict=True)]
    rss = [r for _, r in memory]
    half = len(rss) // 2
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": (f"python -m bench.load --ranks {','.join(map(str, ranks))} --priority {','.join(priorities)}"
                    f" --prefetch {prefetch} --seconds {seconds:g}" + (f" --priority-class {' --priority-class '.join(classes)}"
                                                 if classes else "")),
        "machine": machine_info(),
        "workload": WORKLOAD.name,
        "jobs": jobs, "ranks": list(ranks), "priorities": list(priorities), "priority_classes": list(classes),
        "seconds": seconds, "decoders": cores, "prefetch": prefetch,
        "per_job_samples_per_s": per_job,
        "target_samples_per_s": targets,
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
    ax.set_title(f"{result['jobs']} jobs ({'+'.join(map(str, result['ranks']))} ranks) on one service")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="jobs, when --ranks gives one number")
    parser.add_argument("--ranks", default="2", help="ranks per job: N (each of --jobs), or N,M,... per job")
    parser.add_argument("--priority", default="", help="each job's priority class: A,B,... (default: default)")
    parser.add_argument("--priority-class", action="append", default=[], metavar="NAME=WEIGHT",
                        help="a priority class of the service (repeatable)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--prefetch", type=int, default=4, help="each rank's RemoteLoader prefetch: a job gets its "
                        "weighted share while its ranks keep wants waiting on the decoders")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.seconds <= WARMUP_S:
        parser.error(f"--seconds must exceed the {WARMUP_S:g} s warm-up")
    ranks = [int(n) for n in args.ranks.split(",")]
    ranks = ranks * args.jobs if len(ranks) == 1 else ranks
    priorities = args.priority.split(",") if args.priority else ["default"] * len(ranks)
    if len(priorities) != len(ranks) or min(ranks) < 1:
        parser.error("--priority names one class per job, and each job has at least one rank")
    result = run(ranks, priorities, args.priority_class, args.seconds, args.cores, args.prefetch)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / f"load-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, stem.with_suffix(".png"))
    total = sum(result["per_job_samples_per_s"])
    for job, (rate, target) in enumerate(zip(result["per_job_samples_per_s"], result["target_samples_per_s"], strict=True)):
        print(f"job {job} ({ranks[job]} ranks, {priorities[job]}): {rate:7.1f} samples/s, share "
              f"{rate / total if total else 0:.1%} against a target of {target / total if total else 0:.1%} "
              f"({rate / target - 1 if target else 0:+.1%})")
    print(f"{result['fairness']} fairness: max deviation {result['max_deviation']:.1%} (limit {FAIRNESS_TOLERANCE:.0%})")
    print(f"service tree RSS: max {result['service_rss_max_mb']:.0f} MB, second half grew "
          f"{result['service_rss_growth_second_half_mb']:+.0f} MB over the first")
    for error in result["errors"]:
        print(f"error: {error}")
    print(f"results: {stem.with_suffix('.json')}")
    return 0 if result["fairness"] == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
