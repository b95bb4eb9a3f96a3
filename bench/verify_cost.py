"""The decoders' time verifying cache entries, read from the service's Prometheus metrics.

The prepared-sample cache checks every entry it serves (key and CRC32C); the decode actors add
the seconds that took to `shardstream_cache_verify_seconds_total{node}`. The warm-epoch row of
`python -m bench` shows it per 1,000 samples beside the service's whole CPU.
"""

from __future__ import annotations

import socket
import urllib.request

VERIFY_METRIC = "shardstream_cache_verify_seconds_total"
VERIFY_REPORT_WAIT_S = 3.0  # decoders report their counters to the head about once a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def verify_seconds(metrics_port: int) -> float:
    """The verify seconds every decode node has reported so far (0 before any)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(VERIFY_METRIC + "{") or line.startswith(VERIFY_METRIC + " "))


__all__ = ["VERIFY_METRIC", "VERIFY_REPORT_WAIT_S", "free_port", "verify_seconds"]
