"""The prepared-sample cache through the real service: the same bytes cold, warm and off; shared by
jobs; a rewritten shard read again; hits and sizes visible in status and metrics.

Two services of this module's own (one decode actor each): one with the cache at its defaults in
fresh directories, the other with it off.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardstream.client import RemoteLoader
from shardstream.proto.slots import SHARED_MEMORY_DIR
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.sample_index import slot_of
from tests.cache_tiers import overwrite, stored_entry
from tests.datasets import write_images
from tests.integration.test_local_copy import _node_reads, _reads
from tests.integration.test_metrics import scrape
from tests.settle import settled
from tests.side_by_side import side_by_side

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
    """The cache at its defaults (each tier sized by the node: memory on a tmpfs), in fresh directories,
    keeping every sample a first epoch prepares; or off with its one setting."""
    config = ServiceConfig(
        port=0, num_decoders=1, decoder_cpus=0.5, metrics_port=0, local_copy_bytes=0,
        prepared_cache=cache_dir is not None, prepared_cache_write_share=1.0,  # (as tests/conftest.py's)
        prepared_cache_memory_dir=str(cache_dir / "memory") if cache_dir else "",
        prepared_cache_disk_dir=str(cache_dir / "disk") if cache_dir else "")
    running, port = create_server(config)
    return running, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache_dir = Path(tempfile.mkdtemp(prefix="shardstream-test-prepared-", dir=SHARED_MEMORY_DIR))
    (cache_dir / "disk").symlink_to(tmp_path_factory.mktemp("prepared-disk"))  # the disk tier on disk
    yield cache_dir
    shutil.rmtree(cache_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def services(local_ray: None, cache_dir: Path) -> Iterator[list[tuple[Service, str]]]:
    """The service with the cache and the one without, started side by side."""
    with side_by_side(lambda: _start(cache_dir), lambda: _start(None)) as started:
        yield started


@pytest.fixture(scope="module")
def cached(services: list[tuple[Service, str]], cache_dir: Path) -> tuple[Service, str, Path]:
    return (*services[0], cache_dir)


@pytest.fixture(scope="module")
def uncached(services: list[tuple[Service, str]]) -> tuple[Service, str]:
    return services[1]


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
    # each sample written once, to the memory tier while it has room (the disk tier takes the rest)
    assert first.prepared_memory_bytes > 0 and first.prepared_disk_bytes == 0 and first.prepared_deferred == 0
    # on by default: each tier sized by the node, which says what it chose and why
    assert first.prepared_memory_sizing.startswith("auto: ") and "object store" in first.prepared_memory_sizing
    assert first.prepared_disk_sizing.startswith("auto: a quarter of the")
    assert first.prepared_memory_bound >= 256 << 20 and first.prepared_disk_bound >= 256 << 20
    assert any((cache_dir / "memory").iterdir())
    # Another job on the same dataset and prepare spec (another seed: another order, other crops)
    # starts warm: nothing to read or prepare, and still its own bytes.
    assert _epoch(address, data, "prepared-sweep", 0, seed=99) == _epoch(uncached[1], data, "prepared-sweep-off",
                                                                         0, seed=99)
    assert running.metrics_port
    # the status and the metrics once the actors have reported, settled together
    second, metrics = settled(lambda: (_node_reads(address), scrape(running.metrics_port)))
    assert second.prepared_misses == first.prepared_misses
    assert second.prepared_memory_hits - first.prepared_memory_hits == N
    node = ("node", second.node_id)
    assert metrics[("shardstream_prepared_cache_hits_total", (node, ("tier", "memory")))] == second.prepared_memory_hits
    assert metrics[("shardstream_prepared_cache_misses_total", (node,))] == second.prepared_misses
    assert metrics[("shardstream_prepared_cache_bytes", (node, ("tier", "disk")))] == second.prepared_disk_bytes
    assert metrics[("shardstream_prepared_cache_keep_seconds_total", (node,))] > 0  # the N samples' writes


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
    return _fault_totals(settled(lambda: scrape(port)))


def _fault_totals(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[tuple[str, str], float]:
    """shardstream_cache_faults_total by (cache, cause), summed over nodes, of a scrape."""
    totals: dict[tuple[str, str], float] = {}
    for (name, labels), value in metrics.items():
        if name == "shardstream_cache_faults_total":
            label = dict(labels)
            key = (label["cache"], label["cause"])
            totals[key] = totals.get(key, 0) + value
    return totals


def test_a_damaged_tier_is_read_again_never_served(
        cached: tuple[Service, str, Path], uncached: tuple[Service, str], tmp_path: Path) -> None:
    """After a warm epoch, entries damaged in place four ways (a flipped bit, another sample's entry
    over one, an edited header, an index slot pointing at a chunk that is not there): the next epochs
    are the bytes of a service with the cache off, each damaged entry is one fault of its cause, and
    the epoch takes no longer than a cold one (no retries)."""
    running, address, cache_dir = cached
    assert running.metrics_port
    data = str(tmp_path / "data")
    write_images(data, [9, 8])
    memory = SampleTier("memory", str(cache_dir / "memory"), 0)  # this process's view of the service's tier
    before = memory.held()
    _epoch(address, data, "damaged-fill", 0)
    # every sample stored, and the faults so far, once both stopped changing
    held, metrics = settled(lambda: (memory.held() - before if len(memory.held() - before) == N else None,
                                     scrape(running.metrics_port)))
    faults = _fault_totals(metrics)
    entries = sorted(held)
    flipped, retyped, lost = entries[:3]
    # another sample's entry over one at least as long (a longer one would damage the entry after it too)
    source, *_, overwritten = sorted(entries[3:], key=lambda e: len(stored_entry(memory, *e)[2]))
    path, offset, entry = stored_entry(memory, *flipped)
    overwrite(path, offset + len(entry) - 20, bytes([entry[-20] ^ 0x01]))  # one bit of the picture
    overwrite(*stored_entry(memory, *overwritten)[:2], stored_entry(memory, *source)[2])
    path, offset, entry = stored_entry(memory, *retyped)
    assert entry.count(b'"|u1"') == 1
    overwrite(path, offset, entry.replace(b'"|u1"', b'"|i1"'))  # the image's dtype, uint8 -> int8
    memory.index.set(*lost, slot_of(10**6, 0))  # a chunk that does not exist
    started = time.monotonic()
    damaged_epoch = _epoch(address, data, "damaged-fill", 1, reconnect_timeout=30)
    elapsed = time.monotonic() - started
    assert damaged_epoch == _epoch(uncached[1], data, "damaged-off", 1)

    def stored_again() -> object:
        """Where the lost entry is once it was forgotten, prepared again and stored sound; None before."""
        at = memory.locate(*lost)
        return at if at and at[0].find(str(10**6)) < 0 else None

    # the faults, and the lost entry stored again, once both stopped changing
    metrics, restored = settled(lambda: (scrape(running.metrics_port), stored_again()))
    after = _fault_totals(metrics)
    rose = {key: after[key] - faults.get(key, 0) for key in after if after[key] != faults.get(key, 0)}
    assert rose == {("memory", "checksum"): 2, ("memory", "key"): 1, ("memory", "io_error"): 1}
    assert elapsed < 20, f"the damaged epoch took {elapsed:.1f} s"
    assert restored
    # The next epoch finds sound entries everywhere: the same bytes, no fault.
    assert _epoch(address, data, "damaged-fill", 2) == _epoch(uncached[1], data, "damaged-off", 2)
    assert _faults(running.metrics_port) == after
    memory.close()
