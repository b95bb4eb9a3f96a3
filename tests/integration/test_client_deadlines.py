"""Every client wait has a deadline: an unreachable service is a typed error, fast."""

from __future__ import annotations

import time

import pytest

from shardstream.client import RemoteLoader, ServiceUnavailable
from tests.processes import free_ports


def test_unreachable_service_is_service_unavailable_within_the_deadline() -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=f"cannot reach the shardstream service at {address}"):
        RemoteLoader(address, dataset="/nowhere", batch_size=1, world_size=1, rank=0, connect_timeout=1.0)
    assert time.monotonic() - started < 10
