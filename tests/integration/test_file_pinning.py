"""A job reads the files it opened, through the real service, on every data path.

A shard rewritten in place mid-epoch, while its decoders are reading it (same inode, same length, other values) or swapped for a
symlink to a file outside the dataset after the job opened: the rank gets DatasetChanged naming
the file within seconds, and not one row of the other file before it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from shardstream.client import RemoteLoader
from shardstream.proto.errors import DatasetChanged

ROWS = 32  # per shard; batches of 4, shard 0 is steps 0-7
PATHS = {"shared memory": {}, "bulk socket": {"shared_memory": False},
         "grpc stream": {"shared_memory": False, "bulk_socket": False}}


def _write(path: Path, first: int) -> None:
    """Plain, uncompressed int64 rows first..first+ROWS-1: other values have the same length."""
    pq.write_table(pa.table({"idx": np.arange(first, first + ROWS, dtype=np.int64)}), path, compression="none",
                   use_dictionary=False, write_statistics=False, row_group_size=4)


def _dataset(root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    _write(data / "part-0.parquet", 0)
    _write(data / "part-1.parquet", ROWS)
    return data


def _rewrite_in_place(path: Path, first: int) -> None:
    scratch = path.parent.parent / "scratch.parquet"
    _write(scratch, first)
    with open(path, "r+b") as f:  # the same inode and length: what a size or inode check misses
        f.write(scratch.read_bytes())


def _until_error(batches: Iterator[dict[str, torch.Tensor]], delivered: list[int]) -> DatasetChanged:
    with pytest.raises(DatasetChanged) as raised:
        for batch in batches:
            delivered.extend(batch["idx"].tolist())
    return raised.value


@pytest.mark.parametrize("path", list(PATHS))
def test_a_shard_rewritten_mid_epoch_fails_naming_it_never_mixes(service_address: str, tmp_path: Path,
                                                                 path: str) -> None:
    data = _dataset(tmp_path)
    with RemoteLoader(service_address, dataset=str(data), batch_size=4, shuffle=False, world_size=1, rank=0,
                      prefetch=1, timeout=60, job_name=f"rewritten-{path}", **PATHS[path]) as loader:
        batches = iter(loader)
        delivered = [v for _ in range(2) for v in next(batches)["idx"].tolist()]
        _rewrite_in_place(data / "part-0.parquet", 1000)  # the file its decoders are reading
        started = time.monotonic()
        error = _until_error(batches, delivered)
    assert time.monotonic() - started < 20  # at once, not after the client's timeout
    assert "part-0.parquet' changed after the job opened it" in str(error)
    assert delivered == list(range(len(delivered)))  # the old rows only, in order, none of the new


def test_a_shard_relinked_outside_the_dataset_after_open_fails(service_address: str, tmp_path: Path) -> None:
    data = _dataset(tmp_path)
    outside = tmp_path / "outside.parquet"
    _write(outside, 5000)
    with RemoteLoader(service_address, dataset=str(data), batch_size=4, shuffle=True, seed=3, world_size=2,
                      rank=1, timeout=60, job_name="relinked") as loader:
        (data / "part-0.parquet").unlink()
        (data / "part-0.parquet").symlink_to(outside)
        delivered: list[int] = []
        error = _until_error(iter(loader), delivered)
    assert "part-0.parquet' changed after the job opened it" in str(error)
    assert all(v < 2 * ROWS for v in delivered)  # not one row from outside
