"""What gRPC itself costs a consumer, from the same run: the floor under two of the targets.

The raw gRPC transport run measures a consumer that does nothing but receive
``bytes`` messages (no framing, no tensors). Its CPU per MB, times the bytes of
one JPEG-workload sample, is about the least CPU a gRPC-Python consumer spends
per sample on this machine (measured at full speed; a consumer receiving more
slowly may spend a little less per MB). Against DataLoader's CPU per sample:

* the lowest consumer-CPU ratio reachable over gRPC (the target is 0.10x), and
* the highest samples/s ratio reachable when the service's decode CPU per
  sample equals DataLoader's and everything shares the same cores:
  ``dl / (dl + floor)`` (the target is 0.95x).

These are informational lines in the report, not targets.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

MB = 1e6


@dataclass(frozen=True)
class GrpcFloor:
    receive_cpu_s_per_mb: float  # raw gRPC consumer, median over the transport's batch sizes
    sample_mb: float  # bytes of one JPEG-workload sample as it travels
    consumer_cpu_per_1k: float  # the floor: CPU-s per 1000 samples for receiving alone
    dataloader_cpu_per_1k: float

    @property
    def cpu_ratio(self) -> float:
        return self.consumer_cpu_per_1k / self.dataloader_cpu_per_1k

    @property
    def throughput_ceiling(self) -> float:
        return self.dataloader_cpu_per_1k / (self.dataloader_cpu_per_1k + self.consumer_cpu_per_1k)


def grpc_floor(results: dict[str, Any]) -> GrpcFloor | None:
    """None unless the run has the raw gRPC transport, shardstream's and DataLoader's figures."""
    transport = results.get("transport") or {}
    systems = results.get("systems") or {}
    ours, dataloader = systems.get("shardstream", {}), systems.get("dataloader", {})
    if transport.get("status") != "ok" or ours.get("status") != "ok" or dataloader.get("status") != "ok":
        return None
    row_bytes = (transport.get("dataset") or {}).get("row_bytes")
    if not row_bytes:
        return None
    row_mb = row_bytes / MB
    per_mb = [entry["median"]["cpu_self_per_1k"] / (1000 * row_mb)
              for entry in transport["results"].get("grpc_raw", {}).values()
              if entry.get("median", {}).get("cpu_self_per_1k")]
    batch_size = (results.get("config") or {}).get("batch_size")
    if not per_mb or not batch_size:
        return None
    receive = statistics.median(per_mb)
    batch_bytes = (ours.get("median") or {}).get("batch_bytes")
    dataloader_cpu = (dataloader.get("median") or {}).get("cpu_total_per_1k")
    if not batch_bytes or not dataloader_cpu:
        return None
    sample_mb = batch_bytes / batch_size / MB
    return GrpcFloor(receive_cpu_s_per_mb=receive, sample_mb=sample_mb,
                     consumer_cpu_per_1k=receive * sample_mb * 1000, dataloader_cpu_per_1k=dataloader_cpu)


def floor_text(results: dict[str, Any]) -> str:
    floor = grpc_floor(results)
    if floor is None:
        return ""
    return (f"gRPC floor (the raw gRPC consumer in this run spent {floor.receive_cpu_s_per_mb * 1e3:.2f} "
            f"CPU-ms per MB received; a sample travels as {floor.sample_mb:.3f} MB):\n"
            f"  receiving alone costs about {floor.consumer_cpu_per_1k:.3f} CPU-s per 1000 samples = "
            f"{floor.cpu_ratio:.2f}x DataLoader's {floor.dataloader_cpu_per_1k:.3f} per 1000\n"
            f"  so with decode CPU equal to DataLoader's on the same cores, samples/s can reach about "
            f"{floor.throughput_ceiling:.2f}x DataLoader")


__all__ = ["GrpcFloor", "floor_text", "grpc_floor"]
