"""The transport microbenchmark's figures per batch size: GB/s and CPU-s per GB on each side.

A results document keeps per-1000-row medians (as for every other system);
the transport is judged per byte. For each kind (shardstream on the network
path (bulk sockets), the same with bytes on the gRPC stream, shardstream through
shared memory, raw gRPC, raw TCP) and batch size:

* ``gbps``: the consumer's GB/s (1e9 bytes/s) over its measured messages;
* ``consumer_cpu_per_gb``: the consumer process's CPU-s per GB over the same
  window (for raw gRPC: the floor of any gRPC consumer in Python);
* ``sender_cpu_per_gb``: the server's process tree (for shardstream its decode
  actors, ``serve`` and the rest of Ray) per GB over the consumer's whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("shardstream", "shardstream_grpc", "shardstream_shm", "grpc_raw", "tcp_raw")


@dataclass(frozen=True)
class TransportFigures:
    gbps: float
    consumer_cpu_per_gb: float | None
    sender_cpu_per_gb: float | None


def batch_sizes(results: dict[str, Any]) -> list[tuple[int, int]]:
    """(rows, bytes) of each batch size the transport ran; [] when it did not run."""
    transport = results.get("transport") or {}
    if transport.get("status") != "ok":
        return []
    row_bytes = int((transport.get("dataset") or {}).get("row_bytes") or 0)
    return [(int(rows), int(rows) * row_bytes) for rows in transport.get("batch_rows", [])]


def figures(results: dict[str, Any], kind: str, rows: int) -> TransportFigures | None:
    """None when that kind did not run at that batch size."""
    transport = results.get("transport") or {}
    if transport.get("status") != "ok":
        return None
    median = transport.get("results", {}).get(kind, {}).get(str(rows), {}).get("median") or {}
    if "mb_per_s" not in median:
        return None
    row_gb = int((transport.get("dataset") or {}).get("row_bytes") or 0) / 1e9

    def per_gb(per_1k_rows: float | None) -> float | None:
        return per_1k_rows / (1000 * row_gb) if per_1k_rows is not None and row_gb else None

    return TransportFigures(gbps=float(median["mb_per_s"]) / 1000.0,
                            consumer_cpu_per_gb=per_gb(median.get("cpu_self_per_1k")),
                            sender_cpu_per_gb=per_gb(median.get("server_cpu_per_1k")))


def batch_label(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


__all__ = ["KINDS", "TransportFigures", "batch_label", "batch_sizes", "figures"]
