"""Each decode actor's own batch server (FetchBatches): steps planned on the actor, the
DistributedSampler's batches, the same bytes from every actor, typed errors, many streams."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from shardstream.client import RemoteLoader
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.errors import ERROR_METADATA_KEY
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.datasets import oracle_batches, write_indexed

METHOD = FETCH_BATCHES_METHOD
SHARDS = [11, 0, 9, 6]
N = sum(SHARDS)


@pytest.fixture(scope="module")
def service(local_ray: None) -> Iterator[tuple[Service, str]]:
    """A service with two decode actors, each running its batch server."""
    running, port = create_server(ServiceConfig(port=0, num_decoders=2, decoder_cpus=0.5))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def job(service: tuple[Service, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = str(tmp_path_factory.mktemp("batch-server") / "data")
    write_indexed(data, SHARDS)
    with RemoteLoader(service[1], dataset=data, batch_size=3, shuffle=True, seed=4, world_size=2, rank=0,
                      job_name="batch-server") as loader:
        yield loader.job.job_id


def _controls(job_id: str, epoch: int, rank: int, wants: list[tuple[int, int]]) -> Iterator[pb.FetchControl]:
    yield pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id=job_id, epoch=epoch,
                                            rank=rank))
    for step, max_bytes in wants:
        yield pb.FetchControl(want=pb.Want(step=step, max_bytes=max_bytes))


def _fetch(address: str, job_id: str, epoch: int, rank: int, steps: list[int], max_bytes: int = 0) -> list[bytes]:
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                     response_deserializer=None)
        return list(call(_controls(job_id, epoch, rank, [(s, max_bytes) for s in steps]), timeout=60))


def _fetch_when_open(address: str, job_id: str, epoch: int, rank: int, steps: list[int]) -> list[bytes]:
    """The job reaches actors just after OpenJob answers: retry while the actor does not know it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return _fetch(address, job_id, epoch, rank, steps)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:  # type: ignore[attr-defined]
                raise
            time.sleep(0.1)


def test_every_actor_serves_the_planned_steps_with_the_same_bytes(service: tuple[Service, str], job: str) -> None:
    addresses = service[0].pool.batch_addresses()
    assert len(addresses) == 2 and len(set(addresses)) == 2
    expected = oracle_batches(N, 2, 1, 3, True, 4, False, 2)
    answers = [_fetch_when_open(address, job, 2, 1, [3, 0, 4]) for address in addresses]
    assert answers[0] == answers[1]  # decoding is pure: any actor, the same bytes
    batches = [pb.Batch.FromString(message) for message in answers[0]]
    assert [(b.epoch, b.rank, b.step) for b in batches] == [(2, 1, 3), (2, 1, 0), (2, 1, 4)]
    assert [list(b.sample_indices) for b in batches] == [expected[3], expected[0], expected[4]]
    idx = next(t for t in batches[0].tensors if t.name == "idx")
    assert np.frombuffer(idx.data, dtype=idx.dtype).tolist() == expected[3]


def test_a_step_outside_the_epoch_is_refused_by_name(service: tuple[Service, str], job: str) -> None:
    address = service[0].pool.batch_addresses()[0]
    _fetch_when_open(address, job, 0, 0, [0])
    with pytest.raises(grpc.RpcError) as raised:
        _fetch(address, job, 0, 0, [99])
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "step 99 is outside" in raised.value.details()  # type: ignore[attr-defined]
    assert (ERROR_METADATA_KEY, "InvalidJobSpec") in raised.value.trailing_metadata()  # type: ignore[attr-defined]


def test_a_batch_larger_than_the_room_its_want_had_is_answered_with_its_size(service: tuple[Service, str],
                                                                            job: str) -> None:
    """Not an error (the rank's window may have that room later), not the batch: its size. The
    stream goes on, and the step wanted again with room is the batch, whole."""
    address = service[0].pool.batch_addresses()[0]
    (whole,) = _fetch_when_open(address, job, 0, 0, [1])
    too_small, step_2, again = _fetch_with_room(address, job, [(1, 10), (2, 0), (1, len(whole))])
    refused = pb.Batch.FromString(too_small)
    assert (refused.step, refused.needs_room, len(refused.tensors)) == (1, len(whole), 0)
    assert pb.Batch.FromString(step_2).step == 2
    assert again == whole


def _fetch_with_room(address: str, job_id: str, wants: list[tuple[int, int]]) -> list[bytes]:
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                     response_deserializer=None)
        return list(call(_controls(job_id, 0, 0, wants), timeout=60))


def test_an_unknown_job_and_a_stream_without_open_are_refused(service: tuple[Service, str]) -> None:
    address = service[0].pool.batch_addresses()[0]
    with pytest.raises(grpc.RpcError) as raised:
        _fetch(address, "nosuchjob", 0, 0, [0])
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    assert "open it first" in raised.value.details()  # type: ignore[attr-defined]
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(METHOD, request_serializer=pb.FetchControl.SerializeToString)
        with pytest.raises(grpc.RpcError) as raised:
            list(call(iter([pb.FetchControl(want=pb.Want(step=0))]), timeout=30))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


def test_hundreds_of_concurrent_streams_on_one_actor(service: tuple[Service, str], job: str) -> None:
    """No thread per stream: 300 ranks' streams open at once on one actor, each gets its batch."""
    address = service[0].pool.batch_addresses()[0]
    _fetch_when_open(address, job, 0, 0, [0])
    streams = 300

    async def run() -> list[list[int]]:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.stream_stream(METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                         response_deserializer=pb.Batch.FromString)
            opened = asyncio.Event()
            started = 0

            async def one(i: int) -> list[int]:
                nonlocal started
                stream = call(timeout=120)
                await stream.write(next(_controls(job, 0, i % 2, [])))
                started += 1
                if started == streams:
                    opened.set()
                await opened.wait()  # every stream is open before any asks for a batch
                await stream.write(pb.FetchControl(want=pb.Want(step=i % 4)))
                await stream.done_writing()
                return [list(b.sample_indices) async for b in stream]

            return await asyncio.gather(*(one(i) for i in range(streams)))

    got = asyncio.run(run())
    oracle = [oracle_batches(N, 2, r, 3, True, 4, False, 0) for r in (0, 1)]
    assert got == [[oracle[i % 2][i % 4]] for i in range(streams)]
