"""``python -m bench.shuffled_reads``: shuffled reads of a dataset larger than the decoders' memory.

    python -m bench.shuffled_reads                   # 1 GiB local dataset, 256 MiB of decoder memory
    python -m bench.shuffled_reads --gcs             # also: the same reads from a GCS API server
    python -m bench.shuffled_reads --quick           # a small run of every case
    python -m bench.shuffled_reads --order-modes     # also: a local copy of a quarter of the dataset

The dataset is pre-decoded fixed-size samples (16 KiB of random bytes, row
groups of 512 rows, no transform, batch 64), four times larger than the
decode actors' memory (2 actors x 128 MiB). Every case runs on a fresh
`shardstream serve` with an empty local copy, one rank pulling batches:

- ``row-group reader``: the local copy off, as before it existed: shuffled, a
  bounded number of batches (each sample costs a row group read);
- ``unshuffled`` and ``shuffled``: the local copy on, two epochs each (the
  first fills the copy from storage, the second reads only the copy).

Read amplification is the bytes the decode actors read from storage (the
service's own count, footers included) over the bytes of the columns read as
they are stored.

With ``--order-modes``, two more cases bound the local copy to a quarter of
the dataset (a dataset larger than the cluster's cache, docs/order-modes.md):
``exact, copy 1/4`` (DistributedSampler's order: a bounded number of
batches, as the row-group reader) and ``blocks, copy 1/4`` (the block-shuffle
order mode, ``shuffle_block`` of BLOCK_ROW_GROUPS row groups, two epochs).

Targets: amplification <= 1.2 with shuffle on; shuffled
samples/s >= 0.7x unshuffled, epoch by epoch. Cases alternate over
``--repetitions`` rounds; figures are medians.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.config import CACHE_DIR, MIB, RESULTS_DIR
from bench.machine import git_revision
from bench.node_reads import node_reads, settled
from bench.services import shardstream_service

log = logging.getLogger(__name__)

BUCKET = "shardstream-bench"
DECODERS = 2
BLOCK_ROW_GROUPS = 8  # --order-modes: shuffle_block, in row groups (64 MiB of the default workload)


@dataclass(frozen=True)
class Workload:
    dataset_bytes: int = 1024 * MIB
    sample_bytes: int = 16 * 1024
    rows_per_group: int = 512
    rows_per_shard: int = 4096
    batch_size: int = 64
    decoder_memory_bytes: int = 128 * MIB  # per decode actor: DECODERS x this = the decoders' memory
    baseline_batches: int = 24  # the row-group reader is slow: a bounded sample of its batches

    @property
    def rows(self) -> int:
        return self.dataset_bytes // self.sample_bytes

    @property
    def name(self) -> str:
        return (f"fixed-{self.rows}x{self.sample_bytes}-rg{self.rows_per_group}"
                f"-shard{self.rows_per_shard}")


@dataclass
class CaseResult:
    case: str
    epoch: int
    samples: int
    seconds: float
    storage_bytes: int
    dataset_bytes: int
    rows: int

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds

    @property
    def amplification(self) -> float:
        """Storage bytes read per dataset byte, scaled to a whole epoch for a partial one."""
        return self.storage_bytes / self.dataset_bytes * (self.rows / self.samples)


def build_dataset(workload: Workload) -> Path:
    """Parquet shards of (`x`: fixed_size_list<uint8>[sample_bytes] of random bytes, `idx`)."""
    directory = CACHE_DIR / "datasets" / workload.name
    done = directory / ".complete"
    if done.exists():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for shard, start in enumerate(range(0, workload.rows, workload.rows_per_shard)):
        rows = min(workload.rows_per_shard, workload.rows - start)
        values = pa.array(rng.integers(0, 256, rows * workload.sample_bytes, dtype=np.uint8))
        table = pa.table({"x": pa.FixedSizeListArray.from_arrays(values, workload.sample_bytes),
                          "idx": np.arange(start, start + rows, dtype=np.int64)})
        pq.write_table(table, directory / f"part-{shard:05d}.parquet", row_group_size=workload.rows_per_group)
    done.touch()
    return directory


def stored_bytes(directory: Path) -> int:
    """The dataset's bytes as stored: every column chunk of every row group (no footers)."""
    total = 0
    for path in sorted(directory.glob("*.parquet")):
        meta = pq.read_metadata(path)
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            total += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    return total


def settled_storage_bytes_read(address: str) -> int:
    """The bytes the decode nodes read from storage so far, once their reports have settled."""
    return settled(lambda: node_reads(address, ("storage_bytes_read",))["storage_bytes_read"])


def run_case(case: str, dataset: str, dataset_bytes: int, workload: Workload, work_dir: Path,
             epochs: int, max_batches: int | None, copy_bytes: int = 64 << 30,
             shuffle_block: int | None = None) -> list[CaseResult]:
    """One fresh service with an empty local copy of `copy_bytes` (0: none); `epochs` epochs of one
    rank."""
    from shardstream.client import RemoteLoader

    copy_dir = work_dir / "local-copy"
    shutil.rmtree(copy_dir, ignore_errors=True)
    # Storage reads of the row groups: the prepared-sample cache, which skips them, is off.
    config = {"prepared_cache": "false", "row_group_cache_bytes": str(workload.decoder_memory_bytes),
              "local_copy_dir": str(copy_dir), "local_copy_bytes": str(copy_bytes)}
    results = []
    with shardstream_service(DECODERS, work_dir, log_name=f"service-{case.replace(' ', '-')}.log",
                             config=config) as server:
        address = f"127.0.0.1:{server.announced}"
        with RemoteLoader(address, dataset=dataset, batch_size=workload.batch_size,
                          shuffle=case != "unshuffled", seed=0, drop_last=True, rank=0, world_size=1,
                          shuffle_block=shuffle_block, job_name=f"bench-{case}") as loader:
            for epoch in range(epochs):
                loader.set_epoch(epoch)
                before = settled_storage_bytes_read(address)
                samples, started = 0, time.perf_counter()
                for step, batch in enumerate(loader):
                    samples += len(batch["idx"])
                    if max_batches is not None and step + 1 >= max_batches:
                        break
                seconds = time.perf_counter() - started
                results.append(CaseResult(case, epoch, samples, seconds,
                                          settled_storage_bytes_read(address) - before, dataset_bytes,
                                          workload.rows))
                log.info("%s epoch %d: %.0f samples/s, amplification %.2f", case, epoch,
                         results[-1].samples_per_s, results[-1].amplification)
    return results


@contextlib.contextmanager
def gcs_dataset(local: Path) -> Iterator[str]:
    """The dataset uploaded to a GCS API server (fake-gcs-server), routed to by every child process."""
    from tests.gcs_emulator import running_gcs_emulator

    with running_gcs_emulator() as emulator:
        emulator.create_bucket(BUCKET)
        for path in sorted(local.glob("*.parquet")):
            emulator.upload(str(path), f"gs://{BUCKET}/{local.name}/{path.name}")
        yield f"gs://{BUCKET}/{local.name}/"


def measure(store: str, dataset: str, dataset_bytes: int, workload: Workload, work_dir: Path,
            repetitions: int, order_modes: bool = False) -> list[CaseResult]:
    results: list[CaseResult] = []
    quarter = dataset_bytes // 4
    for round_ in range(repetitions):
        log.info("%s: round %d of %d", store, round_ + 1, repetitions)
        results += run_case("row-group reader", dataset, dataset_bytes, workload, work_dir, 1,
                            workload.baseline_batches, copy_bytes=0)
        for case in ("unshuffled", "shuffled"):
            results += run_case(case, dataset, dataset_bytes, workload, work_dir, 2, None)
        if order_modes:
            results += run_case("exact, copy 1/4", dataset, dataset_bytes, workload, work_dir, 1,
                                workload.baseline_batches * 4, copy_bytes=quarter)
            results += run_case("blocks, copy 1/4", dataset, dataset_bytes, workload, work_dir, 2, None,
                                copy_bytes=quarter, shuffle_block=BLOCK_ROW_GROUPS * workload.rows_per_group)
    for r in results:
        r.case = f"{store} {r.case}"
    return results


def report(results: Sequence[CaseResult], workload: Workload, memory_bytes: int) -> tuple[str, list[dict]]:
    """The table (medians per case and epoch) and the targets."""
    rows: dict[tuple[str, int], list[CaseResult]] = {}
    for r in results:
        rows.setdefault((r.case, r.epoch), []).append(r)
    med = {key: (statistics.median(r.samples_per_s for r in rs), statistics.median(r.amplification for r in rs))
           for key, rs in rows.items()}
    lines = [f"dataset: {workload.rows:,} samples of {workload.sample_bytes // 1024} KiB, "
             f"{workload.dataset_bytes / MIB:,.0f} MiB; decoders' memory {memory_bytes / MIB:,.0f} MiB "
             f"({workload.dataset_bytes / memory_bytes:.1f}x smaller); batch {workload.batch_size}, "
             f"{DECODERS} decode actors",
             "",
             f"| {'case':<24} | epoch | samples/s | storage bytes read / dataset bytes |",
             f"|{'-' * 26}|-------|-----------|------------------------------------|"]
    for (case, epoch), (rate, amp) in med.items():
        note = ("(sampled batches)" if "reader" in case or "exact" in case
                else "(copy empty)" if epoch == 0 else "")
        lines.append(f"| {case:<24} | {epoch:>5} | {rate:>9,.0f} | {amp:>8.2f} {note:<25} |")
    targets = []
    for store in sorted({case.split(" ")[0] for case, _ in med}):
        for epoch in (0, 1):
            shuffled = med.get((f"{store} shuffled", epoch))
            unshuffled = med.get((f"{store} unshuffled", epoch))
            if shuffled is None or unshuffled is None:
                continue
            if epoch == 0:
                targets.append(_target(f"{store}: read amplification, shuffled", shuffled[1], "<=", 1.2, "x"))
            targets.append(_target(f"{store}: shuffled / unshuffled samples/s, epoch {epoch}",
                                   shuffled[0] / unshuffled[0], ">=", 0.7, "x"))
        baseline = med.get((f"{store} row-group reader", 0))
        shuffled = med.get((f"{store} shuffled", 0))
        if baseline and shuffled:
            lines.append(f"{store}: shuffled epoch 0 with the local copy over the row-group reader: "
                         f"{shuffled[0] / baseline[0]:,.1f}x samples/s, "
                         f"{baseline[1] / shuffled[1]:,.0f}x fewer storage bytes")
    lines.append("")
    lines += [f"{t['status']:<4}  {t['name']}: {t['value']:.2f} {t['op']} {t['threshold']}" for t in targets]
    return "\n".join(lines), targets


def _target(name: str, value: float, op: str, threshold: float, unit: str) -> dict:
    passed = value <= threshold if op == "<=" else value >= threshold
    return {"name": name, "status": "PASS" if passed else "FAIL", "value": value, "op": op,
            "threshold": threshold, "unit": unit}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shuffled_reads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 128 MiB dataset, 32 MiB of decoder memory")
    parser.add_argument("--gcs", action="store_true", help="also read the dataset from a GCS API server")
    parser.add_argument("--gcs-only", action="store_true", help="only the GCS API server")
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--order-modes", action="store_true",
                        help="also: exact and block-shuffle orders with a local copy of a quarter of the dataset")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    workload = (Workload(dataset_bytes=128 * MIB, decoder_memory_bytes=16 * MIB, rows_per_shard=1024,
                         baseline_batches=8) if args.quick else Workload())
    now = datetime.now(timezone.utc)
    work_dir = CACHE_DIR / "runs" / f"shuffled-{now:%Y%m%d-%H%M%S}"
    work_dir.mkdir(parents=True)
    local = build_dataset(workload)
    dataset_bytes = stored_bytes(local)
    results: list[CaseResult] = []
    if not args.gcs_only:
        results += measure("local", str(local), dataset_bytes, workload, work_dir, args.repetitions,
                           args.order_modes)
    if args.gcs or args.gcs_only:
        with gcs_dataset(local) as url:
            results += measure("gs://", url, dataset_bytes, workload, work_dir, args.repetitions,
                               args.order_modes)
    table, targets = report(results, workload, DECODERS * workload.decoder_memory_bytes)
    command = " ".join(["python -m bench.shuffled_reads", *(sys.argv[1:] if argv is None else argv)])
    print(f"{command}  ({now:%Y-%m-%d %H:%M} UTC, revision {git_revision()})\n\n{table}")
    out = args.out / f"{'quick-' if args.quick else ''}shuffled-{now:%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps({"date": now.isoformat(timespec="seconds"), "command": command,
                               "revision": git_revision(), "workload": asdict(workload),
                               "dataset_stored_bytes": dataset_bytes,
                               "results": [{**asdict(r), "samples_per_s": r.samples_per_s,
                                            "amplification": r.amplification} for r in results],
                               "targets": targets}, indent=2))
    print(f"\nresults: {out}")
    shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
