"""What the service's decode nodes read, as `GetStatus` reports it, once the reports have settled.

The decode actors report their reads once a second, so a figure read right after an epoch
would count the epoch's last reads in the next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def node_reads(address: str, fields: tuple[str, ...]) -> dict[str, int]:
    """Each field of `NodeReads`, summed over the decode nodes."""
    from shardstream.client.tls import open_channel
    from shardstream.proto.v1 import loader_pb2 as pb
    from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc

    with open_channel(address, None) as channel:
        status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=30)
    return {name: sum(getattr(r, name) for r in status.node_reads) for name in fields}


def settled(read: Callable[[], T], quiet_s: float = 2.5) -> T:
    """What `read` returns once it has stopped changing for `quiet_s`."""
    last, since = read(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.25)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
    return last


__all__ = ["node_reads", "settled"]
