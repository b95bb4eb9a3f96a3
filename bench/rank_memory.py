"""Where a rank's memory goes, epoch by epoch: its RSS, its peak, and glibc's view of its heap.

    python -m bench.rank_memory [--epochs 3] [--shared-memory] [--prefetch 4]

Starts a shardstream service (one decode actor per core), streams the JPEG
workload through one RemoteLoader in this process (the network path unless
``--shared-memory``: batch bytes on bulk sockets over loopback), and prints
after each epoch the RSS and the peak since ``iter()`` (VmHWM), what malloc
has handed out and what it holds free (``mallinfo2``), and the receive
buffers the loader has mapped. The pattern that tells memory kept by the
allocator from memory in use: the peak grows while malloc's bytes in use stay
put and its free bytes grow (docs/data-plane.md, "Receive buffers").
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.config import WorkloadSpec
from bench.meter import batch_shape
from bench.procstats import PeakRss, rss_bytes
from bench.services import shardstream_service
from bench.workload import jpeg_workload

log = logging.getLogger(__name__)

MB = 1e6
WARMUP_BATCHES = 8  # a job that warms the fresh service's decoders first, as the benchmark's does


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_bytes() -> tuple[float, float] | None:
    """(in use, free) bytes of glibc's heaps, or None without glibc 2.33+."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = Mallinfo2
    info = mallinfo2()
    return float(info.uordblks + info.hblkhd), float(info.fordblks)


def run(epochs: int, shared_memory: bool, prefetch: int) -> None:
    from shardstream.client import RemoteLoader

    workload = jpeg_workload(WorkloadSpec())
    options = {"dataset": str(workload), "batch_size": 64, "shuffle": True, "seed": 0, "transform": "image",
               "transform_args": {"size": 224}, "columns": ["image", "label"], "prefetch": prefetch}
    with tempfile.TemporaryDirectory(prefix="bench-rank-memory-") as work, \
            shardstream_service(2, Path(work)) as service:
        address = f"127.0.0.1:{service.announced}"
        with RemoteLoader(address, job_name="rank-memory-warmup", **options) as warm:  # type: ignore[arg-type]
            for step, _ in enumerate(warm):
                if step + 1 == WARMUP_BATCHES:
                    break
        loader = RemoteLoader(address, job_name="rank-memory", shared_memory=shared_memory,
                              **options)  # type: ignore[arg-type]
        baseline = rss_bytes()
        peak = PeakRss()
        peak.start()
        print(f"{'':>8} {'RSS MB':>8} {'peak growth MB':>15} {'malloc in use MB':>17} {'malloc free MB':>15} "
              f"{'buffers mapped':>15} {'s':>5}")
        batch_bytes = 0
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            started = time.perf_counter()
            for batch in loader:
                batch_bytes = max(batch_bytes, batch_shape(batch)[1])
                del batch
            heap = malloc_bytes()
            print(f"epoch {epoch:<2} {rss_bytes() / MB:8.1f} {(peak.stop() - baseline) / MB:15.1f} "
                  f"{heap[0] / MB if heap else float('nan'):17.1f} {heap[1] / MB if heap else float('nan'):15.1f} "
                  f"{loader._receive_buffers.mapped:15d} {time.perf_counter() - started:5.1f}", flush=True)
        loader.close()
        print(f"closed   {rss_bytes() / MB:8.1f}   (the window: {prefetch} x {batch_bytes / MB:.2f} MB "
              f"= {prefetch * batch_bytes / MB:.1f} MB)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rank_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--shared-memory", action="store_true", help="let the decoders write into shared memory")
    parser.add_argument("--prefetch", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(args.epochs, args.shared_memory, args.prefetch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
