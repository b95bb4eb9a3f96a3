"""Options every gRPC server of the service sets (the coordinator's port and every batch server).

Keepalive: clients ping every 30 s while a call is open (client/connection.py). A rank in a long
training step holds its streams open with no data flowing; by gRPC's default a server counts pings
closer than 5 minutes apart without data as abuse and, after two, closes the connection with "too
many pings". Accepting one every 10 s keeps those streams, and the server pings idle clients itself.

Unrequested calls: gRPC cancels a call that arrived but was not yet taken up by the server's
request loop within 30 s (`grpc.server_max_unrequested_time_in_server`). Hundreds of ranks opening
their job at once on a loaded machine (the server's Python thread waiting for the GIL) reach that,
and the rank saw a bare CANCELLED. A call waits its turn instead; the client's own deadline bounds it.
"""

from __future__ import annotations

SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.server_max_unrequested_time_in_server", 3600),
]

__all__ = ["SERVER_OPTIONS"]
