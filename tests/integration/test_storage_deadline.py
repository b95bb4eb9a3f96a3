"""A store that never answers: OpenJob ends at its deadline with a message naming the dataset,
the service keeps serving other requests meanwhile, and the calls it leaves running are capped."""

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
from shardstream.proto.errors import StorageBusy, from_rpc_error
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server


class HangingFileSystem(AbstractFileSystem):
    """Every metadata call blocks until released, like a store behind a dropped route."""

    protocol = "hang"
    released = threading.Event()

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        self.released.wait(60)
        raise FileNotFoundError(path)


# The service reads datasets over the protocols it is told to (dataset_protocols): this store's too.
PROTOCOLS = ("file", "hang")


@pytest.fixture(scope="module")
def service(local_ray: None) -> Iterator[tuple[Service, str]]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                dataset_protocols=PROTOCOLS))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


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


@pytest.fixture
def one_abandoned_call_allowed(local_ray: None) -> Iterator[tuple[Service, str]]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                max_abandoned_storage_calls=1, dataset_protocols=PROTOCOLS))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


def test_calls_left_on_a_dead_store_are_capped(one_abandoned_call_allowed: tuple[Service, str],
                                               hanging_store: None) -> None:
    """Opening again and again on a store that never answers does not gather threads without end."""
    running, address = one_abandoned_call_allowed

    def open_job(stub: pb_grpc.LoaderStub, name: str, timeout: float) -> pb.OpenJobResponse:
        return stub.OpenJob(pb.OpenJobRequest(
            protocol_version=PROTOCOL_VERSION, job_name=name, rank=0,
            spec=pb.JobSpec(dataset=["hang://bucket/train"], batch_size=4, world_size=1)), timeout=timeout)

    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.LoaderStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            open_job(stub, "first", 2.0)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert running.storage_calls.abandoned == 1
        assert running.metrics.prometheus.get_sample_value("shardstream_storage_calls_abandoned") == 1

        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            open_job(stub, "second", 30.0)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "hang://bucket/train" in (caught.value.details() or "")
        assert isinstance(from_rpc_error(caught.value), StorageBusy)
        assert time.monotonic() - started < 15.0  # refused at once, not held to its deadline

        HangingFileSystem.released.set()  # the store answers at last: the call left running ends
        deadline = time.monotonic() + 30
        while running.storage_calls.abandoned and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.storage_calls.abandoned == 0
        assert running.metrics.prometheus.get_sample_value("shardstream_storage_calls_abandoned") == 0
        with pytest.raises(grpc.RpcError) as caught:
            open_job(stub, "third", 10.0)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # served again, and the store's answer
