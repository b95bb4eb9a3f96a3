"""Guarantee 6: nothing is sent to a rank beyond its window of batches and bytes not yet consumed.

A decoder sends one batch per step the rank wants, and the rank wants a step
only while its window has room (client/scheduler.py; the property test in
tests/unit/client/test_scheduler.py covers the window's arithmetic). Here, against
real decoders: a decoder sends exactly what was wanted, up to the stream's
end; the bytes a rank holds undelivered for a stalled loop stay within
`prefetch_bytes`, measured on the batches themselves; a batch bigger than the
window is a clear error; and nothing in the client outlives a batch's place in
the window.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from shardstream.client import BatchExceedsWindow, RemoteLoader
from shardstream.client.fetcher import DirectPrefetcher
from shardstream.client.scheduler import StepScheduler
from shardstream.client.tensors import batch_nbytes
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import BatchView, parse_batch
from tests.datasets import oracle_batches, write_indexed

FEATURES = 1000  # 4 KB per row of float32
BATCH = 8        # ~32 KB per batch
BATCH_BYTES = BATCH * (FEATURES * 4 + 8 + 4)  # x (float32 x 1000), idx (int64), y (int32)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("wide"))
    write_indexed(directory, [200], features=FEATURES, row_group_size=50)
    return directory


def open_raw_fetch(address: str, job_id: str
                   ) -> tuple[queue.Queue[pb.FetchControl | None], list[BatchView], threading.Thread, grpc.Channel]:
    """A FetchBatches stream to one decoder, driven by hand: put wants (None ends the requests),
    and once the thread has ended, read everything the decoder sent until it ended the stream."""
    channel = grpc.insecure_channel(address)
    controls: queue.Queue[pb.FetchControl | None] = queue.Queue()
    controls.put(pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id=job_id, epoch=0,
                                                   rank=0)))
    received: list[BatchView] = []

    def requests():  # type: ignore[no-untyped-def]
        while (item := controls.get()) is not None:
            yield item

    call = channel.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                 response_deserializer=parse_batch)(requests())

    def pump() -> None:
        for view in call:  # an error ends the stream too, and fails the test below
            received.append(view)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return controls, received, thread, channel


def want(step: int) -> pb.FetchControl:
    return pb.FetchControl(want=pb.Want(step=step))


def test_a_decoder_sends_exactly_the_steps_wanted(service_address: str, dataset: str) -> None:
    loader = RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, shuffle=False, world_size=1,
                          rank=0, job_name="wanted")
    controls, received, pump, channel = open_raw_fetch(loader.job.batch_servers[0], loader.job.job_id)
    try:
        for step in (0, 1, 2, 7):
            controls.put(want(step))
        controls.put(None)  # no more wants: the decoder answers those it has, then ends the stream
        pump.join(timeout=60)
        assert not pump.is_alive(), "the decoder did not end the stream after the last want"
        # One batch per want, in the order wanted, and nothing else before the stream's end.
        assert [v.step for v in received] == [0, 1, 2, 7]
    finally:
        controls.put(None)
        channel.close()
        loader.close()


def _held(prefetcher: DirectPrefetcher, holding: int) -> tuple[int, int]:
    """(what the client counts against prefetch_bytes, what it really holds undelivered): the batch
    the loop holds (`holding` bytes), the batches received and not yet handed out (their tensors'
    bytes), and the steps asked of decoders and not yet received (a batch's size each)."""
    with prefetcher._cond:
        scheduler = prefetcher._scheduler
        received = sum(batch_nbytes(tensors) for _, tensors in prefetcher._ready.values())
        return scheduler.bytes_in_use, holding + received + len(scheduler.outstanding) * BATCH_BYTES


def test_bytes_held_for_a_stalled_loop_stay_within_prefetch_bytes(service_address: str, dataset: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop stalls on its first batch, then drains the epoch slowly; all along, the bytes the
    rank holds for it undelivered never exceed the window, and the client's own count of them is
    never below what the batches hold. The window (3.5 batches, `prefetch` out of the way) admits
    the batch the loop holds plus two: the stall must fill it to that, or the bound was not tested."""
    window = 3 * BATCH_BYTES + BATCH_BYTES // 2
    prefetchers: list[DirectPrefetcher] = []
    open_stream = RemoteLoader._open_stream

    def recorded(self: RemoteLoader, epoch: int, start_step: int) -> DirectPrefetcher:
        prefetchers.append(open_stream(self, epoch, start_step))
        return prefetchers[-1]

    monkeypatch.setattr(RemoteLoader, "_open_stream", recorded)
    samples: list[tuple[int, int]] = []
    got = []
    with RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, shuffle=False, world_size=1, rank=0,
                      job_name="window-bytes", prefetch=100, prefetch_bytes=window) as loader:
        batches = iter(loader)
        for step in range(len(loader)):
            batch = next(batches)
            got.append(batch["idx"].tolist())
            holding = batch_nbytes(batch)
            assert holding == BATCH_BYTES
            (prefetcher,) = prefetchers  # one stream for the epoch: no reconnect
            # The first batch: stalled until the window is full, then 0.3 s more. Later ones: briefly.
            filled, deadline = None, time.monotonic() + (30 if step == 0 else 0.02)
            while time.monotonic() < (deadline if filled is None else min(deadline, filled + 0.3)):
                samples.append(_held(prefetcher, holding))
                if step == 0 and filled is None and samples[-1][1] >= 3 * BATCH_BYTES:
                    filled = time.monotonic()
                time.sleep(0.002)
            del batch
    assert got == oracle_batches(200, 1, 0, BATCH, False, 0, False, 0)
    over = [(counted, really) for counted, really in samples if really > window or really > counted]
    assert not over, f"window {window} bytes; (counted, really held) over it or above the count: {over[:5]}"
    assert max(counted for counted, _ in samples) <= window
    assert max(really for _, really in samples) == 3 * BATCH_BYTES  # the stall filled the window


def test_a_later_epoch_asks_for_its_whole_window_at_once(service_address: str, dataset: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The first epoch knows no batch size and asks for one step until a batch arrives; the next
    knows the last one's, so its first wants fill the window across the decoders."""
    first_asks: list[int] = []
    dispatch = DirectPrefetcher._dispatch

    def recorded(self: DirectPrefetcher) -> None:
        dispatch(self)
        if not getattr(self, "recorded", False):
            self.recorded = True  # type: ignore[attr-defined]
            first_asks.append(len(self._scheduler.outstanding))

    monkeypatch.setattr(DirectPrefetcher, "_dispatch", recorded)
    with RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, shuffle=True, world_size=1, rank=0,
                      job_name="later-epoch-window", prefetch=4) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            got = [batch["idx"].tolist() for batch in loader]
            assert got == oracle_batches(200, 1, 0, BATCH, True, 0, False, epoch)
        assert loader.stats.largest_batch_bytes == BATCH_BYTES
    assert first_asks == [1, 4]


def test_window_smaller_than_one_batch_is_a_clear_error(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=BATCH, world_size=1, rank=0,
                      prefetch_bytes=1000) as loader, pytest.raises(BatchExceedsWindow, match="prefetch_bytes"):
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


@pytest.fixture(scope="module")
def uneven(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`idx` and `ids` (int32 lists): step 0 of 4-sample batches holds a 3,000-id sample (padded:
    ~48 KB for the batch), step 1 a 4,000-id one (~64 KB), the other samples one to five ids."""
    directory = tmp_path_factory.mktemp("uneven")
    lengths = [3000 if i == 1 else 4000 if i == 5 else 1 + i % 5 for i in range(40)]
    pq.write_table(pa.table({"idx": pa.array(range(40), pa.int64()),
                             "ids": pa.array([list(range(n)) for n in lengths], pa.list_(pa.int32()))}),
                   directory / "part-0.parquet", row_group_size=8)
    return str(directory)


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared memory", "bulk socket"])
def test_a_batch_larger_than_the_room_left_is_delivered_when_room_frees(service_address: str, uneven: str,
                                                                      shared_memory: bool) -> None:
    """Step 1 (~64 KB padded) is asked for while step 0 (~48 KB) is the loop's: the window of
    100 KB has ~52 KB left. The decoder answers with its size; the rank asks again once the loop
    is done with step 0, and every batch arrives, in order."""
    with RemoteLoader(service_address, dataset=uneven, batch_size=4, shuffle=False, world_size=1, rank=0,
                      collate="pad", prefetch=4, prefetch_bytes=100_000, shared_memory=shared_memory) as loader:
        batches = [batch["idx"].tolist() for batch in loader]
        assert batches == oracle_batches(40, 1, 0, 4, False, 0, False, 0)
        assert loader.stats.steps_waited_for_room >= 1


def test_a_batch_larger_than_the_whole_window_is_a_clear_error(service_address: str, uneven: str) -> None:
    with RemoteLoader(service_address, dataset=uneven, batch_size=4, shuffle=False, world_size=1, rank=0,
                      collate="pad", prefetch_bytes=60_000) as loader, pytest.raises(
            BatchExceedsWindow, match=r"batch 1 is \d+ bytes, more than the rank's whole window of 60000 bytes"):
        list(loader)
