"""The prepared-sample cache through the real service: the same bytes cold, warm and off; shared by
jobs; a rewritten shard read again; hits and sizes visible in status and metrics.

Two services of this module's own (one decode actor each): one with both tiers of the cache in
fresh directories, the other with it off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shardstream.client import RemoteLoader
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.datasets import write_images
from tests.integration.test_local_copy import _reads
from tests.integration.test_metrics import scrape
from tests.settle import settled

IMAGE = {"transform": "image", "transform_args": {"size": 16}}
N = 17  # samples in each test's dataset


def _epoch(address: str, dataset: str, job: str, epoch: int, seed: int = 11) -> list[dict[str, bytes]]:
    """A one-rank job's batches of `epoch` (every sample once), as bytes per tensor."""
    with RemoteLoader(address, dataset=dataset, batch_size=5, shuffle=True, seed=seed, world_size=1, rank=0,
                      job_name=job, **IMAGE) as loader:  # type: ignore[arg-type]
        loader.set_epoch(epoch)
        return [{name: t.numpy().tobytes() for name, t in batch.items()} for batch in loader]


def _start(cache_dir: Path | None) -> tuple[Service, str]:
    config = ServiceConfig(
        port=0, num_decoders=1, decoder_cpus=0.5, metrics_port=0, local_copy_bytes=0,
        prepared_cache_memory_dir=str(cache_dir / "memory") if cache_dir else "",
        prepared_cache_memory_bytes=1 << 26 if cache_dir else 0,
        prepared_cache_disk_dir=str(cache_dir / "disk") if cache_dir else "",
        prepared_cache_disk_bytes=1 << 26 if cache_dir else 0)
    running, port = create_server(config)
    return running, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def cached(local_ray: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str, Path]]:
    cache_dir = tmp_path_factory.mktemp("prepared")
    running, address = _start(cache_dir)
    yield running, address, cache_dir
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def uncached(local_ray: None) -> Iterator[tuple[Service, str]]:
    running, address = _start(None)
    yield running, address
    running.stop(grace=1.0)


def test_batches_are_the_same_bytes_cold_warm_and_off_and_a_second_job_starts_warm(
        cached: tuple[Service, str, Path], uncached: tuple[Service, str], tmp_path: Path) -> None:
    running, address, cache_dir = cached
    data = str(tmp_path / "data")
    write_images(data, [9, 8])
    before = _reads(address)
    for epoch in (0, 1, 2):
        off = _epoch(uncached[1], data, "prepared-off", epoch)
        assert _epoch(address, data, "prepared-on", epoch) == off, f"epoch {epoch}"
    first = _reads(address)
    assert first.prepared_misses - before.prepared_misses == N  # each sample prepared once, in epoch 0
    assert first.prepared_memory_hits - before.prepared_memory_hits == 2 * N  # then found, epochs 1 and 2
    assert first.prepared_memory_bytes > 0 and first.prepared_disk_bytes > 0
    assert any((cache_dir / "disk").iterdir()) and any((cache_dir / "memory").iterdir())
    # Another job on the same dataset and prepare spec (another seed: another order, other crops)
    # starts warm: nothing to read or prepare, and still its own bytes.
    assert _epoch(address, data, "prepared-sweep", 0, seed=99) == _epoch(uncached[1], data, "prepared-sweep-off",
                                                                         0, seed=99)
    second = _reads(address)
    assert second.prepared_misses == first.prepared_misses
    assert second.prepared_memory_hits - first.prepared_memory_hits == N
    assert running.metrics_port
    node = ("node", second.node_id)
    metrics = settled(lambda: scrape(running.metrics_port))
    assert metrics[("shardstream_prepared_cache_hits_total", (node, ("tier", "memory")))] == second.prepared_memory_hits
    assert metrics[("shardstream_prepared_cache_misses_total", (node,))] == second.prepared_misses
    assert metrics[("shardstream_prepared_cache_bytes", (node, ("tier", "disk")))] == second.prepared_disk_bytes


def test_a_rewritten_shard_is_prepared_again_not_served_stale(
        cached: tuple[Service, str, Path], uncached: tuple[Service, str], tmp_path: Path) -> None:
    _, address, _ = cached
    data = str(tmp_path / "data")
    write_images(data, [6, 6])
    first = _epoch(address, data, "rewrite-before", 0)
    write_images(data, [6, 6], width=48, height=40)  # the same files, other pictures
    after = _epoch(address, data, "rewrite-after", 0)
    assert after == _epoch(uncached[1], data, "rewrite-off", 0)
    assert after != first
