"""Which dataset URLs a service with allowed_dataset_prefixes accepts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardstream.proto.errors import DatasetNotAllowed, InvalidJobSpec
from shardstream.service.control.access import DatasetAccess

ACCESS = DatasetAccess(("gs://team-a/train/", "/data/shared", "s3://public"))


@pytest.mark.parametrize("url", [
    "gs://team-a/train", "gs://team-a/train/", "gs://team-a/train/part-0.parquet", "gs://team-a/train/*.parquet",
    "gcs://team-a/train/x.parquet",  # another spelling of the same protocol
    "/data/shared/x.parquet", "file:///data/shared/sub/x.parquet", "s3://public/any/key.parquet",
])
def test_urls_under_a_prefix_are_allowed(url: str) -> None:
    ACCESS.check(url)


@pytest.mark.parametrize("url", [
    "gs://team-a/training/x.parquet",  # shares the prefix's characters, not its path
    "gs://team-a/x.parquet", "gs://team-b/train/x.parquet", "s3://public-private/x.parquet",
    "/data/shared-secret/x.parquet", "/data", "gs://*/train/x.parquet",
])
def test_urls_outside_every_prefix_are_refused(url: str) -> None:
    with pytest.raises(DatasetNotAllowed, match="outside the prefixes"):
        ACCESS.check(url)


@pytest.mark.parametrize("url", [
    "/data/shared/../secret/x.parquet", "gs://team-a/train/../../team-b/x.parquet", "/data/shared/./x.parquet",
])
def test_dot_components_are_refused(url: str) -> None:
    with pytest.raises(DatasetNotAllowed, match=r"'\.' or '\.\.'"):
        ACCESS.check(url)


def test_a_relative_path_is_taken_from_the_service_directory() -> None:
    DatasetAccess((os.getcwd(),)).check("data/x.parquet")
    with pytest.raises(DatasetNotAllowed):
        DatasetAccess(("/elsewhere",)).check("data/x.parquet")


def test_no_prefixes_allow_everything() -> None:
    DatasetAccess(()).check("/data/shared/../anything/x.parquet")


def test_an_unknown_protocol_is_a_bad_spec_not_a_refusal() -> None:
    with pytest.raises(InvalidJobSpec, match="nope://"):
        ACCESS.check("nope://bucket/x")


def test_a_symlink_out_of_an_allowed_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "allowed").mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "x.parquet").write_bytes(b"")
    (tmp_path / "allowed" / "inside.parquet").write_bytes(b"")
    os.symlink(tmp_path / "secret", tmp_path / "allowed" / "link")
    access = DatasetAccess((str(tmp_path / "allowed"),))
    access.check(str(tmp_path / "allowed" / "inside.parquet"))
    with pytest.raises(DatasetNotAllowed, match="outside the prefixes"):
        access.check(str(tmp_path / "allowed" / "link" / "x.parquet"))
    with pytest.raises(DatasetNotAllowed, match="outside the prefixes"):
        access.check(str(tmp_path / "allowed" / "link"))


@pytest.mark.parametrize("url", ["http://example.com/x.parquet", "https://storage.googleapis.com/b/x.parquet",
                                 "ftp://host/x.parquet", "memory://data/shared/x.parquet", "data:,abc",
                                 "zip://x.parquet::/data/shared/a.zip", "github://org:repo@main/x.parquet"])
@pytest.mark.parametrize("access", [DatasetAccess(()), ACCESS], ids=["any prefix", "prefixes"])
def test_a_protocol_that_is_no_dataset_store_is_refused_naming_it(url: str, access: DatasetAccess) -> None:
    protocol = url.split(":", 1)[0]
    with pytest.raises(InvalidJobSpec, match=rf"does not read datasets over {protocol}://; it reads "
                                             r"file://, gs://, s3:// \(its dataset_protocols setting\)"):
        access.check(url)


@pytest.mark.parametrize("url", ["/x.parquet", "local:///x.parquet", "gcs://b/x.parquet", "s3a://b/x.parquet"])
def test_every_spelling_of_a_dataset_protocol_is_read(url: str) -> None:
    DatasetAccess(()).check(url)


def test_the_protocols_are_the_services_to_choose() -> None:
    DatasetAccess((), protocols=("file", "memory")).check("memory://x/y.parquet")
    with pytest.raises(InvalidJobSpec, match="over gs://; it reads file://, memory://"):
        DatasetAccess((), protocols=("file", "memory")).check("gs://b/x.parquet")
