"""bench.workload and bench.augment: a deterministic workload and the shared decode + crop + flip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.augment import crop_flip_chw, decode_batch, decode_jpeg
from bench.config import WorkloadSpec
from bench.workload import (
    describe,
    encode_jpeg,
    jpeg_workload,
    label_of,
    parquet_files,
    shard_bounds,
    synthetic_image,
)


def test_shard_bounds_cover_every_sample_once() -> None:
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError):
        shard_bounds(2, 3)


def test_synthetic_images_depend_on_seed_and_index_only() -> None:
    a = synthetic_image(0, 5, 32)
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, synthetic_image(0, 5, 32))
    assert not np.array_equal(a, synthetic_image(0, 6, 32))
    assert not np.array_equal(a, synthetic_image(1, 5, 32))


def test_jpeg_workload_is_built_once_and_reproducible(tmp_path: Path) -> None:
    spec = WorkloadSpec(num_samples=10, num_shards=3, image_size=32, row_group_rows=4)
    first = jpeg_workload(spec, cache_dir=tmp_path / "a")
    again = jpeg_workload(spec, cache_dir=tmp_path / "a")
    other = jpeg_workload(spec, cache_dir=tmp_path / "b")
    assert first == again
    files = parquet_files(first)
    assert len(files) == 3
    tables = [pq.read_table(f) for f in files]
    assert sum(t.num_rows for t in tables) == 10
    assert tables[0].schema.names == ["image", "label"]
    labels = [v for t in tables for v in t.column("label").to_pylist()]
    assert labels == [label_of(0, i) for i in range(10)]
    for a, b in zip(files, parquet_files(other), strict=True):
        assert pq.read_table(a).equals(pq.read_table(b))
    info = describe(first, spec)
    assert info["samples"] == 10 and info["shards"] == 3 and info["mean_jpeg_kb"] > 0


def test_decode_crop_flip_gives_uint8_chw_from_the_image() -> None:
    pixels = synthetic_image(0, 1, 40)
    decoded = decode_jpeg(encode_jpeg(pixels, 95))
    assert decoded.shape == (40, 40, 3)
    assert np.abs(decoded.astype(int) - pixels.astype(int)).mean() < 8  # lossy, but the same picture
    rng = np.random.default_rng(0)
    out = crop_flip_chw(decoded, 24, rng)
    assert out.shape == (3, 24, 24) and out.dtype == np.uint8 and out.flags.c_contiguous
    batch = decode_batch([encode_jpeg(pixels, 95)] * 3, 24, rng)
    assert batch.shape == (3, 3, 24, 24)


def test_crop_flip_takes_a_window_of_the_image_possibly_mirrored() -> None:
    pixels = np.arange(6 * 6 * 3, dtype=np.uint8).reshape(6, 6, 3)
    for seed in range(8):
        out = crop_flip_chw(pixels, 4, np.random.default_rng(seed)).transpose(1, 2, 0)
        windows = [pixels[t : t + 4, left : left + 4] for t in range(3) for left in range(3)]
        assert any(np.array_equal(out, w) or np.array_equal(out, w[:, ::-1]) for w in windows)


def test_crop_larger_than_the_image_is_refused() -> None:
    with pytest.raises(ValueError):
        crop_flip_chw(np.zeros((8, 8, 3), np.uint8), 16, np.random.default_rng(0))
