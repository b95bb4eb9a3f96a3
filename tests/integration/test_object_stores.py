"""gs:// and s3:// datasets through real API servers (fake-gcs-server; moto's server mode), end to
end: the same tests for each store.

Both servers are one autouse module fixture, so they start before the module's Ray job
(conftest's `local_ray`), which forwards their environment to the decode actors.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from shardstream.client import DatasetChanged, DatasetNotFound, RemoteLoader
from shardstream.service.dataset import stat_file
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader
from tests.datasets import oracle_batches, write_images, write_indexed
from tests.gcs_emulator import running_gcs_emulator
from tests.s3_server import running_s3_server

BUCKET = "shardstream-test"
SHARDS = [9, 0, 14, 3]


@dataclass(frozen=True)
class Store:
    scheme: str
    upload: Callable[[str, str], None]  # (local path, URL of this store)
    identity: str  # a pattern of the identity a job pins (file_identity.py)
    pinned: str  # a pattern of the version a pinned read names (node/pinned_object.py)

    def url(self, key: str) -> str:
        return f"{self.scheme}://{BUCKET}/{key}"


@pytest.fixture(scope="module", autouse=True)
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Store]]:
    local = tmp_path_factory.mktemp("stores-src")
    write_indexed(f"{local}/train", SHARDS)
    write_images(f"{local}/images", [6, 6])
    with running_gcs_emulator() as gcs, running_s3_server() as s3:
        gcs.create_bucket(BUCKET)
        s3_files = s3.filesystem()
        s3_files.mkdir(BUCKET)
        found = {
            "gs": Store("gs", gcs.upload, r"generation=\d+", r"generation \d+"),
            "s3": Store("s3", lambda path, url: s3_files.put_file(path, url.removeprefix("s3://")),
                        r'ETag="[0-9a-f]+"', r'ETag "[0-9a-f]+"'),
        }
        for path in sorted(glob.glob(f"{local}/*/*.parquet")):
            for store in found.values():
                store.upload(path, store.url(os.path.relpath(path, local)))
        yield found


STORES = pytest.mark.parametrize("scheme", ["gs", "s3"])


@STORES
@pytest.mark.parametrize("dataset", ["train/", "train/*.parquet"])
def test_a_dataset_in_distributed_sampler_order(service_address: str, stores: dict[str, Store], scheme: str,
                                                dataset: str) -> None:
    n = sum(SHARDS)
    for rank in (0, 1):
        with RemoteLoader(service_address, dataset=stores[scheme].url(dataset), batch_size=4, seed=5, world_size=2,
                          rank=rank) as loader:
            loader.set_epoch(2)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(n, 2, rank, 4, True, 5, False, 2)


@STORES
def test_images_decode(service_address: str, stores: dict[str, Store], scheme: str) -> None:
    with RemoteLoader(service_address, dataset=stores[scheme].url("images"), batch_size=5, world_size=1, rank=0,
                      transform="image", transform_args={"size": 24}, columns=["image", "label"]) as loader:
        batches = list(loader)
    assert [tuple(b["image"].shape) for b in batches] == [(5, 3, 24, 24), (5, 3, 24, 24), (2, 3, 24, 24)]


@STORES
def test_a_missing_path(service_address: str, stores: dict[str, Store], scheme: str) -> None:
    url = stores[scheme].url("nope/")
    with pytest.raises(DatasetNotFound, match=url.rstrip("/")):
        RemoteLoader(service_address, dataset=url, batch_size=4, world_size=1, rank=0)


@STORES
def test_an_object_overwritten_after_the_job_opened_is_dataset_changed(
        service_address: str, stores: dict[str, Store], scheme: str, tmp_path: object) -> None:
    """The version the job pinned is checked against what each decoder's open fetched."""
    store = stores[scheme]
    local = f"{tmp_path}/pinned"
    [path] = write_indexed(local, [8])
    url = store.url("pinned/part-00000.parquet")
    store.upload(path, url)
    with RemoteLoader(service_address, dataset=url, batch_size=4, world_size=1, rank=0, timeout=60) as loader:
        write_indexed(local, [9])  # another file (other bytes: an S3 ETag is their digest), the same name
        store.upload(path, url)  # a new version
        with pytest.raises(DatasetChanged, match=rf"{url}' changed after the job opened it \(it was "
                           rf"'{store.identity}', it is now '{store.identity}'"):
            list(loader)


@STORES
def test_an_object_replaced_between_its_open_and_its_reads_is_never_read(stores: dict[str, Store], scheme: str,
                                                                         tmp_path: object) -> None:
    """A unit's reads name the version the job pinned: an object replaced after the open's check
    is DatasetChanged at the next read, not the new object's bytes."""
    store = stores[scheme]
    local, url = f"{tmp_path}/a.bin", store.url("pinned-read/a.bin")
    with open(local, "wb") as f:
        f.write(b"first " * 100)
    store.upload(local, url)
    _, _, _, version = stat_file(url, "file")
    reader = StorageReader(SharedReadCounters())
    with reader.open(url, version) as pinned:
        assert pinned.read(6) == b"first "
        with open(local, "wb") as f:
            f.write(b"SECOND" * 100)
        store.upload(local, url)  # a new version, between the open and the next read
        with pytest.raises(DatasetChanged, match=rf"\({store.pinned} is no longer served\)"):
            pinned.read(6)


def test_an_s3_object_in_a_versioned_bucket_is_read_at_its_pinned_version(tmp_path: object) -> None:
    """Where S3 keeps versions, the job pins the VersionId and a read after a replacement still
    gives the pinned version's bytes."""
    with running_s3_server() as s3:
        files = s3.filesystem()
        files.mkdir("versioned")
        files.make_bucket_versioned("versioned")
        files.pipe_file("versioned/a.bin", b"first " * 100)
        url = "s3://versioned/a.bin"
        _, _, _, version = stat_file(url, "file")
        assert version.startswith("VersionId=")
        with StorageReader(SharedReadCounters()).open(url, version) as pinned:
            assert pinned.read(6) == b"first "
            files.pipe_file("versioned/a.bin", b"SECOND" * 100)
            assert pinned.read(6) == b"first "
