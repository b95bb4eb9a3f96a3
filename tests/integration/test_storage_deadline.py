"""A store that never answers: OpenJob ends at its deadline with a message naming the dataset,
and the service keeps serving other requests meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import fsspec
import grpc
import pytest
from fsspec.spec import AbstractFileSystem

from shardstream.proto import PROTOCOL_VERSION
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc


class HangingFileSystem(AbstractFileSystem):
    """Every metadata call blocks until released, like a store behind a dropped route."""

    protocol = "hang"
    released = threading.Event()

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.released.wait(60)
        raise FileNotFoundError(path)


@pytest.fixture
def hanging_store() -> Iterator[None]:
    fsspec.register_implementation("hang", HangingFileSystem, clobber=True)
    HangingFileSystem.released.clear()
    yield
    HangingFileSystem.released.set()  # lets the call left running finish


def test_open_job_on_a_store_that_never_answers(service_address: str, hanging_store: None) -> None:
    with grpc.insecure_channel(service_address) as channel:
        stub = pb_grpc.LoaderStub(channel)
        request = pb.OpenJobRequest(
            protocol_version=PROTOCOL_VERSION, job_name="hanging-store", rank=0,
            spec=pb.JobSpec(dataset=["hang://bucket/train"], batch_size=4, world_size=1))
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            stub.OpenJob(request, timeout=3.0)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "hang://bucket/train" in (caught.value.details() or "")
        assert time.monotonic() - started < 3.0
        # The call is still stuck in the store; the service answers everything else.
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=5.0)
        assert status.protocol_version == PROTOCOL_VERSION
