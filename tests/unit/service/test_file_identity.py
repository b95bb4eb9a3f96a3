"""A job reads the files it indexed: each open is checked against the pinned identity.

Every way a local file behind a path can change after a job opened it (rewritten in
place with the same length, its mtime set back, replaced by another file, re-linked to a
file elsewhere) is DatasetChanged at the next open, naming the file and both identities;
a symlink that stays put reads as its target.
"""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.proto.errors import DatasetChanged, UnreadableShard
from shardstream.service.dataset import stat_file
from shardstream.service.file_identity import file_version, local_version, opened_version
from shardstream.service.formats import index_dataset
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader


def _write(path: Path, values: range) -> None:
    """Uncompressed, plain int64: other values, the same length (a rewrite a size check misses)."""
    pq.write_table(pa.table({"v": np.array(values, dtype=np.int64)}), path, compression="none",
                   use_dictionary=False, write_statistics=False, row_group_size=4)


def _rewrite_in_place(path: Path, values: range) -> None:
    """The same inode, the same length, other bytes: one write into the open file, no truncation."""
    scratch = path.with_suffix(".scratch")
    _write(scratch, values)
    data = scratch.read_bytes()
    scratch.unlink()
    assert len(data) == path.stat().st_size
    with open(path, "r+b") as f:
        f.write(data)


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "part-0.parquet"
    path.parent.mkdir()
    _write(path, range(8))
    return path


def _read(reader: StorageReader, url: str, version: str) -> bytes:
    with reader.open(url, version) as f:
        return bytes(f.read())


def test_the_same_identity_from_the_path_at_open_and_the_descriptor_at_a_read(shard: Path) -> None:
    _, _, _, version = stat_file(str(shard), "shard")
    assert version == local_version(os.stat(shard))
    fs, path = fsspec.core.url_to_fs(str(shard))
    with fs.open(path, "rb", cache_type="none") as raw:
        assert opened_version(fs, path, raw) == version
    assert _read(StorageReader(SharedReadCounters()), str(shard), version) == shard.read_bytes()


def test_a_file_rewritten_in_place_with_the_same_length_is_dataset_changed(shard: Path) -> None:
    _, _, _, version = stat_file(str(shard), "shard")
    _rewrite_in_place(shard, range(100, 108))
    with pytest.raises(DatasetChanged, match=r"part-0\.parquet' changed after the job opened it \(it was "
                       rf"'{version}', it is now 'mtime="):
        _read(StorageReader(SharedReadCounters()), str(shard), version)


def test_a_rewrite_with_its_mtime_set_back_is_still_dataset_changed(shard: Path) -> None:
    _, _, _, version = stat_file(str(shard), "shard")
    before = os.stat(shard)
    _rewrite_in_place(shard, range(100, 108))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))  # `touch -r`: mtime as it was
    assert os.stat(shard).st_mtime == before.st_mtime and os.stat(shard).st_ino == before.st_ino
    with pytest.raises(DatasetChanged):
        _read(StorageReader(SharedReadCounters()), str(shard), version)


def test_a_path_relinked_to_a_file_elsewhere_is_dataset_changed(shard: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.parquet"
    _write(outside, range(500, 508))
    _, _, _, version = stat_file(str(shard), "shard")
    shard.unlink()
    shard.symlink_to(outside)
    with pytest.raises(DatasetChanged, match=r"part-0\.parquet"):
        _read(StorageReader(SharedReadCounters()), str(shard), version)


def test_a_symlinked_shard_is_its_target(shard: Path, tmp_path: Path) -> None:
    link = tmp_path / "linked" / "part-0.parquet"
    link.parent.mkdir()
    link.symlink_to(shard)
    os.utime(link, (1, 1), follow_symlinks=False)  # the link's own times are not the file's
    [indexed] = index_dataset((str(link.parent),)).shards
    assert indexed.version == local_version(os.stat(shard))
    assert _read(StorageReader(SharedReadCounters()), indexed.url, indexed.version) == shard.read_bytes()


def test_every_open_is_checked_not_only_the_first(shard: Path) -> None:
    """A decoder reads a file many times in a job: the check may not be remembered."""
    reader = StorageReader(SharedReadCounters())
    _, _, _, version = stat_file(str(shard), "shard")
    assert _read(reader, str(shard), version)
    _rewrite_in_place(shard, range(100, 108))
    with pytest.raises(DatasetChanged):
        _read(reader, str(shard), version)


def test_a_unit_of_a_changed_shard_is_dataset_changed_not_a_mix(shard: Path) -> None:
    index = index_dataset((str(shard.parent),))
    reader = StorageReader(SharedReadCounters())
    [indexed] = index.shards
    assert reader.row_group(indexed, 0, None).column("v").to_pylist() == [0, 1, 2, 3]
    _rewrite_in_place(shard, range(100, 108))
    with pytest.raises(DatasetChanged) as raised:
        reader.row_group(indexed, 1, None)
    assert isinstance(raised.value, UnreadableShard)  # `except UnreadableShard` keeps catching it


def test_an_object_store_version_is_its_generation_or_etag() -> None:
    assert file_version({"generation": "17", "mtime": 3.0}) == "generation=17"
    assert file_version({"ETag": '"abc"', "LastModified": "x"}) == 'ETag="abc"'
