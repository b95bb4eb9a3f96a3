"""What reading a batch of prepared samples from the cache costs, per sample.

    python -m bench.cache_reads [--repeat-seconds 0.5]

A memory tier (in /dev/shm where there is one) holds every sample of one shard; a job's view of it
(`JobSamples.get_many`, what a decode step calls) reads shuffled batches back: the index lookups,
the entries' reads, and each entry's verification (checksum, key, fields). Two kinds of sample:
a tokenized document (64 int64 ids, an entry of about 600 bytes: per-entry costs dominate) and a
prepared 224 x 224 x 3 picture (150 KB: the bytes dominate). Best of 3 runs of about
`--repeat-seconds` each; one process, one thread, with glibc's allocator set as a decode actor sets
it (allocator.py: freed blocks of a picture's size are reused, not unmapped and faulted in again,
which without it cost about 100 us a picture here).
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.cache_checksum import best_seconds
from bench.report import markdown_table
from shardstream.service.allocator import keep_freed_memory
from shardstream.service.formats import index_dataset
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.node.prepared_cache import PreparedCache
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.read_counters import SharedReadCounters

SHM = "/dev/shm"
KINDS: dict[str, tuple[int, int, Callable[[np.random.Generator], dict[str, Any]]]] = {
    # name: (samples stored, batch size, one sample)
    "tokenized document (64 ids)": (65_536, 256, lambda rng: {"input_ids": rng.integers(0, 50_000, 64)}),
    "picture 224x224x3": (2_048, 32, lambda rng: {"image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
                                                  "label": int(rng.integers(1000))}),
}


def stored(directory: Path, count: int, sample: Callable[[np.random.Generator], dict[str, Any]]) -> JobSamples:
    """A job's view of a memory tier holding `count` samples of one shard."""
    data = directory / "data"
    data.mkdir()
    pq.write_table(pa.table({"x": np.arange(count)}), data / "part-0.parquet")
    tier = SampleTier("memory", str(directory / "tier"), 4 << 30)
    samples = PreparedCache([tier], SharedReadCounters()).for_job(index_dataset((str(data),)), "bench")
    rng = np.random.default_rng(0)
    for index in range(count):
        samples._keep(index, sample(rng))  # every sample, whatever the write budget would allow
    return samples


def _read_batch(samples: JobSamples, order: Iterator[int], batch: int) -> None:
    assert len(samples.get_many([next(order) for _ in range(batch)])) == batch


def measure(repeat_s: float, kinds: dict[str, tuple[int, int, Callable[[np.random.Generator], dict[str, Any]]]] = KINDS,
            ) -> list[list[str]]:
    """A row per kind of sample: its name, entry bytes, batch size, us per sample, samples/s."""
    rows = []
    for name, (count, batch, sample) in kinds.items():
        with tempfile.TemporaryDirectory(dir=SHM if os.path.isdir(SHM) else None) as directory:
            samples = stored(Path(directory), count, sample)
            order = itertools.cycle(np.random.default_rng(1).permutation(count).tolist())
            seconds = best_seconds(lambda s=samples, o=order, b=batch: _read_batch(s, o, b), repeat_s) / batch
            entry = samples.kept_bytes / count
            rows.append([name, f"{entry:,.0f}", str(batch), f"{seconds * 1e6:.1f}", f"{1 / seconds:,.0f}"])
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_reads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat-seconds", type=float, default=0.5, help="length of each timed run")
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the decode actors do (node/decoder.py)
    print(markdown_table(["sample", "entry bytes", "batch", "us per sample", "samples/s (one core)"],
                         measure(args.repeat_seconds)))


if __name__ == "__main__":
    main()
