"""Decode failures mid-epoch: every rank still gets every planned batch exactly once, in order.

A three-node `ray.cluster_utils.Cluster` (decode resources on two worker
nodes plus one spare) and a slow transform so the epoch is long enough to
break things in the middle of it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import ray
from ray.cluster_utils import Cluster

from shardstream.client import RemoteLoader
from shardstream.service.config import ServiceConfig
from shardstream.service.server import Service, create_server
from tests.datasets import oracle_batches, write_indexed

NODE_STORE = 80 * 2**20
N, WORLD, BATCH = 120, 2, 4
SLOW = {"transform": "tests.transforms:slow", "transform_args": {"delay_s": 0.01}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": NODE_STORE})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={"decode": 1}, object_store_memory=NODE_STORE)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": os.getcwd()}})
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def service(cluster: Cluster) -> Iterator[tuple[Service, str]]:
    running, port = create_server(ServiceConfig(port=0, allowed_transform_modules=("tests.transforms",),
                                                decode_timeout_s=60))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("faults"))
    write_indexed(directory, [50, 70])
    return directory


def run_epoch_with_fault(address: str, dataset: str, rank: int, fault_after: int, fault) -> list[list[int]]:  # type: ignore[no-untyped-def]
    got = []
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, seed=3, world_size=WORLD, rank=rank,
                      prefetch=6, columns=["idx"], job_name=f"faults-{fault.__name__}", **SLOW) as loader:
        loader.set_epoch(1)
        for step, batch in enumerate(loader):
            got.append(batch["idx"].tolist())
            if step == fault_after:
                fault()
    return got


@pytest.mark.slow
def test_actor_killed_mid_epoch(service: tuple[Service, str], dataset: str) -> None:
    running, address = service

    def kill_one_actor() -> None:
        _, actor = running.pool.ready_actors()[0]
        ray.kill(actor, no_restart=True)

    before = running.pool.resubmitted
    for rank in range(WORLD):
        got = run_epoch_with_fault(address, dataset, rank, 3, kill_one_actor)
        assert got == oracle_batches(N, WORLD, rank, BATCH, True, 3, False, 1)
    assert running.pool.replaced_actors >= WORLD
    assert running.pool.resubmitted > before  # batches really were in flight on the dead actors
    deadline = time.monotonic() + 30
    while running.pool.size < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running.pool.size == 2  # the pool replaced what it lost


@pytest.mark.slow
def test_actor_process_sigkilled_mid_epoch(service: tuple[Service, str], dataset: str) -> None:
    running, address = service

    def sigkill_one_actor() -> None:
        _, actor = running.pool.ready_actors()[-1]
        os.kill(ray.get(actor.pid.remote(), timeout=30), signal.SIGKILL)

    before = running.pool.resubmitted
    got = run_epoch_with_fault(address, dataset, 0, 2, sigkill_one_actor)
    assert got == oracle_batches(N, WORLD, 0, BATCH, True, 3, False, 1)
    assert running.pool.replaced_actors >= 1
    assert running.pool.resubmitted > before


@pytest.mark.slow
def test_node_added_mid_epoch_takes_work(cluster: Cluster, service: tuple[Service, str], dataset: str) -> None:
    """Scaling out: a decode node that joins mid-epoch gets an actor, and the actor gets batches."""
    running, address = service
    added: list[object] = []

    def add_a_decode_node() -> None:
        added.append(cluster.add_node(num_cpus=1, resources={"decode": 1}, object_store_memory=NODE_STORE))
        deadline = time.monotonic() + 90  # hold the loop (not the service) until the actor is up
        while running.pool.size < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running.pool.size == 3, running.pool.status()

    got = []
    with RemoteLoader(address, dataset=dataset, batch_size=2, seed=3, world_size=1, rank=0, prefetch=4,
                      columns=["idx"], job_name="scale-out", transform="tests.transforms:slow",
                      transform_args={"delay_s": 0.05}) as loader:
        for step, batch in enumerate(loader):
            got.append(batch["idx"].tolist())
            if step == 1:
                add_a_decode_node()
    assert got == oracle_batches(N, 1, 0, 2, True, 3, False, 0)
    new_node = added[0].node_id  # type: ignore[attr-defined]
    decoded_there = sum(done for node, _, done in running.pool.status() if node == new_node)
    assert decoded_there > 0
    cluster.remove_node(added[0])  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while running.pool.size != 2 and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.mark.slow
def test_node_removed_mid_epoch(cluster: Cluster, service: tuple[Service, str], dataset: str) -> None:
    running, address = service
    spare = cluster.add_node(num_cpus=1, resources={"decode": 1}, object_store_memory=NODE_STORE)
    deadline = time.monotonic() + 60
    while running.pool.size < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running.pool.size == 3, running.pool.status()  # a joining decode node gets an actor

    def remove_a_decode_node() -> None:
        cluster.remove_node(spare)

    before = running.pool.resubmitted
    got = run_epoch_with_fault(address, dataset, 1, 2, remove_a_decode_node)
    assert got == oracle_batches(N, WORLD, 1, BATCH, True, 3, False, 1)
    assert running.pool.resubmitted > before, running.pool.status()
    deadline = time.monotonic() + 60
    while running.pool.size != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running.pool.size == 2, running.pool.status()
