"""A service with allowed_dataset_prefixes reads what lies under them and refuses the rest,
naming the dataset, before listing anything, and goes on serving."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from shardstream.client import DatasetNotAllowed, RemoteLoader
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import create_server
from tests.datasets import oracle_batches, write_indexed


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    base = tmp_path_factory.mktemp("access")
    write_indexed(f"{base}/team-a/train", [7, 5])
    write_indexed(f"{base}/team-a-private/train", [4])
    return f"{base}/team-a", f"{base}/team-a-private"


@pytest.fixture(scope="module")
def address(local_ray: None, roots: tuple[str, str]) -> Iterator[str]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                allowed_dataset_prefixes=(roots[0],)))
    yield f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.mark.parametrize("escape", ["{private}/train", "{allowed}/../team-a-private/train",
                                    "{allowed}/train/../../team-a-private/train/*.parquet"])
def test_datasets_outside_the_prefixes_are_refused(address: str, roots: tuple[str, str], escape: str) -> None:
    dataset = escape.format(allowed=roots[0], private=roots[1])
    with pytest.raises(DatasetNotAllowed, match="team-a-private") as caught:
        RemoteLoader(address, dataset=dataset, batch_size=4, world_size=1, rank=0)
    assert caught.value.from_service and caught.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_datasets_under_a_prefix_are_served(address: str, roots: tuple[str, str]) -> None:
    for dataset in (f"{roots[0]}/train", f"file://{roots[0]}/train/*.parquet"):
        with RemoteLoader(address, dataset=dataset, batch_size=4, seed=1, world_size=1, rank=0) as loader:
            assert [b["idx"].tolist() for b in loader] == oracle_batches(12, 1, 0, 4, True, 1, False, 0)
