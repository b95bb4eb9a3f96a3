"""The benchmark's datasets, generated deterministically and cached under bench/.cache.

* The JPEG workload: Parquet shards of ``image`` (JPEG bytes of a synthetic
  ``image_size`` x ``image_size`` RGB picture: smooth gradients, a wave pattern
  and sensor-like noise, so it compresses like a photo rather than like white
  noise) and ``label`` (int64). Sample ``i`` depends on (seed, i) only.
* The transport dataset: rows of ``fixed_size_list<uint8>[row_bytes]`` of
  random bytes, stored uncompressed, so serving it is reading + framing only.

A dataset directory is complete when its ``workload.json`` exists; it is built
in a temporary directory and renamed into place, so an interrupted build is
never mistaken for a finished one.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image
from tqdm import tqdm

from bench.config import CACHE_DIR, TransportSpec, WorkloadSpec

log = logging.getLogger(__name__)

MANIFEST = "workload.json"


def synthetic_image(seed: int, index: int, size: int) -> np.ndarray:
    """A deterministic photo-like RGB image, uint8 [size, size, 3]."""
    rng = np.random.default_rng([seed, index])
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / size
    coef = rng.uniform(-1.0, 1.0, size=(3, 3)).astype(np.float32)
    freq = rng.uniform(1.0, 5.0, size=2).astype(np.float32)
    wave = np.sin(np.float32(2 * np.pi) * (freq[0] * x + freq[1] * y))
    channels = [coef[c, 0] * x + coef[c, 1] * y + coef[c, 2] * wave for c in range(3)]
    pixels = np.stack(channels, axis=-1)
    pixels -= pixels.min()
    pixels *= np.float32(235.0) / max(float(pixels.max()), 1e-6)
    pixels += rng.integers(0, 20, size=pixels.shape, dtype=np.uint8)
    return pixels.astype(np.uint8)


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def shard_bounds(num_samples: int, num_shards: int) -> list[tuple[int, int]]:
    """[start, stop) of each shard: as equal as possible, earlier shards take the remainder."""
    if num_shards < 1 or num_samples < num_shards:
        raise ValueError(f"cannot split {num_samples} samples into {num_shards} shards")
    base, extra = divmod(num_samples, num_shards)
    bounds, start = [], 0
    for shard in range(num_shards):
        stop = start + base + (1 if shard < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def label_of(seed: int, index: int) -> int:
    return int((index * 7919 + seed) % 1000)


def jpeg_workload(spec: WorkloadSpec, cache_dir: Path = CACHE_DIR) -> Path:
    """The directory of the JPEG workload's Parquet shards, building it if missing."""
    return _cached(cache_dir / spec.name, spec.__dict__, lambda tmp: _write_jpeg_shards(spec, tmp))


def transport_dataset(spec: TransportSpec, cache_dir: Path = CACHE_DIR) -> Path:
    """The directory of the transport dataset (one Parquet file), building it if missing."""
    manifest = {"num_rows": spec.num_rows, "row_bytes": spec.row_bytes}
    return _cached(cache_dir / spec.name, manifest, lambda tmp: _write_transport(spec, tmp))


def parquet_files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.parquet"))


def _cached(target: Path, manifest: dict[str, object], build: Callable[[Path], None]) -> Path:
    if (target / MANIFEST).exists():
        return target
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    log.info("built %s", target)
    return target


def _write_jpeg_shards(spec: WorkloadSpec, directory: Path) -> None:
    bounds = shard_bounds(spec.num_samples, spec.num_shards)
    with tqdm(total=spec.num_samples, desc="generating JPEG workload", unit="img") as bar:
        for shard, (start, stop) in enumerate(bounds):
            images, labels = [], []
            for index in range(start, stop):
                images.append(encode_jpeg(synthetic_image(spec.seed, index, spec.image_size),
                                          spec.jpeg_quality))
                labels.append(label_of(spec.seed, index))
                bar.update(1)
            table = pa.table({"image": pa.array(images, pa.binary()),
                              "label": pa.array(labels, pa.int64())})
            pq.write_table(table, directory / f"part-{shard:05d}.parquet",
                           row_group_size=spec.row_group_rows, compression="none",
                           use_dictionary=False)


def _write_transport(spec: TransportSpec, directory: Path) -> None:
    rng = np.random.default_rng(0)
    flat = rng.integers(0, 256, size=spec.num_rows * spec.row_bytes, dtype=np.uint8)
    column = pa.FixedSizeListArray.from_arrays(pa.array(flat), spec.row_bytes)
    rows_per_group = max(1, (4 << 20) // spec.row_bytes)  # a batch spans several row groups
    pq.write_table(pa.table({"x": column}), directory / "part-00000.parquet",
                   row_group_size=rows_per_group, compression="none", use_dictionary=False,
                   write_statistics=False)


def describe(directory: Path, spec: WorkloadSpec) -> dict[str, object]:
    """Name, size and shape of the JPEG workload, for the results document."""
    files = parquet_files(directory)
    jpeg_bytes = sum(int(pc.sum(pc.binary_length(pq.read_table(f, columns=["image"])["image"])).as_py())
                     for f in files)
    return {
        "name": spec.name,
        "directory": str(directory),
        "samples": spec.num_samples,
        "shards": len(files),
        "image_size": spec.image_size,
        "row_group_rows": spec.row_group_rows,
        "jpeg_quality": spec.jpeg_quality,
        "bytes_on_disk": sum(Path(f).stat().st_size for f in files),
        "mean_jpeg_kb": jpeg_bytes / spec.num_samples / 1e3,
    }


def prime_page_cache(directory: Path) -> int:
    """Read every file once so no system pays for the first read from disk; returns bytes."""
    total = 0
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                while chunk := f.read(8 << 20):
                    total += len(chunk)
    return total


__all__ = [
    "describe",
    "encode_jpeg",
    "jpeg_workload",
    "label_of",
    "parquet_files",
    "prime_page_cache",
    "shard_bounds",
    "synthetic_image",
    "transport_dataset",
]
