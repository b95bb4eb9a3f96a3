"""Tar member names split, skipped and grouped as the `webdataset` package does it, on any name."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from webdataset.tariterators import base_plus_ext, group_by_keys, tar_file_expander

from shardstream.proto.errors import UnreadableShard
from shardstream.service.formats.webdataset import scan_tar
from shardstream.service.formats.webdataset_names import decoded_by, field_type, key_and_field

NAMES = st.text(alphabet="ab._/_AJ", min_size=1, max_size=10)


@given(NAMES)
@settings(max_examples=300, deadline=None)
def test_a_name_splits_into_key_and_field_as_base_plus_ext(name: str) -> None:
    key, suffix = base_plus_ext(name)
    assert key_and_field(name) == (None if key is None else (key, suffix.lower()))


@pytest.mark.parametrize("name, expected", [
    ("train/0001.seg.png", ("train/0001", "seg.png")),
    ("a.b/c.JPG", ("a.b/c", "jpg")),
    ("train/.hidden.jpg", ("train/", "hidden.jpg")),
    ("./x.cls", ("./x", "cls")),
    ("README", None),
])
def test_known_names(name: str, expected: tuple[str, str] | None) -> None:
    assert key_and_field(name) == expected


@pytest.mark.parametrize("field, kind", [("cls", "int64"), ("label.cls", "int64"), ("en.txt", "string"),
                                         ("txt.gz", "string"), ("json", "string"), ("class", "binary"),
                                         ("count", "binary"), ("gz", "binary"), ("seg.png", "binary"),
                                         ("__", "string"), ("__x.gz", "string")])
def test_a_field_is_typed_by_its_last_part_as_the_default_decoder_decodes_it(field: str, kind: str) -> None:
    assert str(field_type(field)) == kind
    assert decoded_by("label.cls.gz") == "cls"


def _tar(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, name in enumerate(names):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(bytes([i % 256])))
    return buf.getvalue()


def _webdataset_groups(data: bytes) -> list[tuple[str, list[str]]]:
    files = tar_file_expander([{"url": "x.tar", "stream": io.BytesIO(data)}])
    return [(s["__key__"], [k for k in s if k not in ("__key__", "__url__")]) for s in group_by_keys(files)]


@given(st.lists(st.one_of(NAMES, st.sampled_from(["__meta__", "__x__/a.txt", "k.jpg", "k.JPG", "k.cls"])),
                min_size=1, max_size=8))
@settings(max_examples=120, deadline=None)
def test_a_tar_groups_into_the_samples_webdataset_yields(names: list[str]) -> None:
    data = _tar(names)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "s.tar")
        with open(path, "wb") as f:
            f.write(data)
        try:
            theirs = _webdataset_groups(data)
        except ValueError:  # a field twice in a sample
            with pytest.raises(UnreadableShard, match="twice in sample"):
                scan_tar(path, len(data))
            return
        ours = scan_tar(path, len(data))
    assert [(key, list(ours.fields[a:b])) for key, a, b in
            zip(ours.keys, ours.starts[:-1], ours.starts[1:], strict=True)] == theirs


def test_webdataset_is_the_1_0_line() -> None:
    from importlib.metadata import version

    assert version("webdataset").startswith("1.0.")


def test_a_field_per_sample_is_refused_naming_the_cause(tmp_path: Path) -> None:
    from shardstream.proto.errors import SchemaMismatch
    from shardstream.service.formats import index_dataset

    names = [name for i in range(1100) for name in (f"train/._{i:05d}.jpg", f"train/{i:05d}.jpg")]
    (tmp_path / "s.tar").write_bytes(_tar(names))
    with pytest.raises(SchemaMismatch, match=r"1101 distinct fields .*macOS '\._0001\.jpg' files"):
        index_dataset((str(tmp_path),), format="webdataset")
