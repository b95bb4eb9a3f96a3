"""The direct data plane: ranks fetch their batches from the decode actors' own batch servers.

DistributedSampler's batches exactly, through a decode actor killed or SIGKILLed mid-epoch,
and a job of 256 ranks that all take their first batch before any goes on (DDP's pattern).
A service of this module's own (two decode actors) on the run's Ray.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from shardstream.client import RemoteLoader, shared_slots
from shardstream.proto.slots import SHARED_MEMORY_DIR
from shardstream.proto.wire import BulkOffer
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.datasets import oracle_batches, write_indexed

N, WORLD, BATCH = 120, 2, 4
PIXELS = 4096  # bytes a row of pixel_dataset
SLOW = {"transform": "tests.transforms:slow", "transform_args": {"delay_s": 0.01}}


@pytest.fixture(scope="module")
def direct(local_ray: None) -> Iterator[tuple[Service, str]]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=2, decoder_cpus=0.5,
                                                allowed_transform_modules=("tests.transforms",)))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("direct"))
    write_indexed(directory, [50, 70])
    return directory


def test_status_counts_the_ranks_streaming(direct: tuple[Service, str], dataset: str) -> None:
    """A rank with streams open on both decoders counts once; once it closes, not at all."""
    running, address = direct

    def streaming(job_id: str, ranks: int) -> None:
        deadline = time.monotonic() + 10  # the actors report with their once-a-second probe
        while running.pool.streaming_ranks().get(job_id, 0) != ranks:
            assert time.monotonic() < deadline, running.pool.streaming_ranks()
            time.sleep(0.1)

    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=5, world_size=WORLD, rank=1,
                      job_name="streaming", prefetch=4, **SLOW) as loader:  # type: ignore[arg-type]
        batches = iter(loader)
        next(batches)
        streaming(loader.job.job_id, 1)
    streaming(loader.job.job_id, 0)


def _wait_for_actors(running: Service, count: int, gone: str = "") -> None:
    """Until `count` actors are ready and the one at `gone` is no longer listed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        addresses = running.pool.batch_addresses()
        if len(addresses) == count and gone not in addresses:
            return
        time.sleep(0.1)
    raise AssertionError(f"the pool lists {running.pool.batch_addresses()}, wanted {count} without {gone!r}")


def test_the_job_lists_the_decoders_and_every_rank_gets_its_batches(direct: tuple[Service, str],
                                                                    dataset: str) -> None:
    running, address = direct
    for rank in range(WORLD):
        with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=5, world_size=WORLD, rank=rank,
                          job_name="direct-order") as loader:
            assert sorted(loader.job.batch_servers) == sorted(running.pool.batch_addresses())
            for epoch in (0, 3):
                loader.set_epoch(epoch)
                assert [b["idx"].tolist() for b in loader] == oracle_batches(N, WORLD, rank, BATCH, True, 5,
                                                                            False, epoch)
    deadline = time.monotonic() + 10  # the actors report what they sent with their next probe
    while time.monotonic() < deadline:
        job = next(j for j in running.registry.all() if j.name == "direct-order")
        if job.counters.batches_served == 2 * WORLD * len(loader):
            break
        time.sleep(0.2)
    assert job.counters.batches_served == 2 * WORLD * len(loader)
    assert job.counters.samples_served == 2 * N
    assert job.rank_positions() == {rank: 3 * len(loader) + len(loader) for rank in range(WORLD)}
    reads = running.pool.nodes.reads_by_node().values()
    assert sum(r.storage_reads for r in reads) > 0 and sum(r.memory_hits for r in reads) > 0


def _slot_files() -> list[str]:
    return [f for f in os.listdir(SHARED_MEMORY_DIR) if f.startswith(f"shardstream-slot-{os.getpid()}-")]


@pytest.mark.parametrize("path", ["shared-memory", "bulk-socket", "grpc-stream"])
def test_every_delivery_path_gives_the_distributed_sampler_batches(direct: tuple[Service, str], dataset: str,
                                                                   path: str) -> None:
    """Shared memory (decoders on this host), a bulk socket beside the stream (decoders elsewhere),
    or the gRPC stream itself: the same batches, counted where they came from."""
    _, address = direct
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=4, world_size=WORLD, rank=0,
                      job_name=f"direct-{path}", shared_memory=path == "shared-memory",
                      bulk_socket=path == "bulk-socket") as loader:
        for epoch in (0, 2):
            loader.set_epoch(epoch)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(N, WORLD, 0, BATCH, True, 4,
                                                                        False, epoch)
        stats = loader.stats
    assert stats.shared_batches == (stats.batches if path == "shared-memory" else 0)
    assert stats.bulk_batches == (stats.batches if path == "bulk-socket" else 0)
    assert _slot_files() == []  # every slot's name is gone with its stream


@pytest.mark.parametrize("path", ["shared-memory", "bulk-socket", "grpc-stream"])
def test_on_an_accelerator_host_every_path_hands_out_pinned_copies(direct: tuple[Service, str], dataset: str,
                                                                  path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a GPU and pin_memory="auto", every tensor of every batch is a copy into pinned memory,
    whichever path its bytes came by. No accelerator here: `torch.cuda.is_available` reports one
    while the loader decides, and a stand-in allocates the pinned memory (tensors._pinned_empty)."""
    import torch

    from shardstream.client import tensors

    pinned: list[torch.Tensor] = []  # kept, so that no id is reused

    def stand_in(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        pinned.append(torch.empty(shape, dtype=dtype))
        return pinned[-1]

    monkeypatch.setattr(tensors, "_pinned_empty", stand_in)
    _, address = direct
    with monkeypatch.context() as gpu_host:
        gpu_host.setattr(torch.cuda, "is_available", lambda: True)
        loader = RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=4, world_size=WORLD, rank=0,
                              job_name=f"direct-pinned-{path}", shared_memory=path == "shared-memory",
                              bulk_socket=path == "bulk-socket")
    with loader:
        assert loader.pin_memory
        got, handed = [], []
        for batch in loader:
            got.append(batch["idx"].tolist())
            handed += [value for value in batch.values() if isinstance(value, torch.Tensor)]
        stats = loader.stats
    assert got == oracle_batches(N, WORLD, 0, BATCH, True, 4, False, 0)
    assert len(handed) == 3 * len(got)  # idx, x, y
    assert {id(t) for t in handed} <= {id(t) for t in pinned}  # each one a pinned buffer, none a view
    assert stats.shared_batches == (stats.batches if path == "shared-memory" else 0)
    assert stats.bulk_batches == (stats.batches if path == "bulk-socket" else 0)


def test_a_profiler_trace_shows_the_loops_waits_for_data_by_name(direct: tuple[Service, str], dataset: str) -> None:
    import torch

    _, address = direct
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=4, world_size=WORLD, rank=0,
                      job_name="direct-profiled") as loader:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
            batches = sum(1 for _ in loader)
    assert batches == len(loader)
    assert [e.name for e in trace.events()].count("shardstream.next") == batches + 1


def test_a_rank_whose_shared_memory_the_decoders_cannot_see_gets_its_batches_on_the_stream(
        direct: tuple[Service, str], dataset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another container's /dev/shm: the decoders cannot open the slots offered, so they send bytes."""
    from shardstream.client import fetcher

    _, address = direct
    monkeypatch.setattr(fetcher, "SlotPool", lambda: shared_slots.SlotPool(str(tmp_path)))
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=4, world_size=WORLD, rank=1,
                      job_name="direct-shm-elsewhere") as loader:
        loader.set_epoch(1)
        assert [b["idx"].tolist() for b in loader] == oracle_batches(N, WORLD, 1, BATCH, True, 4, False, 1)
        assert loader.stats.shared_batches == 0
    assert os.listdir(tmp_path) == []


@pytest.fixture(scope="module")
def pixel_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`idx` and `pixels`: 4 KiB of uint8 per row, all idx % 251. uint8 is never misaligned, so the
    rank's tensors of it are views of the buffer the batch was received into, never copies."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = tmp_path_factory.mktemp("direct-pixels")
    idx = np.arange(N, dtype=np.int64)
    pixels = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(idx % 251, PIXELS).astype(np.uint8)), PIXELS)
    pq.write_table(pa.table({"idx": idx, "pixels": pixels}), directory / "part-00000.parquet", row_group_size=8)
    return str(directory)


def test_bulk_socket_batches_land_in_the_windows_receive_buffers_and_kept_ones_stay_intact(
        direct: tuple[Service, str], pixel_dataset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two decoders, two epochs on bulk sockets: every batch lands in one of the loader's few receive
    buffers (the window's, and one for the loop's variable), however many decoders and epochs. Then
    an epoch whose loop keeps every third batch: later batches, written into reused buffers, leave
    the kept ones as they were."""
    from shardstream.client import receive_buffers

    mapped: list[int] = []
    map_buffer = receive_buffers._map
    monkeypatch.setattr(receive_buffers, "_map", lambda nbytes: mapped.append(nbytes) or map_buffer(nbytes))
    _, address = direct
    prefetch = 2
    kept: dict[int, dict[str, Any]] = {}
    with RemoteLoader(address, dataset=pixel_dataset, batch_size=BATCH, seed=4, world_size=WORLD, rank=0,
                      prefetch=prefetch, shared_memory=False, job_name="direct-receive-buffers") as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(N, WORLD, 0, BATCH, True, 4, False,
                                                                        epoch)
        assert 1 <= len(mapped) <= prefetch + 1
        loader.set_epoch(2)
        for step, batch in enumerate(loader):
            if step % 3 == 0:
                kept[step] = batch
        assert loader.stats.bulk_batches == 3 * len(loader)
    expected = oracle_batches(N, WORLD, 0, BATCH, True, 4, False, 2)
    assert {step: batch["idx"].tolist() for step, batch in kept.items()} == {step: expected[step] for step in kept}
    for step, batch in kept.items():
        rows = [set(row.tolist()) for row in batch["pixels"]]
        assert rows == [{i % 251} for i in expected[step]], f"batch {step} was overwritten"


def test_a_decoder_whose_bulk_port_cannot_be_reached_sends_on_the_stream(
        direct: tuple[Service, str], dataset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A NetworkPolicy that opens only the gRPC port: connecting the bulk socket is refused, the
    batches come on the stream, and later epochs do not try that decoder's bulk port again."""
    from shardstream.client import bulk_socket

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        refused_port = closed.getsockname()[1]
    tried: list[str] = []
    connect = bulk_socket.connect

    def through_a_firewall(address: str, offer: BulkOffer, *args: Any) -> Any:
        tried.append(address)
        return connect(address, BulkOffer(refused_port, offer.token), *args)

    monkeypatch.setattr(bulk_socket, "connect", through_a_firewall)
    _, address = direct
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=4, world_size=WORLD, rank=1,
                      job_name="direct-bulk-refused", shared_memory=False) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(N, WORLD, 1, BATCH, True, 4, False,
                                                                        epoch)
        assert loader.stats.bulk_batches == 0
        assert sorted(tried) == sorted(loader.job.batch_servers)  # once each, in the first epoch only


def _epoch_with_fault(address: str, dataset: str, rank: int, fault_after: int,
                      fault: Callable[[], None], job: str, shared_memory: bool = True) -> tuple[list[list[int]], int]:
    got = []
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=3, world_size=WORLD, rank=rank,
                      prefetch=6, columns=["idx"], job_name=job, shared_memory=shared_memory,
                      **SLOW) as loader:  # type: ignore[arg-type]
        loader.set_epoch(1)
        for step, batch in enumerate(loader):
            got.append(batch["idx"].tolist())
            if step == fault_after:
                fault()
        return got, loader.stats.steps_refetched


@pytest.mark.slow
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared-memory", "network"])
def test_a_decode_actor_killed_mid_epoch(direct: tuple[Service, str], dataset: str, shared_memory: bool) -> None:
    running, address = direct

    killed: list[str] = []

    def kill_one_actor() -> None:
        killed.append(running.pool.batch_addresses()[0])
        ray.kill(running.pool.ready_actors()[0][1], no_restart=True)

    for rank in range(WORLD):
        _wait_for_actors(running, 2, killed[-1] if killed else "")  # replaced, and no longer listed
        got, refetched = _epoch_with_fault(address, dataset, rank, 3, kill_one_actor, "direct-kill", shared_memory)
        assert got == oracle_batches(N, WORLD, rank, BATCH, True, 3, False, 1)
        assert refetched > 0  # steps really were outstanding at the dead actor
    _wait_for_actors(running, 2, killed[-1])


@pytest.mark.slow
def test_a_decode_actor_sigkilled_mid_epoch(direct: tuple[Service, str], dataset: str) -> None:
    running, address = direct
    _wait_for_actors(running, 2)

    killed: list[str] = []

    def sigkill_one_actor() -> None:
        killed.append(running.pool.batch_addresses()[-1])
        os.kill(ray.get(running.pool.ready_actors()[-1][1].pid.remote(), timeout=30), signal.SIGKILL)

    got, refetched = _epoch_with_fault(address, dataset, 0, 2, sigkill_one_actor, "direct-sigkill")
    assert got == oracle_batches(N, WORLD, 0, BATCH, True, 3, False, 1)
    assert refetched > 0
    _wait_for_actors(running, 2, killed[0])


@pytest.mark.slow
def test_256_ranks_meet_at_a_barrier_after_their_first_batch(direct: tuple[Service, str],
                                                             tmp_path: object) -> None:
    """DDP's pattern: every rank takes its first batch, all meet, then each finishes the epoch.
    Through the relay, each open stream held one of the service's 64 threads: this could not start."""
    running, address = direct
    _wait_for_actors(running, 2)
    world, batch = 256, 2
    data = f"{tmp_path}/wide"
    write_indexed(data, [600, 424])  # 1,024 samples: 2 batches of 2 per rank
    barrier = threading.Barrier(world, timeout=240)
    results: dict[int, list[list[int]]] = {}
    errors: list[BaseException] = []
    first_failure: list[str] = []  # the traceback of the first rank that failed: the others follow it

    def rank(r: int) -> None:
        try:
            with RemoteLoader(address, dataset=data, batch_size=batch, seed=9, world_size=world, rank=r,
                              job_name="wide", prefetch=2, timeout=240) as loader:
                batches = iter(loader)
                got = [next(batches)["idx"].tolist()]
                barrier.wait()
                got += [b["idx"].tolist() for b in batches]
                results[r] = got
        except BaseException as exc:
            errors.append(exc)
            if len(errors) == 1:
                first_failure.append(traceback.format_exc())
            barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, first_failure[0]
    assert len(results) == world
    for r in range(world):
        assert results[r] == oracle_batches(1024, world, r, batch, True, 9, False, 0)


def test_a_decoder_behind_a_black_holed_network_loses_its_steps_to_the_others(
        direct: tuple[Service, str], dataset: str) -> None:
    """A connection that stops passing bytes fails by the channel's keepalive (a ping unanswered),
    and the decoder's steps are asked of the other one. Keepalive here: a ping after 1 s without
    one, 1 s to answer it (a rank's default: 30 s and 10 s; connection.py)."""
    from shardstream.client import fetcher
    from shardstream.client.channels import DecoderChannels
    from shardstream.client.connection import CHANNEL_OPTIONS
    from shardstream.client.decoder_stream import FetchTarget
    from shardstream.client.stats import LoaderStats
    from shardstream.client.tensors import batch_to_tensors
    from tests.proxy import ResettingProxy

    running, address = direct
    _wait_for_actors(running, 2)
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=3, world_size=WORLD, rank=1,
                      columns=["idx"], job_name="direct-blackhole", **SLOW) as loader:  # type: ignore[arg-type]
        job_id, steps = loader.job.job_id, len(loader)
    first, second = running.pool.batch_addresses()
    host, port = first.rsplit(":", 1)
    proxy = ResettingProxy(host, int(port))
    stats = LoaderStats()
    keepalive = {"grpc.keepalive_time_ms": 1000, "grpc.keepalive_timeout_ms": 1000, "grpc.http2.ping_timeout_ms": 1000}
    channels = DecoderChannels(None, [(k, keepalive.get(k, v)) for k, v in CHANNEL_OPTIONS])
    prefetcher = fetcher.DirectPrefetcher(
        [proxy.address, second], FetchTarget(job_id, 1, 1, 0, steps), 6, 1 << 30,
        lambda view: batch_to_tensors(view, False), 60.0, "black-hole test", channels, stats)
    got = []
    try:
        for header, tensors in prefetcher:
            got.append(tensors["idx"].tolist())
            if header.step == 1:
                proxy.freeze()
    finally:
        prefetcher.close()
        channels.close()
        proxy.close()
    assert got == oracle_batches(N, WORLD, 1, BATCH, True, 3, False, 1)
    assert stats.decoders_lost == 1 and stats.steps_refetched >= 1


def test_decoders_that_cannot_be_reached_end_in_a_typed_error(direct: tuple[Service, str], dataset: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The service answers, but no decoder it lists can be reached (a firewall on the data ports):
    the rank reopens the job a few times, then says why instead of retrying for ever."""
    from shardstream.client import ServiceUnavailable, channels
    from shardstream.client.tls import open_channel

    _, address = direct
    monkeypatch.setattr(channels, "open_channel", lambda _a, tls, options: open_channel("127.0.0.1:1", tls, options))
    started = time.monotonic()
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, world_size=1, rank=0, reconnect_timeout=2,
                      job_name="direct-unreachable") as loader:
        with pytest.raises(ServiceUnavailable, match=r"no batch for 2 s while reopening the job: .*every decoder "
                                                     r"it fetched from failed \(the last: .*UNAVAILABLE"):
            next(iter(loader))
    assert time.monotonic() - started < 30
