"""``python -m bench``: run the benchmark, print the tables and the verdict, write JSON + PNG.

    python -m bench                      # full run (a quarter of an hour on 2 cores)
    python -m bench --quick              # smoke run: tiny workload, 1 repetition
    python -m bench --systems shardstream,dataloader --no-transport
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.config import RESULTS_DIR, SYSTEMS, BenchConfig, full_config, quick_config


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny workload, 1 repetition")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument("--repetitions", type=int,
                        help="rounds, each measuring every system once (figures are medians)")
    parser.add_argument("--samples", type=int, help="JPEG samples in the workload")
    parser.add_argument("--step-ms", type=float, help="simulated training step per batch (sleep)")
    parser.add_argument("--no-transport", action="store_true", help="skip the transport microbenchmark")
    parser.add_argument("--no-shuffle", action="store_true",
                        help="read the JPEG workload in file order instead of shuffled each epoch")
    parser.add_argument("--max-foreign-load", type=float, metavar="CORES",
                        help="repeat a measurement during which other processes used more CPU "
                             "than this (default 0.25 cores)")
    parser.add_argument("--retries", type=int, help="how often to repeat a disturbed measurement")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON and PNG")
    parser.add_argument("--log-level", default="WARNING")
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> BenchConfig:
    config = quick_config() if args.quick else full_config()
    changes: dict[str, object] = {}
    if args.systems:
        systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
        unknown = sorted(set(systems) - set(SYSTEMS))
        if unknown:
            raise SystemExit(f"unknown system(s) {unknown}: choose from {', '.join(SYSTEMS)}")
        changes["systems"] = systems
    if args.repetitions is not None:
        if args.repetitions < 1:
            raise SystemExit("--repetitions must be >= 1")
        changes["repetitions"] = args.repetitions
    if args.samples is not None:
        changes["workload"] = dataclasses.replace(config.workload, num_samples=args.samples)
    if args.step_ms is not None:
        changes["step_ms"] = args.step_ms
    if args.no_transport:
        changes["run_transport"] = False
    if args.no_shuffle:
        changes["shuffle"] = False
    if args.max_foreign_load is not None:
        changes["max_foreign_load_cores"] = args.max_foreign_load
    if args.retries is not None:
        if args.retries < 0:
            raise SystemExit("--retries must be >= 0")
        changes["retries"] = args.retries
    return dataclasses.replace(config, **changes)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = build_config(args)

    from bench.chart import write_chart
    from bench.report import full_report
    from bench.results import write_results
    from bench.runner import Runner

    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    runner = Runner(config, command)
    results = runner.run()
    stem = ("quick-" if config.quick else "") + runner.run_id
    json_path = write_results(results, args.out / f"{stem}.json")
    png_path = write_chart(results, args.out / f"{stem}.png")
    print(full_report(results))
    print(f"\nresults: {json_path}\nchart:   {png_path}")
    print("every target PASS" if results["all_passed"] else "some targets FAIL or SKIP (see above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
