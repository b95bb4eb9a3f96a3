"""Formats read as their reference libraries read them, sample by sample.

WebDataset tars against the `webdataset` package's own pipeline (tarfile_to_samples + decode),
image folders against torchvision's ImageFolder, token files against numpy's np.fromfile and
np.load(mmap_mode="r"): on edge-case datasets (tests/reference_datasets.py), at the format's
read level (index + every unit through the decoders' StorageReader), and a few cases end to end
through a real service. Every difference left on purpose is a refusal, tested here with its
message (docs/reference-fidelity.md).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds

import shardstream.client as client
from shardstream.client import RemoteLoader
from shardstream.proto.errors import DatasetNotFound, SchemaMismatch, UnreadableShard
from shardstream.service.formats import index_dataset
from tests.formats import solid_png
from tests.reference_datasets import (
    ODD_SHARD,
    npy_bytes,
    write_image_folder,
    write_odd_tars,
    write_tar,
    write_token_files,
)
from tests.references import read_all, torchvision_folder

# -- webdataset -----------------------------------------------------------------------------------


def webdataset_samples(urls: list[str]) -> list[dict[str, Any]]:
    """What `webdataset` yields: its tar iterator and its default decoder, shards in our order."""
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples(), wds.decode())
    return list(pipeline)


def same_value(ours: Any, theirs: Any, field: str) -> bool:
    """Ours as a column holds it against webdataset's decoded value: JSON as its text, .npy as bytes."""
    if isinstance(theirs, np.ndarray):
        return bool(np.array_equal(np.load(io.BytesIO(ours)), theirs))
    if field.rsplit(".", 1)[-1] in ("json", "jsn"):
        return bool(json.loads(ours) == theirs)
    return bool(ours == theirs)


def assert_matches_webdataset(directory: str, urls: list[str]) -> int:
    index, rows = read_all(directory, "webdataset")
    theirs = webdataset_samples(urls)
    keys = [key for shard in index.shards for key in shard.layout.members.keys]
    assert keys == [sample["__key__"] for sample in theirs]
    fields = set(index.schema.names)
    assert fields == {k for sample in theirs for k in sample if not k.startswith("__")}
    for key, ours, sample in zip(keys, rows, theirs, strict=True):
        for field in fields:
            if field not in sample:
                assert ours[field] is None, (key, field)
            else:
                assert same_value(ours[field], sample[field], field), (key, field, ours[field], sample[field])
    return len(rows)


def test_odd_member_names_read_as_webdataset_reads_them(tmp_path: Path) -> None:
    urls = write_odd_tars(str(tmp_path))
    assert assert_matches_webdataset(str(tmp_path), urls) == 12
    index, rows = read_all(str(tmp_path), "webdataset")
    keys = [key for shard in index.shards for key in shard.layout.members.keys]
    by_key = dict(zip(keys, rows, strict=True))  # the last 'train/a0' wins: it holds only txt
    assert by_key["train/a1"]["label.cls"] == 7 and by_key["train/a1"]["en.txt"] == "caption \u00e9"
    assert by_key["train/a3"]["txt.gz"] == "zipped caption" and by_key["train/a3"]["cls"] is None
    assert by_key["train/"]["hidden.jpg"] == solid_png(50) and by_key["./b0"]["cls"] == 6
    assert by_key["train/x.y/a2"]["cls"] == 2 and by_key["train/a5"]["weird_ext"] == b"\x00\x01raw"
    assert rows[0]["jpg"] == solid_png(10) and rows[0]["cls"] == 3  # train/a0.JPG, .CLS
    assert {str(index.schema.field(f).type) for f in ("cls", "label.cls", "id")} == {"int64"}
    assert {str(index.schema.field(f).type) for f in ("en.txt", "txt.gz", "json")} == {"string"}


def test_shards_with_different_fields_read_as_their_union_and_a_named_field_must_be_in_every_sample(
        tmp_path: Path) -> None:
    urls = write_odd_tars(str(tmp_path))
    with pytest.raises(SchemaMismatch, match=r"^9 sample\(s\) have no field 'png' that columns= names: 'train/a0' of "):
        read_all(str(tmp_path), "webdataset", columns=("png",))
    with pytest.raises(SchemaMismatch) as refused:
        read_all(str(tmp_path), "webdataset", columns=("jpg", "cls"))
    message = str(refused.value)
    assert "have no field 'jpg'" in message and f"'train/a1' of file://{urls[0]}" in message
    _, only_second = read_all(urls[1], "webdataset", columns=("png", "id"))
    assert [row["id"] for row in only_second] == [100, 101, 102]


def test_gzip_compressed_tars_are_refused_naming_the_file(tmp_path: Path) -> None:
    plain = write_tar(str(tmp_path / "plain" / "s.tar"), ODD_SHARD[3:5])
    for name in ("s.tar.gz", "s.tgz", "looks-plain.tar"):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        with open(plain, "rb") as f, open(folder / name, "wb") as out:
            out.write(gzip.compress(f.read()))
        assert webdataset_samples([str(folder / name)])[0]["cls"] == 3  # webdataset streams it
        with pytest.raises(UnreadableShard, match=rf"{name}' is a gzip-compressed tar: .* decompress it"):
            read_all(str(folder), "webdataset")
        with pytest.raises(UnreadableShard, match="gzip-compressed tar"):  # its name alone says webdataset
            index_dataset((str(folder / name),))


@pytest.mark.parametrize("members, pattern", [
    ([("k.jpg", b"x"), ("k.JPG", b"y")], r"field 'jpg' twice in sample 'k'"),
    ([("k.cls", b"seven")], r"field 'cls' of sample 'k' of .* holds b'seven', not an integer"),
    ([("k.json", b"{nope")], r"field 'json' of sample 'k' .* not JSON"),
    ([("k.txt", b"\xff\xfe")], r"field 'txt' of sample 'k' .* not UTF-8 text"),
], ids=["duplicate-after-lowercasing", "bad-int", "bad-json", "bad-utf8"])
def test_what_webdataset_cannot_decode_is_refused_naming_sample_and_field(tmp_path: Path, members: list[tuple[str, bytes]],
                                                                          pattern: str) -> None:
    url = write_tar(str(tmp_path / "s.tar"), members)
    with pytest.raises(Exception):  # noqa: B017 (webdataset raises ValueError or its DecodingError)
        webdataset_samples([url])
    with pytest.raises(UnreadableShard, match=pattern):
        read_all(str(tmp_path), "webdataset")


# -- image folders --------------------------------------------------------------------------------


@pytest.fixture()
def image_folder(tmp_path: Path) -> str:
    root = str(tmp_path / "root")
    write_image_folder(root, str(tmp_path / "elsewhere"))
    return root


def test_an_image_folder_lists_as_torchvisions_imagefolder(image_folder: str) -> None:
    reference = torchvision_folder().ImageFolder(image_folder)
    index, rows = read_all(image_folder, "imagefolder")
    urls = [url for shard in index.shards for url in shard.layout.urls]
    assert urls == [f"file://{path}" for path, _ in reference.samples]
    assert [row["label"] for row in rows] == [label for _, label in reference.samples]
    for row, (path, _) in zip(rows, reference.samples, strict=True):
        with open(path, "rb") as f:
            assert row["image"] == f.read(), path
    classes = sorted({url.split("/root/", 1)[1].split("/")[0] for url in urls})
    assert reference.classes == classes == [".hidden_class", "Bee", "ant", "cat", "dog"]
    assert any("/dog/linked/" in url for url in urls) and any(url.endswith("3-link.png") for url in urls)


def test_a_symlinked_image_is_read_with_its_targets_version(image_folder: str) -> None:
    """The version recorded at open is the target's: reading through the link is no 'rewritten'."""
    link = os.path.join(image_folder, "ant", "3-link.png")
    os.utime(link, (1, 1), follow_symlinks=False)  # the link's own mtime differs from the target's
    index, rows = read_all(image_folder, "imagefolder")
    urls = [url for shard in index.shards for url in shard.layout.urls]
    assert rows[urls.index(f"file://{link}")]["image"] == Path(link).read_bytes()


def test_a_dangling_link_is_listed_as_torchvision_lists_it_and_is_one_unreadable_sample(image_folder: str) -> None:
    os.symlink("/nonexistent/gone.png", os.path.join(image_folder, "ant", "0-gone.png"))
    reference = torchvision_folder().ImageFolder(image_folder)
    index, rows = read_all(image_folder, "imagefolder")
    urls = [url for shard in index.shards for url in shard.layout.urls]
    assert urls == [f"file://{path}" for path, _ in reference.samples]
    gone = urls.index(f"file://{image_folder}/ant/0-gone.png")
    assert rows[gone]["image"] is None and rows[gone]["__unreadable__"].endswith("0-gone.png does not exist")


def test_a_symlink_cycle_is_refused_naming_the_directory(image_folder: str) -> None:
    os.symlink(os.path.join(image_folder, "dog"), os.path.join(image_folder, "dog", "sub", "loop"))
    with pytest.raises(UnreadableShard, match=r"dog/sub/loop' is a symlink back to .*walked forever"):
        read_all(image_folder, "imagefolder")


def test_an_empty_class_is_refused_as_torchvision_refuses_it(image_folder: str) -> None:
    os.makedirs(os.path.join(image_folder, "elk", "nested"))
    with pytest.raises(FileNotFoundError, match="elk"):
        torchvision_folder().ImageFolder(image_folder)
    with pytest.raises(DatasetNotFound, match=r"class\(es\) \['elk'\] hold no image files"):
        read_all(image_folder, "imagefolder")


# -- token files ----------------------------------------------------------------------------------

SEQ = 8


def numpy_windows(files: list[np.ndarray], seq_len: int) -> list[list[int]]:
    stream = np.concatenate([f.ravel() for f in files]).astype(np.int64)
    return [stream[i * seq_len: i * seq_len + seq_len].tolist() for i in range((len(stream) - 1) // seq_len)]


def test_npy_token_files_read_as_np_load_reads_them(tmp_path: Path) -> None:
    arrays = write_token_files(str(tmp_path))
    _, rows = read_all(str(tmp_path), "tokens", seq_len=SEQ)
    loaded = [np.load(tmp_path / name, mmap_mode="r") for name in sorted(arrays)]
    assert [row["input_ids"] for row in rows] == numpy_windows(loaded, SEQ)


def test_bin_token_files_read_as_np_fromfile_reads_them(tmp_path: Path) -> None:
    for dtype in ("<u2", ">u2", "<u4", "<i4"):
        folder = tmp_path / dtype.replace("<", "le").replace(">", "be")
        folder.mkdir()
        np.arange(1000, 1000 + 77, dtype=dtype).tofile(folder / "x.bin")
        _, rows = read_all(str(folder), "tokens", seq_len=SEQ, dtype=dtype)
        assert [row["labels"][-1] for row in rows] == [w[-1] + 1 for w in numpy_windows(
            [np.fromfile(folder / "x.bin", dtype=dtype)], SEQ)]


def test_an_npy_file_with_trailing_bytes_reads_only_what_its_header_says(tmp_path: Path) -> None:
    (tmp_path / "t.npy").write_bytes(npy_bytes(np.arange(41, dtype="<u2")) + b"\x07\x00" * 16)
    _, rows = read_all(str(tmp_path), "tokens", seq_len=SEQ)
    assert [row["input_ids"] for row in rows] == numpy_windows([np.load(tmp_path / "t.npy", mmap_mode="r")], SEQ)


@pytest.mark.parametrize("array, pattern", [
    (np.asfortranarray(np.arange(40, dtype="<u2").reshape(5, 8)), r"shape \(5, 8\) \(Fortran order\)"),
    (np.arange(40, dtype="<f4"), r"holds float32"),
], ids=["fortran-2d", "float"])
def test_npy_files_that_are_not_one_flat_stream_are_refused(tmp_path: Path, array: np.ndarray, pattern: str) -> None:
    np.save(tmp_path / "t.npy", array)
    with pytest.raises(UnreadableShard, match=pattern):
        read_all(str(tmp_path), "tokens", seq_len=SEQ)


def test_a_truncated_npy_file_is_refused_as_np_load_refuses_it(tmp_path: Path) -> None:
    (tmp_path / "t.npy").write_bytes(npy_bytes(np.arange(41, dtype="<u2"))[:-10])
    with pytest.raises(ValueError):
        np.load(tmp_path / "t.npy", mmap_mode="r")
    with pytest.raises(UnreadableShard, match=r"t\.npy' is truncated: its header says \(41,\)"):
        read_all(str(tmp_path), "tokens", seq_len=SEQ)


# -- end to end -----------------------------------------------------------------------------------


def test_differing_field_sets_through_a_service(service_address: str, tmp_path: Path) -> None:
    """Without columns=, shards of different fields used to fail with an internal Arrow error."""
    urls = write_odd_tars(str(tmp_path))
    with RemoteLoader(service_address, dataset=str(tmp_path), batch_size=12, shuffle=False, format="webdataset",
                      transform="tests.transforms:present_fields", world_size=1, rank=0) as loader:
        present = [fields for batch in loader for fields in batch["present"]]
    assert present == [",".join(sorted(k for k in sample if not k.startswith("__")))
                       for sample in webdataset_samples(urls)]
    with pytest.raises(client.SchemaMismatch, match=r"have no field 'jpg'.*'train/a1' of file://"):
        with RemoteLoader(service_address, dataset=str(tmp_path), batch_size=4, format="webdataset",
                          columns=["jpg"], world_size=1, rank=0) as loader:
            list(loader)


def test_a_symlinked_image_folder_through_a_service(service_address: str, tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    write_image_folder(root, str(tmp_path / "elsewhere"))
    reference = torchvision_folder().ImageFolder(root)
    with RemoteLoader(service_address, dataset=root, batch_size=5, shuffle=False, format="imagefolder",
                      transform="image", transform_args={"size": 4, "mode": "center_crop", "flip": False},
                      world_size=1, rank=0) as loader:
        labels = [label for batch in loader for label in batch["label"].tolist()]
    assert labels == [label for _, label in reference.samples]



def test_a_link_leading_outside_the_allowed_prefixes_is_refused_by_its_target(image_folder: str) -> None:
    from shardstream.proto.errors import DatasetNotAllowed

    def allow(url: str) -> None:
        if "/elsewhere/" in url:
            raise DatasetNotAllowed(f"{url} is outside the allowed prefixes")

    with pytest.raises(DatasetNotAllowed, match=r"elsewhere/.*outside the allowed prefixes"):
        index_dataset((image_folder,), format="imagefolder", allow=allow)
    linked_root = os.path.join(os.path.dirname(image_folder), "elsewhere", "root-link")
    os.symlink(image_folder, linked_root)  # a root reached through a link: its own files are inside it
    for name in ("cat", os.path.join("dog", "linked"), os.path.join("ant", "3-link.png")):
        os.remove(os.path.join(image_folder, name))

    def allow_the_link(url: str) -> None:  # the prefix names the root as reached, not its real path
        if not url.removeprefix("file://").startswith(linked_root):
            raise DatasetNotAllowed(f"{url} is outside the allowed prefixes")

    index = index_dataset((linked_root,), format="imagefolder", allow=allow_the_link)
    assert index.num_rows == len(torchvision_folder().ImageFolder(linked_root))
