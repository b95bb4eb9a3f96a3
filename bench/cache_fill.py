"""How the prepared-sample cache fills, epoch by epoch, at the service's defaults.

    python -m bench.cache_fill [--quick] [--epochs 4]

Starts ``shardstream serve`` at its defaults (one decode actor per core, the
cache's tiers sized by the node, in empty directories of their own), runs one
epoch of a fill job, then `--epochs` epochs of another job with the same
dataset and transform (the benchmark's JPEG workload, decode + random crop 224
+ flip, shuffled), and prints per epoch: samples/s, the service's CPU per
1,000 samples (its whole process tree), and what the node's counters say the
epoch did: samples found in each tier, prepared (missed), prepared but not
kept (deferred by the write budget), and what each tier then held. The
benchmark's warm row measures this job's second epoch.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.cache_seconds import REPORT_WAIT_S
from bench.config import CACHE_DIR, full_config, quick_config
from bench.procstats import process_tree_cpu, tree_cpu_delta
from bench.report import markdown_table
from bench.services import shardstream_service
from bench.workload import jpeg_workload
from shardstream.client import RemoteLoader
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc


@dataclass(frozen=True)
class Epoch:
    job: str
    epoch: int
    samples_per_s: float
    cpu_per_1k: float
    reads: pb.NodeReads  # the node's counters after the epoch (cumulative)


def _reads(address: str) -> pb.NodeReads:
    with grpc.insecure_channel(address) as channel:
        status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest())
    return status.node_reads[0] if status.node_reads else pb.NodeReads()


def epoch_rows(epochs: Sequence[Epoch]) -> list[list[str]]:
    """One row per epoch, each counter as what that epoch added."""
    rows, before = [], pb.NodeReads()
    for e in epochs:
        r = e.reads
        rows.append([f"{e.job} {e.epoch}", f"{e.samples_per_s:,.0f}", f"{e.cpu_per_1k:.3f}",
                     f"{r.prepared_memory_hits - before.prepared_memory_hits:,}",
                     f"{r.prepared_disk_hits - before.prepared_disk_hits:,}",
                     f"{r.prepared_misses - before.prepared_misses:,}",
                     f"{r.prepared_deferred - before.prepared_deferred:,}",
                     f"{r.prepared_memory_bytes / 2**20:,.0f} / {r.prepared_memory_bound / 2**20:,.0f}",
                     f"{r.prepared_disk_bytes / 2**20:,.0f}"])
        before = r
    return rows


HEADER = ["job epoch", "samples/s", "service CPU-s/1k", "memory hits", "disk hits", "prepared", "not kept",
          "memory tier MiB / bound", "disk tier MiB"]


def measure(dataset: Path, cores: int, crop: int, epochs: int) -> list[Epoch]:
    work = Path(tempfile.mkdtemp(prefix="shardstream-cache-fill-", dir=CACHE_DIR))
    memory = tempfile.mkdtemp(prefix="shardstream-cache-fill-", dir="/dev/shm")
    results: list[Epoch] = []
    try:
        settings = {"prepared_cache_memory_dir": memory, "prepared_cache_disk_dir": str(work / "disk")}
        with shardstream_service(cores, work, config=settings) as service:
            address = f"127.0.0.1:{service.announced}"
            for job, count in (("fill", 1), ("measured", epochs)):
                with RemoteLoader(address, dataset=str(dataset), batch_size=64, shuffle=True, seed=1, world_size=1,
                                  rank=0, job_name=f"cache-fill-{job}", transform="image",
                                  transform_args={"size": crop}, columns=["image", "label"], prefetch=4) as loader:
                    for epoch in range(count):
                        loader.set_epoch(epoch)
                        cpu, started, samples = process_tree_cpu(service.pid), time.perf_counter(), 0
                        for batch in loader:
                            samples += len(batch["label"])
                        elapsed = time.perf_counter() - started
                        used = sum(tree_cpu_delta(cpu, process_tree_cpu(service.pid)).values())
                        time.sleep(REPORT_WAIT_S)
                        results.append(Epoch(job, epoch, samples / elapsed, used / samples * 1000, _reads(address)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(memory, ignore_errors=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_fill", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the quick workload")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the measured job")
    args = parser.parse_args(argv)
    config = quick_config() if args.quick else full_config()
    epochs = measure(jpeg_workload(config.workload), config.cores, config.crop, args.epochs)
    print(markdown_table(HEADER, epoch_rows(epochs)))
    return 0


__all__ = ["Epoch", "epoch_rows", "measure"]


if __name__ == "__main__":
    sys.exit(main())
