"""gs:// datasets through a real GCS API server (fake-gcs-server), end to end.

The emulator is an autouse module fixture, so it starts before the module's Ray job
(conftest's `local_ray`), which forwards its environment to the decode actors.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pytest

from shardstream.client import DatasetChanged, DatasetNotFound, RemoteLoader
from shardstream.service.dataset import stat_file
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader
from tests.datasets import oracle_batches, write_images, write_indexed
from tests.gcs_emulator import GcsEmulator, running_gcs_emulator

BUCKET = "shardstream-test"
SHARDS = [9, 0, 14, 3]


@pytest.fixture(scope="module", autouse=True)
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    local = tmp_path_factory.mktemp("gcs-src")
    write_indexed(f"{local}/train", SHARDS)
    write_images(f"{local}/images", [6, 6])
    with running_gcs_emulator() as emulator:
        emulator.create_bucket(BUCKET)
        for path in sorted(glob.glob(f"{local}/*/*.parquet")):
            relative = os.path.relpath(path, local)
            emulator.upload(path, f"gs://{BUCKET}/{relative}")
        yield emulator


@pytest.mark.parametrize("dataset", [f"gs://{BUCKET}/train/", f"gs://{BUCKET}/train/*.parquet"])
def test_gs_dataset_in_distributed_sampler_order(service_address: str, dataset: str) -> None:
    n = sum(SHARDS)
    for rank in (0, 1):
        with RemoteLoader(service_address, dataset=dataset, batch_size=4, seed=5, world_size=2,
                          rank=rank) as loader:
            loader.set_epoch(2)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(n, 2, rank, 4, True, 5, False, 2)


def test_gs_images_decode(service_address: str) -> None:
    with RemoteLoader(service_address, dataset=f"gs://{BUCKET}/images", batch_size=5, world_size=1, rank=0,
                      transform="image", transform_args={"size": 24}, columns=["image", "label"]) as loader:
        batches = list(loader)
    assert [tuple(b["image"].shape) for b in batches] == [(5, 3, 24, 24), (5, 3, 24, 24), (2, 3, 24, 24)]


def test_missing_gs_path(service_address: str) -> None:
    with pytest.raises(DatasetNotFound, match=f"gs://{BUCKET}/nope"):
        RemoteLoader(service_address, dataset=f"gs://{BUCKET}/nope/", batch_size=4, world_size=1, rank=0)


def test_an_object_overwritten_after_the_job_opened_is_dataset_changed(service_address: str, gcs: GcsEmulator,
                                                                       tmp_path: object) -> None:
    """The generation the job pinned is checked against what each decoder's open fetched."""
    local = f"{tmp_path}/pinned"
    [path] = write_indexed(local, [8])
    emulator, url = gcs, f"gs://{BUCKET}/pinned/part-00000.parquet"
    emulator.upload(path, url)
    with RemoteLoader(service_address, dataset=url, batch_size=4, world_size=1, rank=0, timeout=60) as loader:
        write_indexed(local, [8])  # another file, the same name
        emulator.upload(path, url)  # a new generation
        with pytest.raises(DatasetChanged, match=rf"{url}' changed after the job opened it \(it was "
                           r"'generation=\d+', it is now 'generation=\d+'"):
            list(loader)


def test_an_object_replaced_between_its_open_and_its_reads_is_never_read(gcs: GcsEmulator, tmp_path: object) -> None:
    """A unit's reads name the generation the job pinned: an object replaced after the open's
    check is DatasetChanged at the next read, not the new object's bytes."""
    local = f"{tmp_path}/a.bin"
    url = f"gs://{BUCKET}/pinned-read/a.bin"
    with open(local, "wb") as f:
        f.write(b"first " * 100)
    gcs.upload(local, url)
    _, _, _, version = stat_file(url, "file")
    reader = StorageReader(SharedReadCounters())
    with reader.open(url, version) as pinned:
        assert pinned.read(6) == b"first "
        with open(local, "wb") as f:
            f.write(b"SECOND" * 100)
        gcs.upload(local, url)  # a new generation, between the open and the next read
        with pytest.raises(DatasetChanged, match=r"generation \d+ is no longer served"):
            pinned.read(6)
