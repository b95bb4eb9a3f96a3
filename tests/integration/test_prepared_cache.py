"""The prepared-sample cache through the real service: the same bytes cold, warm and off; shared by
jobs; a rewritten shard read again; hits and sizes visible in status and metrics.

Two services of this module's own (one decode actor each): one with both tiers of the cache in
fresh directories, the other with it off.
"""

from __future__ import annotations

import shutil
import time
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


def _epoch(address: str, dataset: str, job: str, epoch: int, seed: int = 11,
           **kwargs: object) -> list[dict[str, bytes]]:
    """A one-rank job's batches of `epoch` (every sample once), as bytes per tensor."""
    with RemoteLoader(address, dataset=dataset, batch_size=5, shuffle=True, seed=seed, world_size=1, rank=0,
                      job_name=job, **IMAGE, **kwargs) as loader:  # type: ignore[arg-type]
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


def _faults(port: int) -> dict[tuple[str, str], float]:
    """shardstream_cache_faults_total by (cache, cause), summed over nodes, once the actors reported."""
    totals: dict[tuple[str, str], float] = {}
    for (name, labels), value in settled(lambda: scrape(port)).items():
        if name == "shardstream_cache_faults_total":
            label = dict(labels)
            key = (label["cache"], label["cause"])
            totals[key] = totals.get(key, 0) + value
    return totals


def _retype(path: Path) -> None:
    """Edit the stored header's image dtype to another of the same size (uint8 -> int8)."""
    data = path.read_bytes()
    assert data.count(b'"|u1"') == 1
    path.write_bytes(data.replace(b'"|u1"', b'"|i1"'))


def test_a_damaged_disk_tier_is_read_again_never_served(
        cached: tuple[Service, str, Path], uncached: tuple[Service, str], tmp_path: Path) -> None:
    """After a warm epoch, the disk tier damaged four ways (the memory tier emptied, so the disk tier
    is read): the next epochs are the bytes of a service with the cache off, each damaged entry is
    one fault of its cause, and the epoch takes no longer than a cold one (no retries)."""
    running, address, cache_dir = cached
    assert running.metrics_port
    data = str(tmp_path / "data")
    write_images(data, [9, 8])
    disk, memory = cache_dir / "disk", cache_dir / "memory"
    before = {p for p in disk.glob("*/*")}
    _epoch(address, data, "damaged-fill", 0)
    entries = sorted({p for p in disk.glob("*/*") if not p.name.endswith(".tmp")} - before)
    assert len(entries) == N
    for folder in {p.parent.name for p in entries}:
        shutil.rmtree(memory / folder, ignore_errors=True)
    flipped, source, overwritten, retyped, replaced = entries[:5]
    data_bytes = bytearray(flipped.read_bytes())
    data_bytes[-20] ^= 0x01  # one bit of the picture
    flipped.write_bytes(data_bytes)
    shutil.copyfile(source, overwritten)  # one sample's file over another's
    _retype(retyped)
    replaced.unlink()
    replaced.mkdir()  # a directory where the file was
    faults = _faults(running.metrics_port)
    started = time.monotonic()
    damaged_epoch = _epoch(address, data, "damaged-fill", 1, reconnect_timeout=30)
    elapsed = time.monotonic() - started
    assert damaged_epoch == _epoch(uncached[1], data, "damaged-off", 1)
    after = _faults(running.metrics_port)
    rose = {key: after[key] - faults.get(key, 0) for key in after if after[key] != faults.get(key, 0)}
    assert rose == {("disk", "checksum"): 2, ("disk", "key"): 1, ("disk", "io_error"): 1}
    assert elapsed < 20, f"the damaged epoch took {elapsed:.1f} s"
    assert replaced.is_file()  # dropped, prepared again and stored sound
    # The next epoch finds sound entries everywhere: the same bytes, no fault.
    assert _epoch(address, data, "damaged-fill", 2) == _epoch(uncached[1], data, "damaged-off", 2)
    assert _faults(running.metrics_port) == after
