"""Guarantee 6: nothing is sent to a rank beyond its window of batches and bytes not yet consumed.

A decoder sends one batch per step the rank wants, and the rank wants a step
only while its window has room (client/scheduler.py; the property test in
tests/unit/test_scheduler.py covers the window's arithmetic). Here, against
real decoders: a decoder sends exactly what was wanted, however long one
waits; a batch bigger than the window is a clear error; and nothing in the
client outlives a batch's place in the window.
"""

from __future__ import annotations

import queue
import threading
import weakref

import grpc
import pytest
import torch

from shardstream.client import InvalidJobSpec, RemoteLoader
from shardstream.client.scheduler import StepScheduler
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import BatchView, parse_batch
from tests.datasets import write_indexed

FEATURES = 1000  # 4 KB per row of float32
BATCH = 8        # ~32 KB per batch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("wide"))
    write_indexed(directory, [200], features=FEATURES, row_group_size=50)
    return directory


def open_raw_fetch(address: str, job_id: str
                   ) -> tuple[queue.Queue[pb.FetchControl | None], queue.Queue[BatchView], grpc.Channel]:
    """A FetchBatches stream to one decoder, driven by hand: put wants, read what comes back."""
    channel = grpc.insecure_channel(address)
    controls: queue.Queue[pb.FetchControl | None] = queue.Queue()
    controls.put(pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id=job_id, epoch=0,
                                                   rank=0)))
    received: queue.Queue[BatchView] = queue.Queue()

    def requests():  # type: ignore[no-untyped-def]
        while (item := controls.get()) is not None:
            yield item

    call = channel.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                 response_deserializer=parse_batch)(requests())

    def pump() -> None:
        try:
            for view in call:
                received.put(view)
        except grpc.RpcError:
            pass

    threading.Thread(target=pump, daemon=True).start()
    return controls, received, channel


def drain(received: queue.Queue[BatchView], quiet_s: float = 1.5) -> list[BatchView]:
    out = []
    while True:
        try:
            out.append(received.get(timeout=quiet_s))
        except queue.Empty:
            return out


def want(step: int) -> pb.FetchControl:
    return pb.FetchControl(want=pb.Want(step=step))


def test_a_decoder_sends_exactly_the_steps_wanted(service_address: str, dataset: str) -> None:
    loader = RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, shuffle=False, world_size=1,
                          rank=0, job_name="wanted")
    controls, received, channel = open_raw_fetch(loader.job.batch_servers[0], loader.job.job_id)
    try:
        for step in (0, 1, 2):
            controls.put(want(step))
        assert [v.step for v in drain(received)] == [0, 1, 2]  # nothing more, however long we wait
        controls.put(want(7))
        assert [v.step for v in drain(received)] == [7]  # one want, exactly one more batch
    finally:
        controls.put(None)
        channel.close()
        loader.close()


def test_window_smaller_than_one_batch_is_a_clear_error(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, world_size=1, rank=0,
                      prefetch_bytes=1000) as loader, pytest.raises(InvalidJobSpec, match="prefetch_bytes"):
        next(iter(loader))


def test_a_batch_is_dropped_before_its_room_goes_back(service_address: str, dataset: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the client outlives a batch's place in the window (its step marked consumed),
    so the window bounds the batches alive."""
    last: list[weakref.ref[torch.Tensor]] = []
    alive_at_release: list[bool] = []
    consumed = StepScheduler.consumed

    def checked_consumed(self: StepScheduler, step: int) -> None:
        alive_at_release.append(last[-1]() is not None)
        consumed(self, step)

    monkeypatch.setattr(StepScheduler, "consumed", checked_consumed)
    loader = RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, shuffle=False, world_size=1,
                          rank=0, prefetch=2)
    try:
        for batch in loader:
            last.append(weakref.ref(batch["x"]))
            del batch
    finally:
        loader.close()
    assert len(alive_at_release) >= len(loader) - 1
    assert not any(alive_at_release)
