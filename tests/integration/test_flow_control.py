"""Guarantee 6: the service never has more than the stream's window sent and not consumed."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest
import torch

from shardstream.client import RemoteLoader
from shardstream.proto import PROTOCOL_VERSION, STREAM_BATCHES_METHOD
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import BatchView, parse_batch
from shardstream.service.config import ServiceConfig
from shardstream.service.server import create_server
from tests.datasets import write_indexed

FEATURES = 1000  # 4 KB per row of float32
BATCH = 8        # ~32 KB per batch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("wide"))
    write_indexed(directory, [200], features=FEATURES, row_group_size=50)
    return directory


def open_raw_stream(address: str, job_id: str, prefetch: int, window_bytes: int
                    ) -> tuple[queue.Queue[pb.StreamControl | None], queue.Queue[BatchView], grpc.Channel]:
    channel = grpc.insecure_channel(address)
    controls: queue.Queue[pb.StreamControl | None] = queue.Queue()
    controls.put(pb.StreamControl(open=pb.StreamBatchesRequest(
        protocol_version=PROTOCOL_VERSION, job_id=job_id, epoch=0, rank=0, prefetch=prefetch,
        window_bytes=window_bytes)))
    received: queue.Queue[BatchView] = queue.Queue()

    def requests():  # type: ignore[no-untyped-def]
        while (item := controls.get()) is not None:
            yield item

    call = channel.stream_stream(STREAM_BATCHES_METHOD, request_serializer=pb.StreamControl.SerializeToString,
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


@pytest.mark.parametrize(("prefetch", "window_batches"), [(3, 100), (50, 2)])
def test_unconsumed_batches_and_bytes_stay_within_the_window(service_address: str, dataset: str,
                                                            prefetch: int, window_batches: int) -> None:
    loader = RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, shuffle=False, world_size=1,
                          rank=0, job_name=f"window-{prefetch}")
    batch_bytes = BATCH * (FEATURES * 4 + 8 + 4) + 200  # tensors plus framing, generously
    window_bytes = window_batches * batch_bytes
    controls, received, channel = open_raw_stream(service_address, loader.job.job_id, prefetch, window_bytes)
    try:
        limit = min(prefetch, window_batches)
        first = drain(received)
        assert len(first) == limit  # the service stops at the window, however long we wait
        assert sum(v.nbytes for v in first) <= window_bytes
        controls.put(pb.StreamControl(credit=pb.Credit(consumed_step=first[0].step)))
        second = drain(received)
        assert [v.step for v in second] == [limit]  # one credit, exactly one more batch
    finally:
        controls.put(None)
        channel.close()
        loader.close()


def test_window_smaller_than_one_batch_is_a_clear_error(service_address: str, dataset: str) -> None:
    from shardstream.client import InvalidJobSpec

    with RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, world_size=1, rank=0,
                      prefetch_bytes=1000) as loader, pytest.raises(InvalidJobSpec, match="prefetch_bytes"):
        next(iter(loader))


@pytest.mark.parametrize(("prefetch", "window_bytes"), [(-1, 0), (0, -1)])
def test_a_negative_window_is_invalid_argument(service_address: str, dataset: str, prefetch: int,
                                               window_bytes: int) -> None:
    """Found by test_fuzz: prefetch=-1 reached the stream and ended in INTERNAL."""
    with RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, world_size=1, rank=0) as loader:
        job_id = loader.job.job_id
    request = pb.StreamControl(open=pb.StreamBatchesRequest(
        protocol_version=PROTOCOL_VERSION, job_id=job_id, epoch=0, rank=0, prefetch=prefetch,
        window_bytes=window_bytes))
    with grpc.insecure_channel(service_address) as channel, pytest.raises(grpc.RpcError) as caught:
        list(channel.stream_stream(STREAM_BATCHES_METHOD, request_serializer=pb.StreamControl.SerializeToString,
                                   response_deserializer=parse_batch)(iter([request]), timeout=30))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must be >= 0" in (caught.value.details() or "")


@pytest.fixture(scope="module")
def relay_address(local_ray: None) -> Iterator[str]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.5, data_plane="relay"))
    yield f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.mark.parametrize("plane", ["direct", "relay"])
def test_a_batch_is_dropped_before_its_credit_goes_back(service_address: str, relay_address: str, dataset: str,
                                                        monkeypatch: pytest.MonkeyPatch, plane: str) -> None:
    """Nothing in the client outlives a batch's place in the window (the relay's credit, the direct
    plane's consumed step), so the window bounds the batches alive."""
    import weakref

    from shardstream.client.prefetcher import StreamPrefetcher
    from shardstream.client.scheduler import StepScheduler

    last: list[weakref.ref[torch.Tensor]] = []
    alive_at_credit: list[bool] = []
    owner, method = (StreamPrefetcher, "credit") if plane == "relay" else (StepScheduler, "consumed")
    credit = getattr(owner, method)

    def checked_credit(self: object, consumed_step: int) -> None:
        alive_at_credit.append(last[-1]() is not None)
        credit(self, consumed_step)

    monkeypatch.setattr(owner, method, checked_credit)
    loader = RemoteLoader(relay_address if plane == "relay" else service_address, dataset=dataset,
                          batch_size=BATCH, shuffle=False, world_size=1, rank=0, prefetch=2)
    try:
        assert bool(loader.job.batch_servers) is (plane == "direct")
        for batch in loader:
            last.append(weakref.ref(batch["x"]))
            del batch
    finally:
        loader.close()
    assert len(alive_at_credit) >= len(loader) - 1
    assert not any(alive_at_credit)
