"""Each error named for its cause is raised by the code that meets that cause, is still the class
raised for it before (so older handlers catch it), and, raised in a decode actor's batch server,
reaches the client as the same class."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import grpc
import numpy as np
import pytest
from fsspec.implementations.local import LocalFileSystem

from shardstream.client.auth import Token
from shardstream.client.scheduler import StepScheduler
from shardstream.client.state import LoaderState
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.errors import (
    BatchExceedsWindow,
    BatchTooLarge,
    CheckpointMismatch,
    CredentialsError,
    InvalidJobSpec,
    StorageAccessDenied,
    StreamProtocolError,
    UnreadableShard,
    from_rpc_error,
)
from shardstream.proto.job_options import JobOptions
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import Allocate, FrameHeader
from shardstream.service.control.access import DatasetAccess
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.formats import index_dataset
from shardstream.service.node.batch_server import BatchServer
from shardstream.service.node.batching import DecodedBatch, decode_batch
from shardstream.service.node_messages import DecodeJob
from tests.datasets import memory_reader, write_indexed


class DeniedFileSystem(LocalFileSystem):
    """A store that refuses the service's credentials for every call (as a 403 does)."""

    protocol = "denied"
    root_marker = "/"

    def _refuse(self, path: str, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(f"403 Forbidden: {path}")

    info = ls = glob = find = isdir = exists = _refuse


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("causes") / "data")
    write_indexed(directory, [6, 5], row_group_size=2, features=4)
    return directory


def _raised(kind: type[BaseException], base: type[BaseException], call: Any, *args: Any) -> BaseException:
    with pytest.raises(kind) as raised:
        call(*args)
    assert type(raised.value) is kind
    assert isinstance(raised.value, base)
    return raised.value


def test_a_state_of_another_version_is_a_checkpoint_mismatch() -> None:
    error = _raised(CheckpointMismatch, InvalidJobSpec, LoaderState.from_dict, {"version": -1})
    assert "not a shardstream loader state" in str(error)


def test_an_empty_token_file_is_a_credentials_error(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    token = Token.resolve(token_file=str(tmp_path / "token"), environ={})
    assert token is not None
    error = _raised(CredentialsError, InvalidJobSpec, token.metadata)
    assert "is empty" in str(error)


def test_a_batch_larger_than_the_window_is_batch_exceeds_window() -> None:
    scheduler = StepScheduler(0, 4, window_batches=2, window_bytes=100, per_sender=4)
    scheduler.add_sender("a")
    (request,) = scheduler.requests()
    error = _raised(BatchExceedsWindow, BatchTooLarge, scheduler.needs_room, request.sender, request.step, 101)
    assert isinstance(error, InvalidJobSpec)


def test_a_store_refusing_the_service_is_storage_access_denied() -> None:
    fsspec.register_implementation(DeniedFileSystem.protocol, DeniedFileSystem, clobber=True)
    registry = JobRegistry((), DatasetAccess((), protocols=(DeniedFileSystem.protocol,)))
    spec = JobOptions(dataset=("denied:///data",), batch_size=2, shuffle=False, seed=0, drop_last=False, world_size=1)
    error = _raised(StorageAccessDenied, UnreadableShard, registry.open, "denied", spec, 0)
    assert "may not read dataset" in str(error)


@pytest.fixture(scope="module")
def batch_server(data: str) -> Iterator[BatchServer]:
    """A decode actor's batch server on a free port, decoding this module's dataset with a batch
    bound of 64 bytes (its max_message_bytes)."""
    job = DecodeJob.alone("j", index_dataset((data,)), max_batch_bytes=64)
    reader = memory_reader(job.index)

    class Steps:
        def decode_step(self, job_id: str, epoch: int, rank: int, step: int, allocate: Allocate) -> DecodedBatch:
            return decode_batch(job, reader, None, epoch, np.arange(step * 5, step * 5 + 5, dtype=np.int64),
                                FrameHeader(epoch, rank, step), allocate)

        def job_weight(self, job_id: str) -> float:
            return 1.0

        def job_owner(self, job_id: str) -> str | None:
            return None

    server = BatchServer(Steps(), "127.0.0.1")
    yield server
    server.stop()


def _fetch(server: BatchServer, controls: list[pb.FetchControl]) -> grpc.RpcError:
    with grpc.insecure_channel(server.address) as channel:
        call = channel.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                     response_deserializer=None)
        with pytest.raises(grpc.RpcError) as raised:
            list(call(iter(controls), timeout=30))
    return raised.value


def test_a_stream_without_open_is_a_stream_protocol_error_on_both_sides(batch_server: BatchServer) -> None:
    status = _fetch(batch_server, [pb.FetchControl(want=pb.Want(step=0))])
    assert status.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    error = from_rpc_error(status)
    assert type(error) is StreamProtocolError
    assert isinstance(error, InvalidJobSpec)
    assert error.from_service
    assert "must start with an 'open' message" in str(error)


def test_a_batch_past_max_message_bytes_is_batch_too_large_on_both_sides(batch_server: BatchServer) -> None:
    opened = pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id="j", epoch=0, rank=0))
    status = _fetch(batch_server, [opened, pb.FetchControl(want=pb.Want(step=0))])
    assert status.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    error = from_rpc_error(status)
    assert type(error) is BatchTooLarge
    assert isinstance(error, InvalidJobSpec)
    assert "passes 64 bytes" in str(error)
