"""The decoders' time on the caches' own work, read from the service's Prometheus metrics.

The prepared-sample cache checks every entry it serves (key and CRC32C): the decode actors add the
seconds that took to `shardstream_cache_verify_seconds_total{node}`, which the warm-epoch row of
`python -m bench` shows per 1,000 samples beside the service's whole CPU. In a first epoch they
spend a share of their time keeping the samples they prepare (write_budget.py):
`shardstream_prepared_cache_keep_seconds_total{node}`, which the first-epoch row and the decode
actors' CPU target show.
"""

from __future__ import annotations

import socket
import urllib.request

VERIFY_METRIC = "shardstream_cache_verify_seconds_total"
KEEP_METRIC = "shardstream_prepared_cache_keep_seconds_total"
REPORT_WAIT_S = 3.0  # decoders report their counters to the head about once a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seconds_total(metrics_port: int, metric: str) -> float:
    """`metric` summed over every decode node that has reported so far (0 before any)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(metric + "{") or line.startswith(metric + " "))


__all__ = ["KEEP_METRIC", "REPORT_WAIT_S", "VERIFY_METRIC", "free_port", "seconds_total"]
