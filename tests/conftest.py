"""Shared fixtures: a real local Ray and a real shardstream service on port 0."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from shardstream.service.control.server import Service

# Ray: no dashboard, no usage stats, quiet, small; tests must never reach the network.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

TEST_OBJECT_STORE_BYTES = 256 * 2**20
# The environment as the run started; what a module's fixtures add to it (a storage
# emulator's endpoint, say) is forwarded to that module's Ray job.
_ENV_AT_START = dict(os.environ)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One local Ray node for the whole run (for each test process), started once; its GCS address.

    Room for the shared service (2 decode actors) and a second, test-specific one.
    Each module connects to it as a Ray job of its own (`local_ray`), so a module's
    actors end with it, but no module waits for a Ray node to start (or risks one
    timing out while an earlier module's cluster is still going down).
    """
    from ray.cluster_utils import Cluster

    from tests.cluster import SYSTEM_CONFIG

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"decode": 4}, "object_store_memory": TEST_OBJECT_STORE_BYTES,
        "include_dashboard": False, "_system_config": SYSTEM_CONFIG})
    yield cluster.address
    cluster.shutdown()


def module_env() -> dict[str, str]:
    """What the decode workers need from this process: the checkout on their path, and
    whatever this module's fixtures changed in the environment (storage endpoints)."""
    changed = {k: v for k, v in os.environ.items() if _ENV_AT_START.get(k) != v}
    return {**changed, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def local_ray(ray_cluster: str) -> Iterator[None]:
    """This module's Ray job on the run's Ray node."""
    import ray

    ray.init(address=ray_cluster, runtime_env={"env_vars": module_env()}, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def service(local_ray: None) -> Iterator[tuple[Service, str]]:
    """A running service (2 decode actors, metrics on) on 127.0.0.1:<free port>, and its address.

    Its decode actors keep every sample they prepare (prepared_cache_write_share=1): a test that reads
    an epoch twice finds the whole of it kept however loaded the machine is, where at the default share
    a first epoch keeps what a few percent of the actors' time passing covers (tests/unit: the budget)."""
    from shardstream.service.config import ServiceConfig
    from shardstream.service.control.server import create_server

    running, port = create_server(ServiceConfig(port=0, num_decoders=2, decoder_cpus=0.5, metrics_port=0,
                                                prepared_cache_write_share=1.0,
                                                allowed_transform_modules=("tests.transforms", "examples.formats")))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def service_address(service: tuple[Service, str]) -> str:
    return service[1]
