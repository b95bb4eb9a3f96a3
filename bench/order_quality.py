"""How well the block-shuffle order mode shuffles, against DistributedSampler's exact order.

    python -m bench.order_quality [--samples N] [--unit-rows R] [--blocks 16384,65536,...]

For a dataset of N samples in row groups of R rows, computes the epoch plans
the decode actors would (service/plan.py) and prints, per order:

* epoch-to-epoch rank correlation: Spearman's rho between a sample's position
  in epoch 0 and in epoch 1 (0: the epochs are unrelated, 1: the same order);
* file-order rank correlation: rho between a sample's position in epoch 0 and
  its index in the dataset (0: nothing of the file order survives);
* row groups per global batch: how many distinct row groups the W x B
  samples of one step come from (what the decoders open for it; fewer is
  cheaper to read, more is better mixed);
* plan seconds: the time to make one epoch's plan.

Results go to bench/results/order-quality-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from bench.config import RESULTS_DIR
from bench.report import markdown_table
from shardstream.service.plan import EpochPlan, SamplingSpec


def _positions(order: np.ndarray) -> np.ndarray:
    positions = np.empty(len(order), dtype=np.int64)
    positions[order] = np.arange(len(order))
    return positions


def _rho(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho of two permutations' positions: their ranks are the positions themselves."""
    return float(np.corrcoef(a, b)[0, 1])


def measure(samples: int, unit_rows: int, world: int, batch: int, block: int) -> dict[str, Any]:
    units = (unit_rows,) * (samples // unit_rows)
    n = unit_rows * len(units)
    sampling = SamplingSpec(n, world, batch, True, 0, True, shuffle_block=block, unit_rows=units)
    started = time.perf_counter()
    first = EpochPlan(sampling, 0).order
    plan_s = time.perf_counter() - started
    second = EpochPlan(sampling, 1).order
    p0, p1 = _positions(first), _positions(second)
    step = world * batch
    groups = first[: (n // step) * step].reshape(-1, step) // unit_rows
    per_batch = [len(np.unique(g)) for g in groups[:: max(1, len(groups) // 200)]]
    return {"order": "exact (DistributedSampler)" if not block else f"block shuffle, {block:,} samples",
            "shuffle_block": block, "epoch_rho": _rho(p0, p1), "file_order_rho": _rho(p0, np.arange(n)),
            "row_groups_per_batch": float(np.mean(per_batch)), "plan_s": plan_s}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.order_quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1 << 20)
    parser.add_argument("--unit-rows", type=int, default=1024, help="rows per row group")
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--blocks", default="4096,16384,65536,262144",
                        help="shuffle_block sizes to measure beside the exact order")
    args = parser.parse_args(argv)
    blocks = [0, *(int(b) for b in args.blocks.split(",") if b)]
    rows = [measure(args.samples, args.unit_rows, args.world, args.batch, b) for b in blocks]
    print(f"{args.samples:,} samples in row groups of {args.unit_rows:,}; {args.world} ranks x batch "
          f"{args.batch}")
    print(markdown_table(
        ["order", "epoch-to-epoch rho", "file-order rho", "row groups per global batch", "plan s"],
        [[r["order"], f"{r['epoch_rho']:+.4f}", f"{r['file_order_rho']:+.4f}",
          f"{r['row_groups_per_batch']:.1f}", f"{r['plan_s']:.2f}"] for r in rows]))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"order-quality-{stamp}.json"
    path.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
