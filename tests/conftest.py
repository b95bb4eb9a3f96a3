"""Shared fixtures: a real local Ray and a real shardstream service on port 0."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from shardstream.service.server import Service

# Ray: no dashboard, no usage stats, quiet, small; tests must never reach the network.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DISABLE_DOCKER_CPU_WARNING", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

TEST_OBJECT_STORE_BYTES = 256 * 2**20


def start_local_ray(num_decoders: int = 4) -> None:
    """Room for the shared service (2 decode actors) and a second, test-specific one.

    A new local Ray every time (never one left running on the machine); one retry,
    because a Ray node sometimes times out starting while the previous module's
    cluster is still shutting down on this small machine.
    """
    import ray

    for attempt in (1, 2):
        try:
            ray.init(address="local", num_cpus=2, resources={"decode": num_decoders},
                     object_store_memory=TEST_OBJECT_STORE_BYTES, include_dashboard=False,
                     logging_level="WARNING")
            return
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    start_local_ray()
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def service(local_ray: None) -> Iterator[tuple[Service, str]]:
    """A running service (2 decode actors, metrics on) on 127.0.0.1:<free port>, and its address."""
    from shardstream.service.config import ServiceConfig
    from shardstream.service.server import create_server

    running, port = create_server(ServiceConfig(port=0, num_decoders=2, decoder_cpus=0.5, metrics_port=0,
                                                allowed_transform_modules=("tests.transforms",)))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def service_address(service: tuple[Service, str]) -> str:
    return service[1]
