"""Decoders given back in the middle of an epoch, on a real Ray node and a real service: each
drained stream sends what it accepted and ends with DecoderDraining, and the rank gets every
other step from the decoders left, so nothing is lost or repeated. (The policy growing and
shrinking the pool, with Ray's own autoscaler adding and removing nodes: test_ray_autoscaler.py.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from shardstream.client import RemoteLoader
from shardstream.service.config import ServiceConfig
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
        port=0, decoder_cpus=0.25, autoscale_min_decoders=1, autoscale_max_decoders=3, autoscale_window_s=window_s,
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
                if step == 10:  # the rest of the epoch waits until the two are being drained
                    running.pool.set_wanted(1)
                    _wait(lambda: running.pool.draining + running.pool.drained_actors == 2, "no drain began")
            assert got == oracle_batches(sum(ROWS), 1, 0, BATCH, True, 7, False, 2)
            assert loader.stats.decoders_drained == 2 and loader.stats.decoders_lost == 0
        _wait(lambda: running.pool.size == 1 and running.pool.draining == 0, "the drained decoders were not killed")
        assert running.pool.drained_actors == 2 and running.pool.replaced_actors == 0
