"""Formats below the service: token windows, tar member tables, the registry's choices."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from shardstream.proto.errors import (
    DatasetChanged,
    DatasetNotFound,
    InvalidJobSpec,
    UnreadableShard,
)
from shardstream.service.dataset import DatasetIndex
from shardstream.service.file_identity import local_version
from shardstream.service.formats import detect_format, get_format, index_dataset
from shardstream.service.formats import webdataset as wds
from shardstream.service.node.local_copy import RowGroupKey
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader
from tests.formats import write_tars


def read_all(index: DatasetIndex, columns: tuple[str, ...] | None = None) -> pa.Table:
    """Every unit of every shard, in global order."""
    storage = StorageReader(SharedReadCounters())
    fmt = get_format(index.format)
    tables = [fmt.read_unit(shard, unit, columns, storage)
              for shard in index.shards for unit in range(len(shard.row_group_rows))]
    return pa.concat_tables(tables)


def _allow(url: str) -> None:
    pass


# -- tokens ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sizes", [[1], [50], [3, 1, 1, 40], [17, 0, 17, 17], [2, 2, 2, 2, 2, 2, 2]])
@pytest.mark.parametrize("seq_len", [1, 4, 7])
def test_token_windows_are_the_concatenated_stream_whatever_the_file_split(
        tmp_path: Path, sizes: list[int], seq_len: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shardstream.service.formats.tokens.UNIT_TOKENS", 9)  # several units per file
    stream = np.random.default_rng(len(sizes)).integers(0, 2**32, sum(sizes), dtype=np.uint32)
    start = 0
    for i, size in enumerate(sizes):
        stream[start:start + size].tofile(tmp_path / f"t{i:02d}.bin")
        start += size
    n = (len(stream) - 1) // seq_len
    if n <= 0:
        with pytest.raises(DatasetNotFound, match="fewer than one window"):
            index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": seq_len, "dtype": "uint32"})
        return
    index = index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": seq_len, "dtype": "uint32"})
    assert index.num_rows == n
    table = read_all(index)
    ids = np.array(table.column("input_ids").to_pylist())
    labels = np.array(table.column("labels").to_pylist())
    windows = np.lib.stride_tricks.sliding_window_view(stream.astype(np.int64), seq_len + 1)[::seq_len][:n]
    assert (ids == windows[:, :-1]).all() and (labels == windows[:, 1:]).all()


def test_npy_files_give_their_dtype_and_a_disagreeing_one_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(30, dtype=np.uint16))
    np.save(tmp_path / "b.npy", np.arange(30, 60, dtype=np.uint16))
    index = index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": 6})
    assert np.array(read_all(index).column("input_ids").to_pylist())[:, 0].tolist() == list(range(0, 54, 6))
    with pytest.raises(UnreadableShard, match=r"a\.npy.*holds uint16.*uint32"):
        index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": 6, "dtype": "uint32"})
    np.save(tmp_path / "c.npy", np.arange(5, dtype=np.int32))
    with pytest.raises(UnreadableShard, match="different dtypes"):
        index_dataset((str(tmp_path),), format="tokens", format_args={"seq_len": 6})


@pytest.mark.parametrize(("args", "message"), [
    ({}, "needs seq_len"),
    ({"seq_len": 0}, "needs seq_len"),
    ({"seq_len": 4, "dtype": "float32"}, "integer dtype"),
    ({"seq_len": 4, "dtype": "nope"}, "not a numpy dtype"),
    ({"seq_len": 4, "dtype": "uint16", "stride": 2}, r"no option\(s\) \['stride'\]"),
    ({"seq_len": 4}, "raw token file: give its dtype"),
])
def test_token_options_are_checked(tmp_path: Path, args: dict[str, object], message: str) -> None:
    np.arange(40, dtype=np.uint16).tofile(tmp_path / "a.bin")
    with pytest.raises(InvalidJobSpec, match=message):
        index_dataset((str(tmp_path),), format="tokens", format_args=args)


def test_token_units_are_named_by_their_window_length(tmp_path: Path) -> None:
    """Two window lengths over one file cut different units: they must never share a cached copy."""
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "a.bin")
    keys = {RowGroupKey(index_dataset((str(tmp_path),), format="tokens",
                                      format_args={"seq_len": L, "dtype": "uint16"}).shards[0], 0, None).digest
            for L in (4, 5)}
    assert len(keys) == 2


# -- webdataset -----------------------------------------------------------------------------------

def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_tar_units_split_anywhere_read_the_same_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tars(str(tmp_path), [9, 4])
    whole = read_all(index_dataset((str(tmp_path),)))
    monkeypatch.setattr(wds, "UNIT_SAMPLES", 2)
    monkeypatch.setattr(wds, "SCANS", wds.KeptScans(8))
    index = index_dataset((str(tmp_path),))
    assert [s.row_group_rows for s in index.shards] == [(2, 2, 2, 2, 1), (2, 2)]
    assert read_all(index).equals(whole)
    assert whole.column("cls").to_pylist() == list(range(13))
    assert whole.column("txt")[3].as_py() == "a picture numbered 3"
    assert index.describe(10) == f"sample 'train/000010' of file://{tmp_path}/shard-0001.tar"


def test_a_missing_field_is_null_and_a_bad_integer_names_the_sample(tmp_path: Path) -> None:
    _tar(tmp_path / "a.tar", [("k0.cls", b"3"), ("k0.txt", b"x"), ("k1.txt", b"only text"),
                              ("sub/k2.cls", b"not a number")])
    index = index_dataset((str(tmp_path / "a.tar"),))
    assert index.schema.names == ["cls", "txt"] and index.num_rows == 3
    storage = StorageReader(SharedReadCounters())
    with pytest.raises(UnreadableShard, match=r"field 'cls' of sample 'sub/k2' of .*a\.tar.*not an integer"):
        get_format("webdataset").read_unit(index.shards[0], 0, None, storage)
    assert get_format("webdataset").read_unit(index.shards[0], 0, ("txt",), storage).column(
        "txt").to_pylist() == ["x", "only text", None]


def test_a_field_twice_in_one_sample_is_refused(tmp_path: Path) -> None:
    _tar(tmp_path / "a.tar", [("k0.cls", b"1"), ("k0.cls", b"2")])
    with pytest.raises(UnreadableShard, match="field 'cls' twice in sample 'k0'"):
        index_dataset((str(tmp_path / "a.tar"),))


def test_a_tar_is_scanned_once_per_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tars(str(tmp_path), [3])
    scans = []
    real = wds.scan_tar
    monkeypatch.setattr(wds, "scan_tar", lambda url, size: scans.append(url) or real(url, size))
    monkeypatch.setattr(wds, "SCANS", wds.KeptScans(8))
    index_dataset((str(tmp_path),))
    index_dataset((str(tmp_path),))
    assert len(scans) == 1
    path = tmp_path / "shard-0000.tar"
    os.utime(path, (1, 1))  # a new version (mtime): scanned again
    index_dataset((str(tmp_path),))
    assert len(scans) == 2


def test_format_detection_and_the_registrys_errors(tmp_path: Path) -> None:
    write_tars(str(tmp_path / "tars"), [2])
    assert detect_format((str(tmp_path / "tars"),), _allow) == "webdataset"
    assert detect_format((str(tmp_path / "tars" / "shard-0000.tar"),), _allow) == "webdataset"
    assert detect_format((str(tmp_path / "tars" / "*.parquet"),), _allow) == "parquet"
    assert detect_format((str(tmp_path / "missing"),), _allow) == "parquet"
    with pytest.raises(InvalidJobSpec, match=r"unknown dataset format 'csv'.*formats are"):
        index_dataset((str(tmp_path),), format="csv")
    with pytest.raises(InvalidJobSpec, match="format 'webdataset' takes no option"):
        index_dataset((str(tmp_path / "tars"),), format="webdataset", format_args={"seq_len": 3})


# -- image folders and manifests ------------------------------------------------------------------

def test_image_folder_lists_in_torchvisions_order_with_labels(tmp_path: Path) -> None:
    from tests.formats import FOLDER_ORDER, _write_imagefolder

    _write_imagefolder(str(tmp_path))
    index = index_dataset((str(tmp_path),), format="imagefolder")
    urls = [url for shard in index.shards for url in shard.layout.urls]
    assert urls == [f"file://{tmp_path}/{relative}" for relative in FOLDER_ORDER]
    table = read_all(index)
    classes = ["ant", "bee", "cow", "dog"]
    assert table.column("label").to_pylist() == [classes.index(r.split("/")[0]) for r in FOLDER_ORDER]
    assert table.column("image")[0].as_py() == (tmp_path / "ant" / "1.png").read_bytes()
    assert read_all(index, ("label",)).column_names == ["label"]  # no bytes fetched for labels alone


def _manifest(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_a_manifest_resolves_relative_urls_and_marks_missing_files_unreadable(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"AAA")
    (tmp_path / "elsewhere.bin").write_bytes(b"E")
    manifest = _manifest(tmp_path / "data" / "m.csv",
                         f"path,label\na.bin,1\nnope.bin,2\n{tmp_path}/elsewhere.bin,3\n")
    index = index_dataset((manifest,), format="manifest", format_args={"url_column": "path"})
    assert index.schema.names == ["path", "label", "bytes"]
    table = read_all(index)
    assert table.column("bytes").to_pylist() == [b"AAA", None, b"E"]
    assert table.column("__unreadable__").to_pylist() == [None, f"file://{tmp_path}/data/nope.bin does not exist", None]
    assert index.describe(1) == f"file file://{tmp_path}/data/nope.bin"


def test_the_files_a_manifest_names_are_pinned_when_the_job_opens(tmp_path: Path) -> None:
    """Each named file's version comes from one listing of its directory; a file rewritten after
    the job opened is DatasetChanged when a unit reads it, not its new bytes."""
    (tmp_path / "data").mkdir()
    for name in ("a.bin", "b.bin"):
        (tmp_path / "data" / name).write_bytes(b"old")
    (tmp_path / "elsewhere.bin").write_bytes(b"E")
    manifest = _manifest(tmp_path / "data" / "m.csv", f"url\na.bin\nb.bin\nnope.bin\n{tmp_path}/elsewhere.bin\n")
    index = index_dataset((manifest,), format="manifest")
    [shard] = index.shards
    assert shard.layout.versions == (local_version(os.stat(tmp_path / "data" / "a.bin")),
                                      local_version(os.stat(tmp_path / "data" / "b.bin")), "",
                                      local_version(os.stat(tmp_path / "elsewhere.bin")))
    assert read_all(index).column("bytes").to_pylist() == [b"old", b"old", None, b"E"]
    (tmp_path / "data" / "b.bin").write_bytes(b"new")
    with pytest.raises(DatasetChanged, match=r"data/b\.bin' changed after the job opened it"):
        read_all(index)


@pytest.mark.parametrize(("text", "args", "message"), [
    ("file,label\nx,1\n", {}, r"no URL column 'url'.*\['file', 'label'\]"),
    ("url,label\n,1\n", {}, "must hold a URL in every row"),
    ("url,bytes\nx,1\n", {}, "already has a column 'bytes'"),
    ("url\nx\n", {"seq_len": 2}, r"no option\(s\) \['seq_len'\]"),
])
def test_bad_manifests_are_refused_by_name(tmp_path: Path, text: str, args: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidJobSpec, match=message):
        index_dataset((_manifest(tmp_path / "m.csv", text),), format="manifest", format_args=args)


def test_every_file_a_manifest_or_folder_names_passes_the_access_check(tmp_path: Path) -> None:
    from shardstream.proto.errors import DatasetNotAllowed
    from shardstream.service.control.access import DatasetAccess

    allowed = tmp_path / "team"
    manifest = _manifest(allowed / "m.csv", f"url\nok.bin\n{tmp_path}/private/secret.bin\n")
    access = DatasetAccess((str(allowed),))
    with pytest.raises(DatasetNotAllowed, match=r"secret\.bin"):
        index_dataset((manifest,), format="manifest", allow=access.check)
    (allowed / "folder" / "cls").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "x.png").write_bytes(b"x")
    (allowed / "folder" / "cls" / "x.png").symlink_to(tmp_path / "private" / "x.png")
    with pytest.raises(DatasetNotAllowed, match=r"x\.png"):
        index_dataset((str(allowed / "folder"),), format="imagefolder", allow=access.check)
