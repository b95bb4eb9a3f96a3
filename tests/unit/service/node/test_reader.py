"""ShardReader.read (order across shards and row groups) and RowGroupCache eviction."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.proto.errors import DatasetNotFound
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
from shardstream.service.node.storage_reader import StorageReader
from tests.datasets import memory_reader, write_indexed

SHARDS = [5, 0, 11, 1, 0, 7]  # empty shards, a 1-row shard, partial row groups
N = sum(SHARDS)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    directory = tmp_path_factory.mktemp("indexed")
    write_indexed(str(directory), SHARDS, row_group_size=3)
    return index_dataset((str(directory),))


def _reader(index: DatasetIndex, columns: list[str] | None = None,
            cache_bytes: int = 1 << 20) -> ShardReader:
    return memory_reader(index, columns, cache_bytes)


@settings(max_examples=150, deadline=None, database=None)
@given(indices=st.lists(st.integers(0, N - 1), min_size=1, max_size=60),
       cache_bytes=st.sampled_from([0, 1 << 20]))
def test_rows_come_back_in_the_requested_order(index: DatasetIndex, indices: list[int],
                                               cache_bytes: int) -> None:
    table = _reader(index, cache_bytes=cache_bytes).read(np.array(indices))
    assert table.column("idx").to_pylist() == indices
    assert table.column("y").to_pylist() == [i % 10 for i in indices]
    assert table.column("x").to_pylist() == [[float(i)] * 3 for i in indices]


@settings(max_examples=60, deadline=None, database=None)
@given(indices=st.lists(st.integers(0, N - 1), min_size=1, max_size=40))
def test_rows_are_the_tables_rows_as_python(index: DatasetIndex, indices: list[int]) -> None:
    reader = _reader(index)
    assert reader.rows(np.array(indices, dtype=np.int64)) == reader.read(np.array(indices, dtype=np.int64)).to_pylist()


def test_rows_of_every_kind_of_value_and_nulls(tmp_path: Path) -> None:
    """Values as to_pylist gives them: bytes, strings, lists, timestamps, nulls; several chunks."""
    import datetime

    import pyarrow.parquet as pq

    table = pa.table({
        "b": pa.array([b"\xff\xd8", None, b"", b"x" * 300], pa.binary()),
        "s": pa.array(["a", "b", None, "\u00e9"]),
        "l": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64())),
        "t": pa.array([datetime.datetime(2026, 1, 1), None, datetime.datetime(1970, 1, 1), None], pa.timestamp("ms")),
        "f": pa.array([1.5, None, float("nan"), -0.0]),
    })
    pq.write_table(table, tmp_path / "part-00000.parquet", row_group_size=3)
    reader = _reader(index_dataset((str(tmp_path),)))
    indices = np.array([3, 1, 0, 2, 3], dtype=np.int64)
    rows, expected = reader.rows(indices), reader.read(indices).to_pylist()
    assert [{k: v for k, v in row.items() if k != "f"} for row in rows] == \
        [{k: v for k, v in row.items() if k != "f"} for row in expected]
    assert [repr(row["f"]) for row in rows] == [repr(row["f"]) for row in expected]  # nan, -0.0


def test_every_row_in_reverse_order_with_duplicates(index: DatasetIndex) -> None:
    indices = [*range(N - 1, -1, -1), 0, 0, N - 1, 5, 5]
    assert _reader(index).read(np.array(indices)).column("idx").to_pylist() == indices


def test_reads_accept_python_lists(index: DatasetIndex) -> None:
    assert _reader(index).read([16, 2]).column("idx").to_pylist() == [16, 2]  # type: ignore[arg-type]


def test_column_selection(index: DatasetIndex) -> None:
    table = _reader(index, columns=["y"]).read(np.array([3, 12]))
    assert table.column_names == ["y"]
    assert table.column("y").to_pylist() == [3, 2]


def test_cached_row_groups_are_reused_without_touching_the_file(tmp_path: Path) -> None:
    paths = write_indexed(str(tmp_path), [4, 4], row_group_size=2)
    index = index_dataset((str(tmp_path),))
    source = RowGroupSource(StorageReader(SharedReadCounters()), RowGroupCache(1 << 20))
    ShardReader(index, None, source).read(np.array([0, 1, 6]))
    os.remove(paths[0])
    os.remove(paths[1])
    # A fresh reader holds no open files: these rows can only come from the shared cache.
    assert ShardReader(index, None, source).read(np.array([6, 1, 0])).column("idx").to_pylist() == [6, 1, 0]
    with pytest.raises(DatasetNotFound, match="part-00000"):
        _reader(index).read(np.array([2]))


def _table(rows: int) -> pa.Table:
    return pa.table({"a": np.arange(rows, dtype=np.int64)})


def test_cache_evicts_least_recently_used_by_bytes() -> None:
    t = _table(100)  # 800 bytes
    cache = RowGroupCache(2 * t.nbytes)
    cache.put(("a", 0, None), t)
    cache.put(("b", 0, None), t)
    assert cache.get(("a", 0, None)) is not None  # a is now the most recent
    cache.put(("c", 0, None), t)
    assert cache.get(("b", 0, None)) is None
    assert cache.get(("a", 0, None)) is not None
    assert cache.get(("c", 0, None)) is not None


def test_cache_keys_include_columns() -> None:
    cache = RowGroupCache(1 << 20)
    cache.put(("a", 0, ("x",)), _table(1))
    assert cache.get(("a", 0, None)) is None
    assert cache.get(("a", 0, ("x",))) is not None


def test_cache_keeps_bytes_within_bound() -> None:
    t = _table(100)
    cache = RowGroupCache(int(3.5 * t.nbytes))
    for i in range(10):
        cache.put((str(i), 0, None), t)
    kept = [i for i in range(10) if cache.get((str(i), 0, None)) is not None]
    assert kept == [7, 8, 9]


def test_cache_keeps_a_single_oversized_row_group() -> None:
    cache = RowGroupCache(10)
    cache.put(("a", 0, None), _table(100))
    assert cache.get(("a", 0, None)) is not None
    cache.put(("b", 0, None), _table(100))
    assert cache.get(("a", 0, None)) is None
    assert cache.get(("b", 0, None)) is not None


def test_putting_the_same_key_twice_does_not_double_count() -> None:
    t = _table(100)
    cache = RowGroupCache(int(2.5 * t.nbytes))
    cache.put(("a", 0, None), t)
    cache.put(("a", 0, None), t)  # e.g. two concurrent misses on one row group
    cache.put(("b", 0, None), t)  # 2 tables = 1600 bytes <= 2000
    assert cache.get(("a", 0, None)) is not None


def test_one_file_read_two_ways_never_shares_a_cached_unit(tmp_path: Path) -> None:
    """The memory cache's key is the shard's identity, which names how its units are cut: the same
    token file as windows of 4 and of 8 tokens are two sets of units, in one actor's cache."""
    np.arange(64, dtype=np.uint16).tofile(tmp_path / "t.bin")
    source = RowGroupSource(StorageReader(SharedReadCounters()), RowGroupCache(1 << 20))
    for seq_len in (4, 8, 4):
        [shard] = index_dataset((str(tmp_path / "t.bin"),), format="tokens",
                                format_args={"seq_len": seq_len, "dtype": "uint16"}).shards
        [cached] = source.cached([(shard, 0)], None)
        unit = cached if cached is not None else source.get(shard, 0, None)
        assert unit.column("input_ids").to_pylist()[0] == list(range(seq_len))
