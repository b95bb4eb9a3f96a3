"""Every client wait has a deadline: an unreachable service is a typed error, fast."""

from __future__ import annotations

import socket
import time

import pytest

from shardstream.client import RemoteLoader, ServiceUnavailable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_service_is_service_unavailable_within_the_deadline() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=f"cannot reach the shardstream service at {address}"):
        RemoteLoader(address, dataset="/nowhere", batch_size=1, world_size=1, rank=0, connect_timeout=1.0)
    assert time.monotonic() - started < 10
