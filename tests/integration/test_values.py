"""Values as the dataset holds them, end to end through a real service: dtypes from the schema,
nulls refused at open or masked, dictionary strings, unsigned and temporal columns."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from shardstream.client import CorruptSample, InvalidJobSpec, RemoteLoader
from tests.datasets import oracle_batches

BIG = 2**53 + 1  # not a float64


@pytest.fixture(scope="module")
def with_a_null(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`idx` 0..11; `big`: BIG + idx, null at row 6 (the second row group); 4 rows a row group."""
    directory = tmp_path_factory.mktemp("with_a_null")
    big = [None if i == 6 else BIG + i for i in range(12)]
    pq.write_table(pa.table({"idx": pa.array(range(12), pa.int64()), "big": pa.array(big, pa.int64())}),
                   directory / "part-0.parquet", row_group_size=4)
    return str(directory)


def batches(address: str, dataset: str, **kwargs: object) -> list[dict[str, object]]:
    options: dict = {"batch_size": 4, "world_size": 1, "rank": 0, "seed": 5, **kwargs}
    with RemoteLoader(address, dataset=dataset, **options) as loader:
        return list(loader)


def test_an_int64_column_with_a_null_is_refused_at_open_naming_file_column_and_row(
        service_address: str, with_a_null: str) -> None:
    with pytest.raises(InvalidJobSpec, match=rf"column 'big' \(int64\) holds a null at row 6 of "
                                             rf"file://{with_a_null}/part-0\.parquet.*nulls='mask'"):
        batches(service_address, with_a_null)
    assert [b["idx"].tolist() for b in batches(service_address, with_a_null, columns=["idx"])] == \
        oracle_batches(12, 1, 0, 4, True, 5, False, 0)  # still serving; the column left out is fine


def test_with_nulls_mask_values_keep_int64_exactly_and_a_mask_says_where_the_null_is(
        service_address: str, with_a_null: str) -> None:
    got = batches(service_address, with_a_null, nulls="mask")
    assert [b["idx"].tolist() for b in got] == oracle_batches(12, 1, 0, 4, True, 5, False, 0)
    for batch in got:
        assert list(batch) == ["idx", "idx_mask", "big", "big_mask"]
        assert batch["big"].dtype == torch.int64 and batch["big_mask"].dtype == torch.bool  # type: ignore[union-attr]
        idx = batch["idx"].tolist()  # type: ignore[union-attr]
        assert batch["big"].tolist() == [0 if i == 6 else BIG + i for i in idx]  # type: ignore[union-attr]
        assert batch["big_mask"].tolist() == [i != 6 for i in idx]  # type: ignore[union-attr]


def test_dictionary_strings_unsigned_and_temporal_columns_arrive_as_pyarrow_reads_them(
        service_address: str, tmp_path: Path) -> None:
    rows = 10
    table = pa.table({
        "idx": pa.array(range(rows), pa.int64()),
        "label": pa.array([f"class {i % 3}" for i in range(rows)]).dictionary_encode(),
        "path": pa.array([f"/p/{i}" for i in range(rows)], pa.large_string()),
        "u": pa.array([2**64 - 1 - i for i in range(rows)], pa.uint64()),
        "at": pa.array([1_700_000_000_000 + i for i in range(rows)], pa.timestamp("ms", tz="UTC")),
        "flag": pa.array([i % 2 == 0 for i in range(rows)]),
    })
    pq.write_table(table, tmp_path / "part-0.parquet", row_group_size=3)
    oracle = pq.read_table(tmp_path / "part-0.parquet")
    assert pa.types.is_dictionary(oracle.schema.field("label").type)  # pyarrow reads it as a dictionary
    for batch in batches(service_address, str(tmp_path), shuffle=False):
        idx = batch["idx"].tolist()  # type: ignore[union-attr]
        assert batch["label"] == [oracle.column("label")[i].as_py() for i in idx]
        assert batch["path"] == [oracle.column("path")[i].as_py() for i in idx]
        assert batch["u"].dtype == torch.uint64  # type: ignore[union-attr]
        assert batch["u"].numpy().tolist() == [oracle.column("u")[i].as_py() for i in idx]  # type: ignore[union-attr]
        assert batch["at"].dtype == torch.int64  # type: ignore[union-attr]
        assert batch["at"].tolist() == [1_700_000_000_000 + i for i in idx]  # type: ignore[union-attr]
        assert batch["flag"].dtype == torch.bool  # type: ignore[union-attr]


def test_a_bool_null_a_footer_does_not_count_fails_its_batch_at_once_naming_file_and_row(
        service_address: str, tmp_path: Path) -> None:
    pq.write_table(pa.table({"idx": pa.array(range(8), pa.int64()),
                             "ok": pa.array([True, False, True, None, True, True, True, True])}),
                   tmp_path / "part-0.parquet", row_group_size=4, write_statistics=False)
    started = time.monotonic()
    with pytest.raises(CorruptSample, match=rf"row 3 of file://{tmp_path}/part-0\.parquet\): column 'ok' holds a null"):
        batches(service_address, str(tmp_path), shuffle=False, timeout=60)
    assert time.monotonic() - started < 30  # the error itself, not the client's timeout
