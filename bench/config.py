"""What one benchmark run measures: workload size, repetitions, cores, batch shape.

Two presets: ``full`` (the default of ``python -m bench``) and ``quick`` (a smoke
run of the whole harness in a minute or two). Every knob can be overridden from
the command line.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
CACHE_DIR = BENCH_DIR / ".cache"
RESULTS_DIR = BENCH_DIR / "results"

MIB = 1 << 20
SYSTEMS = ("shardstream", "dataloader", "raydata", "tfdata", "spdl")


@dataclass(frozen=True)
class WorkloadSpec:
    """The JPEG workload: Parquet shards of (image: JPEG bytes, label: int64)."""

    num_samples: int = 16_000
    num_shards: int = 8
    image_size: int = 256  # every image is image_size x image_size RGB
    row_group_rows: int = 256
    jpeg_quality: int = 90
    seed: int = 0

    @property
    def name(self) -> str:
        return (f"jpeg-{self.num_samples}x{self.image_size}-s{self.num_shards}"
                f"-rg{self.row_group_rows}-q{self.jpeg_quality}-seed{self.seed}")


@dataclass(frozen=True)
class TransportSpec:
    """Pre-decoded batches: rows of fixed_size_list<uint8>[row_bytes], no transform, served to one
    rank by `decoders` decode actors.

    A row is one 3x224x224 uint8 image and a batch 64 of them (9.63 MB), the JPEG workload's
    batch once decoded.
    """

    row_bytes: int = 3 * 224 * 224
    # 617 MB, 64 batches an epoch: the decode node's local copy holds it, and the rank's restart
    # between epochs (new streams, an empty window) is a small part of an epoch, as in training.
    num_rows: int = 4096
    batch_rows: tuple[int, ...] = (64,)
    decoders: int = 2  # the rank pulls from both at once
    shardstream_epochs: int = 4  # measured epochs (2.5 GB), after one warm-up epoch
    raw_bytes: int = 2048 * MIB  # streamed per raw gRPC / raw TCP measurement

    def batch_bytes(self, rows: int) -> int:
        return rows * self.row_bytes

    @property
    def name(self) -> str:
        return f"u8rows-{self.num_rows}x{self.row_bytes}"


@dataclass(frozen=True)
class BenchConfig:
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    transport: TransportSpec = field(default_factory=TransportSpec)
    systems: tuple[str, ...] = SYSTEMS
    repetitions: int = 3
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    batch_size: int = 64
    crop: int = 224
    prefetch: int = 4  # RemoteLoader prefetch (batches); the RSS target's window
    step_ms: float = 0.0  # simulated accelerator step per batch (sleep), 0 = pure loading
    shuffle: bool = True  # every system shuffles each epoch, as training does (the targets' condition)
    run_transport: bool = True
    consumer_timeout_s: float = 900.0
    # A measurement during which other processes used more than this many cores is repeated,
    # up to `retries` times; the least disturbed attempt is kept.
    max_foreign_load_cores: float = 0.25
    retries: int = 2
    quick: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def quick_config() -> BenchConfig:
    return BenchConfig(
        workload=WorkloadSpec(num_samples=1_280, num_shards=4, row_group_rows=128),
        transport=TransportSpec(num_rows=256, shardstream_epochs=2, raw_bytes=256 * MIB),
        repetitions=1,
        consumer_timeout_s=300.0,
        quick=True,
    )


def full_config() -> BenchConfig:
    return BenchConfig()


__all__ = [
    "BENCH_DIR",
    "CACHE_DIR",
    "MIB",
    "REPO_ROOT",
    "RESULTS_DIR",
    "SYSTEMS",
    "BenchConfig",
    "TransportSpec",
    "WorkloadSpec",
    "full_config",
    "quick_config",
]
