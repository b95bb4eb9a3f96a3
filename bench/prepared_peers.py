"""The prepared-sample cache on two decode nodes: each node keeps the samples it is home to and
asks the other for the rest (docs/prepared-cache.md, "Locality").

    python -m bench.prepared_peers [--repetitions N]

A ``ray.cluster_utils.Cluster`` on this machine: a head with no CPUs (the service) and two
decode nodes (one CPU, one decode actor each), each with a disk tier of its own (its own
TMPDIR). The JPEG workload of ``python -m bench``, shuffled, one rank on the network path.
Per round, on a fresh service with empty tiers: a job's first epoch (cold: every sample read,
prepared and kept), then a new job's epochs (its second is measured: the samples found in the node's own
tier or at their home node). The service's counters say where the samples came from. Both nodes
share this machine's cores with the consumer: the figures show that samples cross between
nodes and what that costs on one machine, not a network's speed.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.config import CACHE_DIR, RESULTS_DIR, full_config
from bench.consumer import run_consumer
from bench.node_reads import node_reads, settled
from bench.report import markdown_table
from bench.services import shardstream_service
from bench.spec import ConsumerSpec
from bench.stats import summarize
from bench.workload import jpeg_workload, prime_page_cache

log = logging.getLogger(__name__)

NODES = 2
COUNTERS = ("prepared_disk_hits", "prepared_peer_hits", "prepared_misses")
TIER_BYTES = 8 << 30  # each node's disk tier: room for the whole prepared workload


def _settled_counters(address: str) -> dict[str, int]:
    """Where the service's samples came from so far, summed over the nodes."""
    return settled(lambda: node_reads(address, COUNTERS))


def run_round(rep: int, work_dir: Path, ray_address: str, workload: Path, spec_args: dict[str, Any],
              batches_per_epoch: int) -> dict[str, Any]:
    # The first epoch keeps every sample (not the first epoch's share of the actors' time): what is
    # measured is where a later job finds them, not how fast the cache fills (bench.cache_fill).
    config = {"prepared_cache_disk_bytes": str(TIER_BYTES), "prepared_cache_memory_bytes": "0",
              "prepared_cache_write_share": "1"}
    with shardstream_service(NODES, work_dir, ray_address=ray_address, log_name=f"service-{rep}.log",
                             config=config) as service:
        address = f"127.0.0.1:{service.announced}"
        cold = ConsumerSpec("shardstream", dataset=str(workload), address=address, epochs=1, warmup_batches=1,
                            job_name=f"peers-cold-{rep}", **spec_args)
        cold_result = run_consumer(cold, 1800, work_dir / f"cold-{rep}.log")
        after_cold = _settled_counters(address)
        warm = ConsumerSpec("shardstream", dataset=str(workload), address=address, epochs=2,
                            warmup_batches=batches_per_epoch, job_name=f"peers-warm-{rep}", **spec_args)
        warm_result = run_consumer(warm, 1800, work_dir / f"warm-{rep}.log")
        after_warm = _settled_counters(address)
    return {"cold": cold_result, "warm": warm_result, "counters_cold": after_cold,
            "counters_warm": {k: after_warm[k] - after_cold[k] for k in COUNTERS}}


def main(argv: Sequence[str] | None = None) -> int:
    from ray.cluster_utils import Cluster

    parser = argparse.ArgumentParser(prog="python -m bench.prepared_peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = full_config()
    workload = jpeg_workload(config.workload)
    prime_page_cache(workload)
    now = datetime.now(timezone.utc)
    work_dir = CACHE_DIR / "runs" / f"peers-{now:%Y%m%d-%H%M%S}"
    batches_per_epoch = math.ceil(config.workload.num_samples / config.batch_size)
    spec_args = {"batch_size": config.batch_size, "crop": config.crop, "prefetch": config.prefetch,
                 "shuffle": True, "shared_memory": False}  # decode nodes stand for other hosts
    rounds = []
    for rep in range(args.repetitions):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for node in range(NODES):
                temp = work_dir / f"rep{rep}-node{node}"
                temp.mkdir(parents=True)
                cluster.add_node(num_cpus=1, resources={"decode": 1}, env_vars={"TMPDIR": str(temp)})
            cluster.wait_for_nodes()
            rounds.append(run_round(rep, work_dir, cluster.address, workload, spec_args, batches_per_epoch))
        finally:
            cluster.shutdown()
            for node in range(NODES):
                shutil.rmtree(work_dir / f"rep{rep}-node{node}", ignore_errors=True)
    cold = summarize([r["cold"] for r in rounds])["samples_per_s"]
    warm = summarize([r["warm"] for r in rounds])["samples_per_s"]
    rows = []
    for i, r in enumerate(rounds):
        c, w = r["counters_cold"], r["counters_warm"]
        rows.append([str(i), f"{r['cold']['samples_per_s']:,.0f}", f"{r['warm']['samples_per_s']:,.0f}",
                     f"{c['prepared_misses']:,}", f"{w['prepared_disk_hits']:,}", f"{w['prepared_peer_hits']:,}",
                     f"{w['prepared_misses']:,}"])
    table = markdown_table(["round", "1st epoch samples/s", "warm epoch samples/s", "prepared in 1st epoch",
                            "warm job: own node's tier", "... at their home node", "... prepared again"], rows)
    command = " ".join(["python -m bench.prepared_peers", *(sys.argv[1:] if argv is None else argv)])
    print(f"{command}  ({now:%Y-%m-%d %H:%M} UTC)\n\n{table}\n\nwarm / first epoch: {warm / cold:.2f}x "
          f"(medians: {warm:,.0f} / {cold:,.0f} samples/s)")
    out = args.out / f"peers-{now:%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps({"date": now.isoformat(timespec="seconds"), "command": command, "rounds": rounds,
                               "cold_samples_per_s": cold, "warm_samples_per_s": warm}, indent=2, default=str))
    print(f"\nresults: {out}")
    shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
