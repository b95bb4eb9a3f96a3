"""A batch server and the decode actor it serves meet through one interface: it asks a
StepSource for steps, weights and owners, and hands back what it served (take_served). Real gRPC
on a free port; the steps come from an in-process source, no Ray."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import Allocate, FrameHeader
from shardstream.service.formats import index_dataset
from shardstream.service.node.batch_server import BatchServer
from shardstream.service.node.batching import DecodedBatch, decode_batch
from shardstream.service.node_messages import DecodeJob
from tests.datasets import memory_reader, write_indexed

BATCH = 4


class Steps:
    """One job of 20 rows, batches of 4 in order; records what the server asked."""

    def __init__(self, directory: str) -> None:
        self.job = DecodeJob.alone("j", index_dataset((directory,)))
        self.reader = memory_reader(self.job.index)
        self.asked: list[tuple[str, int, int, int]] = []
        self.weights: list[str] = []
        self.lock = threading.Lock()

    def decode_step(self, job_id: str, epoch: int, rank: int, step: int, allocate: Allocate) -> DecodedBatch:
        with self.lock:
            self.asked.append((job_id, epoch, rank, step))
        indices = np.arange(step * BATCH, step * BATCH + BATCH, dtype=np.int64)
        return decode_batch(self.job, self.reader, None, epoch, indices, FrameHeader(epoch, rank, step), allocate)

    def job_weight(self, job_id: str) -> float:
        with self.lock:
            self.weights.append(job_id)
        return 1.0

    def job_owner(self, job_id: str) -> str | None:
        return None


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[BatchServer, Steps]]:
    write_indexed(str(tmp_path / "data"), [20], row_group_size=5)
    steps = Steps(str(tmp_path / "data"))
    server = BatchServer(steps, "127.0.0.1")
    yield server, steps
    server.stop()


def _fetch(server: BatchServer, epoch: int, rank: int, wants: list[pb.Want]) -> list[bytes]:
    controls = [pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id="j", epoch=epoch,
                                                  rank=rank))]
    controls += [pb.FetchControl(want=want) for want in wants]
    with grpc.insecure_channel(server.address) as channel:
        call = channel.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                     response_deserializer=None)
        return list(call(iter(controls), timeout=30))


def test_steps_come_from_the_source_and_what_was_sent_is_handed_back_once(
        served: tuple[BatchServer, Steps]) -> None:
    server, steps = served
    assert len(_fetch(server, 2, 1, [pb.Want(step=0, data_stall=0.25), pb.Want(step=3)])) == 2
    assert len(_fetch(server, 2, 0, [pb.Want(step=1)])) == 1
    assert sorted(steps.asked) == [("j", 2, 0, 1), ("j", 2, 1, 0), ("j", 2, 1, 3)]
    assert "j" in steps.weights  # each decode queued at the job's weight
    report = server.take_served()
    job = report.jobs["j"]
    assert (job.batches, job.samples) == (3, 3 * BATCH) and job.nbytes > 0
    assert job.positions == {1: (2, 3), 0: (2, 1)}
    assert set(job.stalls) == {1} and job.stalls[1][0] == 0.25
    assert report.queued == 0 and report.streaming == {} and report.refusals == {}
    again = server.take_served()  # taken: the next report starts from nothing
    assert again.jobs == {} and again.queued == 0
