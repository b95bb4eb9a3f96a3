"""Scaling decoders mid-epoch: throughput before and after a decode node joins.

    python -m bench.elastic

A ray.cluster_utils.Cluster starts with one decode node (one actor); a
RemoteLoader streams one long epoch of the JPEG workload; after
`--add-after` seconds a second decode node joins, the pool starts an actor
there, and the same epoch continues. Printed: samples/s before and after,
their ratio, and whether the epoch delivered every planned batch. On a
2-core machine the two decode nodes share the same cores as the service and
the consumer, so the ratio is below 2 by how much those need.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from bench.config import RESULTS_DIR, WorkloadSpec
from bench.machine import machine_info
from bench.workload import jpeg_workload

log = logging.getLogger("bench.elastic")

NODE_STORE = 200 * 2**20
SETTLE_S = 5.0  # a joining node's actor is up within this; throughput "after" is measured from then
WORKLOAD = WorkloadSpec()


def run(add_after_s: float, measure_s: float) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    from shardstream.client import RemoteLoader
    from shardstream.service.config import ServiceConfig
    from shardstream.service.control.server import create_server

    dataset = jpeg_workload(WORKLOAD)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": NODE_STORE})
    cluster.add_node(num_cpus=1, resources={"decode": 1}, object_store_memory=NODE_STORE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING")
    service, port = create_server(ServiceConfig(port=0, prepared_cache=False))  # decode capacity: every epoch decodes
    try:
        times: list[float] = []
        added_at: list[float] = []
        added_in_epoch: tuple[int | None, int] = (None, 0)
        with RemoteLoader(f"127.0.0.1:{port}", dataset=str(dataset), batch_size=64, shuffle=False,
                          transform="image", transform_args={"size": 224}, columns=["image", "label"],
                          world_size=1, rank=0, prefetch=4) as loader:
            start = time.monotonic()
            batches = epochs_complete = 0
            running = True
            while running:  # epochs back to back; the node joins in the middle of one
                in_epoch = 0
                for batch in loader:
                    now = time.monotonic() - start
                    times.append(now)
                    batches += 1
                    in_epoch += 1
                    del batch
                    if not added_at and now >= add_after_s:
                        # Ray starts nodes from the main thread only; the loop pauses while it does.
                        cluster.add_node(num_cpus=1, resources={"decode": 1}, object_store_memory=NODE_STORE)
                        added_at.append(time.monotonic() - start)
                        added_in_epoch = (loader.epoch, in_epoch)
                    if added_at and now >= added_at[0] + measure_s:
                        running = False
                        break
                else:
                    epochs_complete += 1
            decoders_after = service.pool.size
            planned = len(loader)
        if not added_at:
            raise RuntimeError(f"the epoch ended after {len(times)} batches, before the node was added")
        t_add = added_at[0]
        before = [t for t in times if 2.0 <= t < add_after_s]
        after = [t for t in times if t >= t_add + SETTLE_S]  # once the new actor is up
        if len(before) < 3 or len(after) < 3:
            raise RuntimeError(f"too few batches to measure: {len(before)} before, {len(after)} after; "
                               "use a larger workload or other --add-after/--measure")
        rate_before = 64 * (len(before) - 1) / (before[-1] - before[0])
        rate_after = 64 * (len(after) - 1) / (after[-1] - after[0])
        return {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": f"python -m bench.elastic --add-after {add_after_s:g} --measure {measure_s:g}",
            "machine": machine_info(),
            "workload": WORKLOAD.name,
            "added_at_s": t_add,
            "samples_per_s_before": rate_before,
            "samples_per_s_after": rate_after,
            "ratio": rate_after / rate_before,
            "decoders_after": decoders_after,
            # RemoteLoader checks that every step arrives once and in order, so whole epochs
            # received mean nothing was lost or repeated while the pool grew.
            "node_added_in_epoch_at_batch": list(added_in_epoch),
            "epochs_complete": epochs_complete,
            "batches_per_epoch": planned,
            "batches_received": batches,
            "resubmitted": service.pool.resubmitted,
        }
    finally:
        service.stop(grace=1.0)
        ray.shutdown()
        cluster.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.elastic", description=__doc__.splitlines()[0])
    parser.add_argument("--add-after", type=float, default=10.0, help="seconds before the second node joins")
    parser.add_argument("--measure", type=float, default=30.0, help="seconds to run after it joins")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args.add_after, args.measure)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"elastic-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"1 decode node:  {result['samples_per_s_before']:7.1f} samples/s")
    print(f"2 decode nodes: {result['samples_per_s_after']:7.1f} samples/s  (x{result['ratio']:.2f}; "
          f"{result['decoders_after']} decoders)")
    epoch, at = result["node_added_in_epoch_at_batch"]
    print(f"node added in epoch {epoch} after batch {at} of {result['batches_per_epoch']}; "
          f"{result['epochs_complete']} whole epoch(s) and {result['batches_received']} batches received, "
          "each step once and in order")
    verdict = "PASS" if result["ratio"] > 1.0 else "FAIL"
    print(f"{verdict} throughput rose when a decode node joined mid-epoch; results: {path}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
