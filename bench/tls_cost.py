"""What TLS on the gRPC port costs: the transport microbenchmark's shardstream run, plaintext
against TLS, in alternating rounds.

    python -m bench.tls_cost [--repetitions N] [--batch-rows 64]

Each round starts a plaintext service and a TLS service in turn (same decode
actors, same pre-decoded batches, a new consumer process each) and measures
GB/s, the consumer's CPU per GB and the service's CPU per GB. Both share this
machine's cores, so the throughput ratio shows what the encryption takes from
a CPU-bound pipeline; the CPU per GB is what it costs each side anywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.config import CACHE_DIR, RESULTS_DIR, BenchConfig, full_config
from bench.consumer import run_consumer
from bench.machine import machine_info
from bench.procstats import process_tree_cpu, tree_cpu_delta
from bench.report import markdown_table
from bench.runner import transport_consumer
from bench.services import shardstream_service
from bench.workload import prime_page_cache, transport_dataset

log = logging.getLogger(__name__)

MODES = ("plaintext", "tls")


def _measure(config: BenchConfig, dataset: Path, rows: int, tls: tuple[str, str, str] | None,
             work_dir: Path, label: str) -> dict[str, Any]:
    """One consumer run against a fresh service; GB/s and CPU-s per GB of both sides."""
    with shardstream_service(config.transport.decoders, work_dir, log_name=f"service-{label}.log",
                             tls=(tls[0], tls[1]) if tls else None) as service:
        before = process_tree_cpu(service.pid)
        result = run_consumer(
            transport_consumer(config, dataset, f"127.0.0.1:{service.announced}", rows, f"bench-tls-{label}",
                               tls_ca=tls[2] if tls else ""),
            config.consumer_timeout_s, work_dir / f"consumer-{label}.log")
        server_cpu = sum(tree_cpu_delta(before, process_tree_cpu(service.pid)).values())
    gb_total = result["nbytes"] / 1e9  # warm-up and measured epochs, as the CPU deltas cover
    return {"gb_per_s": result["mb_per_s"] / 1e3,
            "consumer_cpu_per_gb": result["cpu_self_s"] / (result["measured_bytes"] / 1e9),
            "service_cpu_per_gb": server_cpu / gb_total}


def run_tls_cost(config: BenchConfig, rows: int, repetitions: int) -> dict[str, Any]:
    from tests.certs import make_pki  # throw-away certificates, as the TLS tests use

    dataset = transport_dataset(config.transport)
    prime_page_cache(dataset)
    stamp = datetime.now(timezone.utc)
    run_id = stamp.strftime("%Y%m%d-%H%M%S")
    work_dir = CACHE_DIR / "runs" / f"tls-{run_id}"
    work_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as pki_dir, \
            tqdm(total=len(MODES) * repetitions, desc="tls cost", unit="run") as bar:
        pki = make_pki(Path(pki_dir))
        for rep in range(repetitions):
            for mode in MODES:
                bar.set_postfix_str(f"{mode} rep {rep}")
                tls = (pki.server_cert, pki.server_key, pki.ca) if mode == "tls" else None
                runs[mode].append(_measure(config, dataset, rows, tls, work_dir, f"{mode}-{rep}"))
                bar.update(1)
    medians = {mode: {key: statistics.median(r[key] for r in runs[mode]) for key in runs[mode][0]}
               for mode in MODES}
    return {"run_id": run_id, "date": stamp.isoformat(timespec="seconds"), "machine": machine_info(),
            "batch_rows": rows, "batch_bytes": config.transport.batch_bytes(rows), "repetitions": repetitions, "runs": runs, "median": medians,
            "round_ratios": [t["gb_per_s"] / p["gb_per_s"] for p, t in zip(runs["plaintext"], runs["tls"],
                                                                             strict=True)]}


def tls_table(results: dict[str, Any]) -> str:
    plain, tls = results["median"]["plaintext"], results["median"]["tls"]
    rows = [[mode, f"{m['gb_per_s']:.2f}", f"{m['consumer_cpu_per_gb']:.2f}", f"{m['service_cpu_per_gb']:.2f}"]
            for mode, m in (("plaintext", plain), ("TLS", tls))]
    rows.append(["TLS / plaintext", f"{tls['gb_per_s'] / plain['gb_per_s']:.2f}x",
                 f"{tls['consumer_cpu_per_gb'] / plain['consumer_cpu_per_gb']:.2f}x",
                 f"{tls['service_cpu_per_gb'] / plain['service_cpu_per_gb']:.2f}x"])
    return markdown_table(["gRPC port", "GB/s", "consumer CPU-s/GB", "service CPU-s/GB"], rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=3, help="rounds, each measuring both modes")
    parser.add_argument("--batch-rows", type=int, default=full_config().transport.batch_rows[0],
                        help="rows of pre-decoded images per batch (default 64: 9.6 MB)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    results = run_tls_cost(full_config(), args.batch_rows, args.repetitions)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"tls-{results['run_id']}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    sys.stdout.write(f"{results['date']}, {results['batch_bytes'] / 1e6:.1f} MB batches of pre-decoded rows, "
                     f"{args.repetitions} rounds, medians\n\n{tls_table(results)}\n\n"
                     f"TLS / plaintext GB/s round by round: "
                     f"{' '.join(f'{r:.2f}' for r in results['round_ratios'])}\nresults: {path}\n")
    return 0


__all__ = ["run_tls_cost", "tls_table"]

if __name__ == "__main__":
    sys.exit(main())
