"""The node's local copy: shuffled reads without read amplification, sharing, bounds, staleness."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.proto.errors import DatasetChanged
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.local_copy import STALE_TEMP_S, LocalCopy
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
from shardstream.service.node.storage_reader import StorageReader
from tests.datasets import memory_reader, write_indexed

SHARDS = [40, 0, 37, 23]
N = sum(SHARDS)
ROW_GROUP = 8
FOOTER_READ = 64 << 10


def _column_bytes(index: DatasetIndex) -> int:
    """The dataset's bytes as stored (every column chunk), what a perfect reader reads once."""
    total = 0
    for shard in index.shards:
        meta = pq.read_metadata(shard.url.removeprefix("file://"))
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            total += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    return total


def _row_groups(index: DatasetIndex) -> int:
    return sum(rows > 0 for s in index.shards for rows in s.row_group_rows)


def _local_reader(index: DatasetIndex, directory: Path, max_bytes: int = 1 << 30,
                  counters: SharedReadCounters | None = None) -> ShardReader:
    counters = counters or SharedReadCounters()
    local = LocalCopy(str(directory), max_bytes, counters)
    return ShardReader(index, None, RowGroupSource(StorageReader(counters), RowGroupCache(0), local),
                       ThreadPoolExecutor(4))


@pytest.fixture()
def index(tmp_path: Path) -> DatasetIndex:
    write_indexed(str(tmp_path / "data"), SHARDS, row_group_size=ROW_GROUP, features=64)
    return index_dataset((str(tmp_path / "data"),))


def test_a_shuffled_epoch_reads_storage_once_and_later_epochs_not_at_all(index: DatasetIndex,
                                                                          tmp_path: Path) -> None:
    counters = SharedReadCounters()
    reader = _local_reader(index, tmp_path / "copy", counters=counters)
    plain = memory_reader(index, memory_bytes=0)  # the old path: a row group read per row
    for epoch in range(2):
        order = np.random.default_rng(epoch).permutation(N)
        for batch in np.array_split(order, N // 7):
            got = reader.read(batch)
            assert got.equals(plain.read(batch))
        reads = counters.take_delta()
        if epoch == 0:
            assert reads.storage_reads == _row_groups(index)
            # Every column chunk once, plus one footer read per shard (Arrow reads a file's
            # last 64 KiB for its footer: all of these small files).
            footers = sum(min(s.size, FOOTER_READ) for s in index.shards if s.num_rows)
            assert _column_bytes(index) <= reads.storage_bytes <= _column_bytes(index) + footers
        else:
            assert reads.storage_bytes == 0
            assert reads.disk_misses == 0
    assert plain.source.counters.take_delta().storage_bytes > 5 * _column_bytes(index)


def test_actors_sharing_a_node_fetch_each_row_group_once(index: DatasetIndex, tmp_path: Path) -> None:
    """Separate LocalCopy instances stand for separate actors: their flock()s exclude each other
    as separate processes' do (each holds its own open file description)."""
    counters = [SharedReadCounters() for _ in range(4)]
    readers = [_local_reader(index, tmp_path / "copy", counters=c) for c in counters]
    order = np.random.default_rng(0).permutation(N)
    barrier = threading.Barrier(len(readers))

    def run(reader: ShardReader) -> None:
        barrier.wait()
        for batch in np.array_split(order, 10):
            assert reader.read(batch).column("idx").to_pylist() == batch.tolist()

    with ThreadPoolExecutor(len(readers)) as pool:
        list(pool.map(run, readers))
    fetched = sum(c.take_delta().storage_reads for c in counters)
    assert fetched == _row_groups(index)


def test_the_copy_stays_within_its_bound_dropping_the_least_recently_used(index: DatasetIndex,
                                                                          tmp_path: Path) -> None:
    one = _local_reader(index, tmp_path / "probe")
    one.read(np.array([0]))
    group_bytes = sum(f.stat().st_size for f in (tmp_path / "probe").glob("*/*.arrow"))
    bound = 4 * group_bytes
    counters = SharedReadCounters()
    reader = _local_reader(index, tmp_path / "copy", bound, counters)
    assert reader.source.local is not None
    reader.source.local.touch_every_s = 0.0  # every hit checks that its file is still there
    for start in range(0, N, ROW_GROUP):
        reader.read(np.array([start]))  # one row of each row group of the first shard, then on
        stored = sum(f.stat().st_size for f in (tmp_path / "copy").glob("*/*.arrow"))
        assert stored <= bound
    assert counters.take_delta().disk_bytes <= bound
    # The most recent row groups are still there; the first ones were evicted and are read again.
    last = index.num_rows - 1
    reader.read(np.array([last]))
    assert counters.take_delta().storage_reads == 0
    rows = reader.read(np.array([0, 1]))
    assert rows.column("idx").to_pylist() == [0, 1]
    assert counters.take_delta().storage_reads == 1


def test_a_rewritten_shard_is_read_again_never_served_from_the_old_copy(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_indexed(str(data), [16], row_group_size=ROW_GROUP)
    old = index_dataset((str(data),))
    reader = _local_reader(old, tmp_path / "copy")
    assert reader.read(np.array([3])).column("y").to_pylist() == [3]
    table = pq.read_table(data / "part-00000.parquet")
    before = (data / "part-00000.parquet").stat()
    pq.write_table(table.set_column(2, "y", pa.array(np.full(16, 7, dtype=np.int32))),
                   data / "part-00000.parquet", row_group_size=ROW_GROUP)
    # A later mtime whatever the clock's grain (the file's size is the same).
    os.utime(data / "part-00000.parquet", ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    new = index_dataset((str(data),))
    assert new.shards[0].version != old.shards[0].version
    counters = SharedReadCounters()
    fresh = _local_reader(new, tmp_path / "copy", counters=counters)
    assert fresh.read(np.array([3])).column("y").to_pylist() == [7]
    assert counters.take_delta().storage_reads == 1
    # A job still holding the old index may not mix the new file's rows with the old copy's.
    with pytest.raises(DatasetChanged, match=r"part-00000\.parquet' changed after the job opened it"):
        _local_reader(old, tmp_path / "other-copy").read(np.array([3]))


def test_a_damaged_file_in_the_copy_is_fetched_again(index: DatasetIndex, tmp_path: Path) -> None:
    _local_reader(index, tmp_path / "copy").read(np.array([0]))
    [stored] = (tmp_path / "copy").glob("*/*.arrow")
    stored.write_bytes(b"not arrow at all")
    counters = SharedReadCounters()
    assert _local_reader(index, tmp_path / "copy", counters=counters).read(
        np.array([1])).column("idx").to_pylist() == [1]
    assert counters.take_delta().storage_reads == 1


def test_a_row_group_larger_than_the_bound_is_served_without_a_copy(index: DatasetIndex,
                                                                    tmp_path: Path) -> None:
    counters = SharedReadCounters()
    reader = _local_reader(index, tmp_path / "copy", max_bytes=10, counters=counters)
    assert reader.read(np.array([5, 2])).column("idx").to_pylist() == [5, 2]
    assert not list((tmp_path / "copy").glob("*/*.arrow"))
    assert counters.take_delta().storage_reads == 1


def test_half_written_files_of_a_dead_writer_are_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / "ab").mkdir()
    stale, fresh = tmp_path / "ab" / ".x.arrow.1.2.tmp", tmp_path / "ab" / ".y.arrow.1.2.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(stale, (time.time() - 2 * STALE_TEMP_S,) * 2)
    LocalCopy(str(tmp_path), 1 << 20, SharedReadCounters())
    assert not stale.exists()
    assert fresh.exists()  # perhaps another actor's, still writing


def test_actors_sharing_a_node_keep_the_copy_near_its_bound(index: DatasetIndex, tmp_path: Path) -> None:
    """Each actor counts the whole directory again every percent of the bound it writes, so the
    others' writes count too; counting only its own would let the copy grow to actors x bound."""
    _local_reader(index, tmp_path / "probe").read(np.array([0]))
    group_bytes = max(f.stat().st_size for f in (tmp_path / "probe").glob("*/*.arrow"))
    bound = 6 * group_bytes
    readers = [_local_reader(index, tmp_path / "copy", bound) for _ in range(4)]
    order = np.random.default_rng(1).permutation(N)
    peak = 0
    for i, batch in enumerate(np.array_split(order, 40)):
        readers[i % len(readers)].read(batch)
        peak = max(peak, sum(f.stat().st_size for f in (tmp_path / "copy").glob("*/*.arrow")))
    assert peak <= bound + group_bytes


def test_an_unusable_directory_leaves_the_actor_reading_storage(tmp_path: Path) -> None:
    from shardstream.service.node.decoder import _local_copy
    from shardstream.service.node_messages import ReadSettings

    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    settings = ReadSettings(memory_bytes=0, local_copy_dir=str(blocker / "copy"), local_copy_bytes=1 << 20)
    assert _local_copy(settings, SharedReadCounters()) is None
