"""Dataset discovery: resolve_urls, index_dataset, DatasetIndex.locate/fingerprint."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.proto.errors import (
    DatasetNotFound,
    InvalidJobSpec,
    SchemaMismatch,
    UnreadableShard,
)
from shardstream.service.dataset import file_version, resolve_urls
from shardstream.service.formats import index_dataset
from shardstream.service.formats.parquet import read_shard
from tests.datasets import write_indexed


def _names(urls: list[str]) -> list[str]:
    return [u.rsplit("/", 1)[-1] for u in urls]


def test_directory_is_searched_recursively_sorted_and_filtered(tmp_path: Path) -> None:
    for rel in ["b.parquet", "a.pq", "sub/c.parq", "_SUCCESS", "_meta.parquet", ".hidden.parquet",
                "notes.txt"]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    urls = resolve_urls((str(tmp_path),))
    assert _names(urls) == ["a.pq", "b.parquet", "c.parq"]
    assert all(u.startswith("file://") for u in urls)
    assert urls == sorted(urls)


def test_sorted_by_path_not_by_creation_or_argument_order(tmp_path: Path) -> None:
    for name in ["z.parquet", "m.parquet", "a.parquet"]:
        (tmp_path / name).write_bytes(b"x")
    listed = resolve_urls((str(tmp_path / "z.parquet"), str(tmp_path / "a.parquet")))
    assert _names(listed) == ["a.parquet", "z.parquet"]


def test_glob(tmp_path: Path) -> None:
    for name in ["p-1.parquet", "p-2.parquet", "q-1.parquet"]:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "p-dir").mkdir()
    assert _names(resolve_urls((str(tmp_path / "p-*"),))) == ["p-1.parquet", "p-2.parquet"]


def test_duplicates_are_removed_across_spellings(tmp_path: Path) -> None:
    paths = write_indexed(str(tmp_path), [2, 2])
    urls = resolve_urls((str(tmp_path), paths[0], "file://" + paths[1], str(tmp_path / "*.parquet")))
    assert len(urls) == 2


@pytest.mark.parametrize("entry", ["missing", "missing/*.parquet", "emptydir"])
def test_missing_inputs_raise_dataset_not_found(tmp_path: Path, entry: str) -> None:
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "emptydir" / "readme.txt").write_text("no shards")
    with pytest.raises(DatasetNotFound, match=entry.split("/")[0]):
        resolve_urls((str(tmp_path / entry),))


def test_unknown_protocol_is_an_invalid_job_spec_naming_the_url() -> None:
    with pytest.raises(InvalidJobSpec, match=r"nosuchfs://bucket/x.*Protocol not known"):
        resolve_urls(("nosuchfs://bucket/x",))


def test_a_filesystem_the_service_lacks_is_an_invalid_job_spec_saying_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(url: str) -> None:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    with pytest.raises(InvalidJobSpec, match="cannot read 's3://bucket/train/': Install s3fs"):
        resolve_urls(("s3://bucket/train/",))


def test_one_missing_entry_fails_the_whole_list(tmp_path: Path) -> None:
    paths = write_indexed(str(tmp_path), [2])
    with pytest.raises(DatasetNotFound):
        resolve_urls((paths[0], str(tmp_path / "nope.parquet")))


def test_index_counts_rows_row_groups_and_offsets(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [5, 0, 9, 3], row_group_size=4)
    index = index_dataset((str(tmp_path),))
    assert index.num_rows == 17
    assert [s.num_rows for s in index.shards] == [5, 0, 9, 3]
    assert index.shards[2].row_group_rows == (4, 4, 1)
    assert index.file_starts.tolist() == [0, 5, 5, 14, 17]
    assert index.schema.names == ["idx", "x", "y"]
    assert all(s.size > 0 for s in index.shards)


def test_locate_maps_global_index_to_shard_and_row_skipping_empty_shards(tmp_path: Path) -> None:
    paths = write_indexed(str(tmp_path), [0, 5, 0, 0, 3, 0])
    index = index_dataset((str(tmp_path),))
    urls = [s.url for s in index.shards]
    assert [u.endswith(os.path.basename(p)) for u, p in zip(urls, paths, strict=True)] == [True] * 6
    assert index.locate(0) == (urls[1], 0)
    assert index.locate(4) == (urls[1], 4)
    assert index.locate(5) == (urls[4], 0)
    assert index.locate(7) == (urls[4], 2)


def test_column_selection_narrows_the_schema(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [3, 3])
    index = index_dataset((str(tmp_path),), columns=("y", "idx"))
    assert index.schema.names == ["y", "idx"]


def test_missing_column_is_invalid_job_spec_naming_it(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [3])
    with pytest.raises(InvalidJobSpec, match="label"):
        index_dataset((str(tmp_path),), columns=("idx", "label"))


def test_schema_mismatch_names_both_shards(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [3])
    pq.write_table(pa.table({"idx": pa.array([1], pa.int32())}), tmp_path / "part-99999.parquet")
    with pytest.raises(SchemaMismatch, match="part-99999") as info:
        index_dataset((str(tmp_path),))
    assert "part-00000" in str(info.value)


def test_selected_columns_decide_schema_agreement(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [3])
    pq.write_table(pa.table({"idx": pa.array([3], pa.int64()), "other": ["s"]}),
                   tmp_path / "part-99999.parquet")
    assert index_dataset((str(tmp_path),), columns=("idx",)).num_rows == 4
    with pytest.raises(SchemaMismatch):
        index_dataset((str(tmp_path),))


def test_zero_row_dataset_is_refused(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [0, 0])
    with pytest.raises(DatasetNotFound, match="no rows"):
        index_dataset((str(tmp_path),))


def test_unreadable_shard(tmp_path: Path) -> None:
    (tmp_path / "junk.parquet").write_bytes(b"definitely not parquet")
    with pytest.raises(UnreadableShard, match=r"junk\.parquet"):
        index_dataset((str(tmp_path),))


def test_fingerprint_is_stable_and_tracks_content(tmp_path: Path) -> None:
    write_indexed(str(tmp_path / "d"), [4, 4])
    fp = index_dataset((str(tmp_path / "d"),)).fingerprint
    assert fp == index_dataset((str(tmp_path / "d"),)).fingerprint
    assert fp != index_dataset((str(tmp_path / "d"),), columns=("idx",)).fingerprint
    added = str(tmp_path / "d" / "part-00002.parquet")
    write_indexed(str(tmp_path / "d"), [4, 4, 1])  # a shard is added (and the others rewritten)
    assert fp != index_dataset((str(tmp_path / "d"),)).fingerprint
    os.remove(added)
    # Rewritten with the same rows: a new version (mtime here, generation or ETag in a bucket),
    # so a new fingerprint; nothing cached from the old files can be taken for the new ones.
    rewritten = index_dataset((str(tmp_path / "d"),))
    assert fp != rewritten.fingerprint
    assert rewritten.fingerprint == index_dataset((str(tmp_path / "d"),)).fingerprint


def test_a_file_version_comes_from_the_store(tmp_path: Path) -> None:
    assert file_version({"generation": "17", "mtime": 3.0}) == "generation=17"
    assert file_version({"ETag": '"abc"', "LastModified": "x"}) == 'ETag="abc"'
    assert file_version({"mtime": 3.5}) == "mtime=3.5"
    assert file_version({"size": 3}) == ""
    path = write_indexed(str(tmp_path), [4])[0]
    shard, _ = read_shard(path)
    os.utime(path, (1.0, 1.0))
    assert read_shard(path)[0].version != shard.version
