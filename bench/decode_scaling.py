"""Decode capacity that follows demand, against a static pool sized by docs/scaling.md.

    python -m bench.decode_scaling [--peak-s 90] [--low-s 60] [--window 10]

One rank trains at a fixed pace (a sleep per batch stands in for the GPU step) on decoders whose
decode cost is a sleep (bench/simulated_decode.py: 100 samples/s a decoder), so the 2 cores are
not the limit. Two phases: the peak, where the rank takes 400 samples/s, then a low phase at 160.
Run twice on an embedded Ray with room for 8 decoders:

- **policy**: `autoscale_max_decoders=8`, starting at its minimum of 1 (the rank starts starved:
  data stall above 50%);
- **static**: `num_decoders` sized as docs/scaling.md sizes a pool: the peak's demand over one
  decoder's rate, with 20% headroom: ceil(400 / 100 x 1.2) = 5.

Printed for each: the peak's worst stall; seconds from the start until the rank's data stall fell
below 10% and stayed there; the stall over the rest of the peak; decoder-minutes used in each phase;
the decoders at the end of each phase; every batch checked against DistributedSampler's order.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.config import REPO_ROOT, RESULTS_DIR
from bench.machine import machine_info

log = logging.getLogger("bench.decode_scaling")

BATCH = 16
DECODE_S_PER_SAMPLE = 0.01  # 100 samples/s a decoder
PER_DECODER = 1 / DECODE_S_PER_SAMPLE
PEAK_RATE, LOW_RATE = 400.0, 160.0  # samples/s the rank takes, when never waiting
HEADROOM = 1.2  # docs/scaling.md's sizing
MAX_DECODERS = 8
STARVED, SERVED = 0.5, 0.1


@dataclass
class Trace:
    """Sampled every half second: (seconds since start, decoders held, the rank's data stall)."""

    points: list[tuple[float, int, float | None]] = field(default_factory=list)

    def decoder_minutes(self, start: float, end: float) -> float:
        inside = [(t, n) for t, n, _ in self.points if start <= t < end]
        return sum(n * (t_next - t) for (t, n), (t_next, _) in itertools.pairwise(inside)) / 60

    def served_from(self, end: float) -> float | None:
        """When the stall fell below SERVED and stayed there until `end`."""
        stalls = [(t, s) for t, _, s in self.points if t < end and s is not None]
        if not stalls or stalls[-1][1] >= SERVED:
            return None
        for t, s in reversed(stalls):
            if s >= SERVED:
                return t
        return stalls[0][0]


ROWS = 4000


def _expected(epoch: int) -> list[list[int]]:
    """The rank's batches as DataLoader + DistributedSampler + set_epoch give them."""
    from torch.utils.data import BatchSampler, DistributedSampler

    sampler = DistributedSampler(range(ROWS), num_replicas=1, rank=0, shuffle=True, seed=1, drop_last=False)
    sampler.set_epoch(epoch)
    return [list(batch) for batch in BatchSampler(sampler, BATCH, drop_last=False)]


def _dataset(directory: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"idx": pa.array(range(ROWS), pa.int64())}), directory / "part-0.parquet",
                   row_group_size=256)
    return str(directory)


def run_system(name: str, config_overrides: dict[str, Any], dataset: str, peak_s: float, low_s: float) -> dict[str, Any]:
    import ray

    from shardstream.client import RemoteLoader
    from shardstream.service.config import ServiceConfig
    from shardstream.service.control.server import create_server

    ray.init(address="local", num_cpus=2, resources={"decode": MAX_DECODERS}, include_dashboard=False,
             object_store_memory=200 * 2**20, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO_ROOT)}})
    # Decode demand: every epoch decodes (the prepared-sample cache would skip the simulated cost).
    service, port = create_server(ServiceConfig(port=0, decoder_cpus=0.1, allowed_transform_modules=("bench.",),
                                                prepared_cache=False,
                                                **config_overrides))
    trace, stop = Trace(), threading.Event()
    start = time.monotonic()
    loader_box: list[Any] = []

    def sample() -> None:
        while not stop.wait(0.5):
            stall = loader_box[0].data_stall if loader_box else None
            trace.points.append((time.monotonic() - start, service.pool.size + service.pool.draining, stall))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    mismatched = batches = 0
    try:
        with RemoteLoader(f"127.0.0.1:{port}", dataset=dataset, batch_size=BATCH, shuffle=True, seed=1,
                          world_size=1, rank=0, columns=["idx"], job_name=f"decode-scaling-{name}", prefetch=16,
                          transform="bench.simulated_decode:simulated_decode",
                          transform_args={"seconds_per_sample": DECODE_S_PER_SAMPLE}) as loader:
            loader_box.append(loader)
            epoch = 0
            while time.monotonic() - start < peak_s + low_s:
                loader.set_epoch(epoch)
                expected = _expected(epoch)
                for step, batch in enumerate(loader):
                    batches += 1
                    mismatched += batch["idx"].tolist() != expected[step]
                    rate = PEAK_RATE if time.monotonic() - start < peak_s else LOW_RATE
                    time.sleep(BATCH / rate)  # the training step
                    if time.monotonic() - start >= peak_s + low_s:
                        break
                epoch += 1
            stats = loader.stats
    finally:
        stop.set()
        sampler.join()
        scaling = service.scaling.state if service.scaling is not None else None
        service.stop(grace=1.0)
        ray.shutdown()
    end = peak_s + low_s
    peak_stalls = [s for t, _, s in trace.points if t < peak_s and s is not None]
    served_at = trace.served_from(peak_s)
    after = [s for t, _, s in trace.points if served_at is not None and served_at <= t < peak_s and s is not None]
    held = lambda t: next((n for p, n, _ in reversed(trace.points) if p <= t), 0)  # noqa: E731
    return {
        "system": name, "config": config_overrides,
        "peak_worst_stall": max(peak_stalls, default=None),
        "served_after_s": served_at,
        "peak_stall_after_served_mean": sum(after) / len(after) if after else None,
        "peak_decoder_minutes": trace.decoder_minutes(0, peak_s),
        "decoder_minutes_until_served": trace.decoder_minutes(0, served_at) if served_at is not None else None,
        "low_decoder_minutes": trace.decoder_minutes(peak_s, end),
        "decoders_end_of_peak": held(peak_s), "decoders_end_of_low": held(end),
        "batches": batches, "batches_out_of_order": mismatched,
        "decoders_lost": stats.decoders_lost, "decoders_drained": stats.decoders_drained,
        "decisions": {"up": scaling.up, "down": scaling.down} if scaling is not None else None,
        "trace": trace.points,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--peak-s", type=float, default=90.0, help="seconds at 400 samples/s")
    parser.add_argument("--low-s", type=float, default=60.0, help="seconds at 160 samples/s")
    parser.add_argument("--window", type=float, default=10.0, help="the policy's autoscale_window_s")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local Ray of its own: no token to write to ~/.ray
    static = math.ceil(PEAK_RATE / PER_DECODER * HEADROOM)
    systems = {
        "policy": {"autoscale_min_decoders": 1, "autoscale_max_decoders": MAX_DECODERS,
                   "autoscale_window_s": args.window},
        "static": {"num_decoders": static},
    }
    with tempfile.TemporaryDirectory(prefix="ss-decode-scaling-") as directory:
        dataset = _dataset(Path(directory))
        results = {name: run_system(name, overrides, dataset, args.peak_s, args.low_s)
                   for name, overrides in systems.items()}
    doc = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": f"python -m bench.decode_scaling --peak-s {args.peak_s:g} --low-s {args.low_s:g} "
                      f"--window {args.window:g}",
           "machine": machine_info(), "load_at_start": os.getloadavg()[0],
           "demand": {"peak": PEAK_RATE, "low": LOW_RATE, "per_decoder": PER_DECODER, "static_decoders": static},
           "results": results}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"decode-scaling-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"demand {PEAK_RATE:.0f} then {LOW_RATE:.0f} samples/s; a decoder serves {PER_DECODER:.0f}; static pool "
          f"{static} (docs/scaling.md: ceil({PEAK_RATE:.0f} / {PER_DECODER:.0f} x {HEADROOM}))")
    for name, r in results.items():
        served = f"{r['served_after_s']:.0f} s" if r["served_after_s"] is not None else "never"
        mean = r["peak_stall_after_served_mean"]
        until = r["decoder_minutes_until_served"]
        print(f"{name:>7}: worst stall {r['peak_worst_stall']:.0%}; stall < {SERVED:.0%} from {served} "
              f"({until:.2f} decoder-minutes until then; {mean:.1%} on average after)" if mean is not None
              else f"{name:>7}: stall never fell below 10%")
        print(f"{'':>7}  decoder-minutes: peak {r['peak_decoder_minutes']:.2f}, low {r['low_decoder_minutes']:.2f}; "
              f"decoders at the end of each phase {r['decoders_end_of_peak']} / {r['decoders_end_of_low']}; "
              f"{r['batches']} batches, {r['batches_out_of_order']} not DistributedSampler's; "
              f"{r['decoders_drained']} drained, {r['decoders_lost']} lost")
    policy = results["policy"]
    checks = [
        ("the policy's run started starved (stall > 50%)", (policy["peak_worst_stall"] or 0) > STARVED),
        ("the policy brought the stall below 10% during the peak", policy["served_after_s"] is not None),
        ("the policy gave decoders back in the low phase", policy["decoders_end_of_low"] < policy["decoders_end_of_peak"]),
        ("every batch in DistributedSampler's order, none lost", all(
            r["batches_out_of_order"] == 0 and r["decoders_lost"] == 0 for r in results.values())),
    ]
    total = {name: r["peak_decoder_minutes"] + r["low_decoder_minutes"] for name, r in results.items()}
    print(f"decoder-minutes in all: policy {total['policy']:.2f}, static {total['static']:.2f} "
          f"({total['policy'] / total['static']:.2f}x)")
    for what, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'} {what}")
    print(f"results: {path}")
    return 0 if all(ok for _, ok in checks) else 1


__all__ = ["Trace", "main", "run_system"]

if __name__ == "__main__":
    raise SystemExit(main())
