"""Decode capacity that follows demand, on a real Ray node and a real service.

A rank starved by a slow transform makes the scaling policy grow the pool; when the rank stops
fetching, the pool gives the decoders back by draining them. A drain in the middle of an epoch
loses and repeats no batch. (Ray's own autoscaler adding and removing nodes:
test_ray_autoscaler.py.)
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Iterator

import pytest

from shardstream.client import RemoteLoader
from shardstream.service.config import ServiceConfig
from shardstream.service.control import decode_scaling
from shardstream.service.control.server import Service, create_server
from tests.datasets import oracle_batches, write_indexed

ROWS = [120, 120]
BATCH = 4
SLOW = {"transform": "tests.transforms:slow", "transform_args": {"delay_s": 0.01}}  # 40 ms a batch, a decoder


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("scaling"))
    write_indexed(directory, ROWS)
    return directory


@contextlib.contextmanager
def _service(window_s: float) -> Iterator[tuple[Service, str]]:
    running, port = create_server(ServiceConfig(
        port=0, metrics_port=0, decoder_cpus=0.25, autoscale_min_decoders=1, autoscale_max_decoders=3, autoscale_window_s=window_s,
        allowed_transform_modules=("tests.transforms",)))
    try:
        yield running, f"127.0.0.1:{port}"
    finally:
        running.stop(grace=1.0)


def _wait(condition, what: str, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _scrape(running: Service) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{running.metrics_port}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {name: float(value) for name, value in (line.rsplit(" ", 1) for line in lines if line.startswith("shardstream_"))}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_starved_rank_grows_the_pool_and_an_idle_one_gives_it_back(local_ray: None, dataset: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # One rank, listing its decoders at each epoch's start: a grown pool need not wait 10 s to be judged.
    monkeypatch.setattr(decode_scaling, "SETTLE_S", 2.0)
    with _service(window_s=1.5) as (running, address):
        assert running.scaling is not None
        _wait(lambda: running.pool.size == 1, "the pool did not start at its minimum")
        with RemoteLoader(address, dataset=dataset, batch_size=BATCH, shuffle=True, seed=5, world_size=1, rank=0,
                          columns=["idx"], job_name="starved", **SLOW) as loader:  # type: ignore[arg-type]
            deadline, epoch, grown = time.monotonic() + 90, 0, None
            while grown is None or epoch <= grown + 1:  # epochs until it grew, and one after
                assert time.monotonic() < deadline, f"the pool never grew: {running.scaling.state}"
                loader.set_epoch(epoch)
                batches = [batch["idx"].tolist() for batch in loader]
                assert batches == oracle_batches(sum(ROWS), 1, 0, BATCH, True, 5, False, epoch), epoch
                if running.pool.size == 3 and grown is None:
                    grown = epoch
                epoch += 1
            assert loader.stats.decoders_lost == 0
        state = running.scaling.state
        assert state.up >= 1, state
        # The rank stopped fetching: back to the minimum, each surplus decoder drained, none lost.
        _wait(lambda: running.pool.size == 1 and running.pool.draining == 0,
              f"the pool did not shrink: {running.scaling.state}")
        assert running.pool.drained_actors == 2 and running.pool.replaced_actors == 0
        last = running.scaling.state.last_change
        assert last is not None and "no rank is fetching" in last.reason
        scraped = _scrape(running)  # what the HPA and the dashboard read
        assert scraped["shardstream_decoders_wanted"] == 1 and scraped["shardstream_decoders_draining"] == 0
        assert scraped['shardstream_scaling_decisions_total{direction="up"}'] >= 1
        assert scraped['shardstream_scaling_decisions_total{direction="down"}'] >= 1


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_decoders_drained_mid_epoch_lose_and_repeat_no_batch(local_ray: None, dataset: str) -> None:
    with _service(window_s=600.0) as (running, address):  # the policy's loop stays out of it: the test sets the size
        running.pool.set_wanted(3)
        _wait(lambda: running.pool.size == 3, "3 decoders did not start")
        with RemoteLoader(address, dataset=dataset, batch_size=BATCH, shuffle=True, seed=7, world_size=1,
                          rank=0, columns=["idx"], job_name="drained", prefetch=8,
                          **SLOW) as loader:  # type: ignore[arg-type]
            loader.set_epoch(2)
            got = []
            for step, batch in enumerate(loader):
                got.append(batch["idx"].tolist())
                if step == 10:
                    running.pool.set_wanted(1)
            assert got == oracle_batches(sum(ROWS), 1, 0, BATCH, True, 7, False, 2)
            assert loader.stats.decoders_drained == 2 and loader.stats.decoders_lost == 0
        _wait(lambda: running.pool.size == 1 and running.pool.draining == 0, "the drained decoders were not killed")
        assert running.pool.drained_actors == 2 and running.pool.replaced_actors == 0
