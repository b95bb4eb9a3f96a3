"""s3:// datasets through a real S3 API server (moto's server mode), end to end.

The server is an autouse module fixture, so it starts before the module's Ray job
(conftest's `local_ray`), which forwards its environment to the decode actors.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pytest

from shardstream.client import DatasetNotFound, RemoteLoader
from tests.datasets import oracle_batches, write_images, write_indexed
from tests.s3_server import S3Server, running_s3_server

BUCKET = "shardstream-test"
SHARDS = [7, 0, 12, 5]


@pytest.fixture(scope="module", autouse=True)
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    local = tmp_path_factory.mktemp("s3-src")
    write_indexed(f"{local}/train", SHARDS)
    write_images(f"{local}/images", [6, 6])
    with running_s3_server() as server:
        fs = server.filesystem()
        fs.mkdir(BUCKET)
        for path in sorted(glob.glob(f"{local}/*/*.parquet")):
            fs.put_file(path, f"{BUCKET}/{os.path.relpath(path, local)}")
        yield server


@pytest.mark.parametrize("dataset", [f"s3://{BUCKET}/train/", f"s3://{BUCKET}/train/*.parquet"])
def test_s3_dataset_in_distributed_sampler_order(service_address: str, dataset: str) -> None:
    n = sum(SHARDS)
    for rank in (0, 1):
        with RemoteLoader(service_address, dataset=dataset, batch_size=4, seed=3, world_size=2,
                          rank=rank) as loader:
            loader.set_epoch(1)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(n, 2, rank, 4, True, 3, False, 1)


def test_s3_images_decode(service_address: str) -> None:
    with RemoteLoader(service_address, dataset=f"s3://{BUCKET}/images", batch_size=5, world_size=1, rank=0,
                      transform="image", transform_args={"size": 24}, columns=["image", "label"]) as loader:
        batches = list(loader)
    assert [tuple(b["image"].shape) for b in batches] == [(5, 3, 24, 24), (5, 3, 24, 24), (2, 3, 24, 24)]


def test_missing_s3_path(service_address: str) -> None:
    with pytest.raises(DatasetNotFound, match=f"s3://{BUCKET}/nope"):
        RemoteLoader(service_address, dataset=f"s3://{BUCKET}/nope/", batch_size=4, world_size=1, rank=0)
