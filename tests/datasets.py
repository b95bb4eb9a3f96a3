"""Small real Parquet datasets for tests: an `idx` column holds each row's global index."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from shardstream.service.dataset import DatasetIndex
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
from shardstream.service.node.storage_reader import StorageReader


def write_indexed(directory: str, shard_rows: Sequence[int], row_group_size: int = 4,
                  features: int = 3) -> list[str]:
    """Shards named so sorted path order == creation order; `idx` = global index,
    `x` = fixed_size_list<float32>[features] holding idx, `y` = idx % 10 (int32)."""
    os.makedirs(directory, exist_ok=True)
    paths, start = [], 0
    for i, rows in enumerate(shard_rows):
        idx = np.arange(start, start + rows, dtype=np.int64)
        x = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(idx, features).astype(np.float32)), features)
        table = pa.table({"idx": idx, "x": x, "y": (idx % 10).astype(np.int32)})
        path = os.path.join(directory, f"part-{i:05d}.parquet")
        pq.write_table(table, path, row_group_size=max(1, row_group_size))
        paths.append(path)
        start += rows
    return paths


def encode_image(width: int, height: int, seed: int, fmt: str = "JPEG") -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return buf.getvalue()


def write_images(directory: str, shard_rows: Sequence[int], width: int = 40, height: int = 32,
                 corrupt: Sequence[int] = ()) -> list[str]:
    """Shards of (`image`: JPEG/PNG bytes, `label`: int64, `idx`: int64); rows in `corrupt` hold junk bytes."""
    os.makedirs(directory, exist_ok=True)
    paths, start = [], 0
    for i, rows in enumerate(shard_rows):
        idx = list(range(start, start + rows))
        images = [b"not an image" if j in corrupt else
                  encode_image(width + j % 3, height + j % 2, j, "PNG" if j % 2 else "JPEG") for j in idx]
        table = pa.table({"image": pa.array(images, pa.binary()), "label": np.array(idx) % 10,
                          "idx": np.array(idx, dtype=np.int64)})
        path = os.path.join(directory, f"img-{i:05d}.parquet")
        pq.write_table(table, path, row_group_size=8)
        paths.append(path)
        start += rows
    return paths


def memory_reader(index: DatasetIndex, columns: list[str] | None = None,
                  memory_bytes: int = 1 << 20) -> ShardReader:
    """A ShardReader with the local copy off: an in-memory LRU of `memory_bytes`, then storage."""
    return ShardReader(index, columns, RowGroupSource(StorageReader(SharedReadCounters()),
                                                      RowGroupCache(memory_bytes)))


def oracle_batches(n: int, world_size: int, rank: int, batch_size: int, shuffle: bool, seed: int,
                   drop_last: bool, epoch: int) -> list[list[int]]:
    """What DataLoader + DistributedSampler + set_epoch give rank `rank` (torch's own code)."""
    from torch.utils.data import BatchSampler, DistributedSampler

    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return [list(b) for b in BatchSampler(sampler, batch_size, drop_last)]
