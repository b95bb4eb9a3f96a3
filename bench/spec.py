"""What a consumer process is asked to do: one JSON-serialisable record.

The harness writes a ``ConsumerSpec`` to a file, starts ``python -m
bench.consumer`` on it, and reads back the measured ``RunMetrics``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Consumers of the JPEG workload, then the raw transports of the microbenchmark.
CONSUMER_SYSTEMS = ("shardstream", "dataloader", "raydata", "tfdata", "spdl", "grpc_raw", "tcp_raw")


@dataclass
class ConsumerSpec:
    system: str
    dataset: str = ""  # a directory of Parquet shards (TFRecord files for tfdata)
    address: str = ""  # shardstream service, tf.data dispatcher target, or raw server host:port
    batch_size: int = 64
    crop: int = 224
    transform: bool = True  # decode + crop + flip; False: pre-decoded rows, no transform
    columns: list[str] = field(default_factory=lambda: ["image", "label"])
    workers: int = 2  # DataLoader num_workers; the CPUs of Ray Data's local Ray
    prefetch: int = 4  # shardstream RemoteLoader prefetch (batches)
    shuffle: bool = False  # a new order of the samples each epoch (each system's own way)
    epochs: int = 1
    job_name: str = ""
    max_batches: int | None = None
    warmup_batches: int = 1
    step_ms: float = 0.0
    message_bytes: int = 0  # raw transports: bytes per message
    message_count: int = 0  # raw transports: messages per run
    row_bytes: int = 1  # raw transports: bytes per "sample" (a row of the transport dataset)
    tls_ca: str = ""  # shardstream over TLS: the CA that signed the service's certificate
    # shardstream: decoders on this host write batches into shared memory; False: the network
    # path, what a rank on another host than its decoders pays
    shared_memory: bool = True
    bulk_socket: bool = True  # shardstream, network path: batch bytes on bulk sockets; False: on gRPC
    server_pid: int = 0  # the server whose CPU the consumer measures over its loader's life (meter.py)
    # tfdata: .cache() after the decode, so epochs after the first skip it; the epochs run as one
    # tf.data job (a new job would start with an empty cache)
    cache_decoded: bool = False

    def __post_init__(self) -> None:
        if self.system not in CONSUMER_SYSTEMS:
            raise ValueError(f"unknown system {self.system!r}: expected one of {CONSUMER_SYSTEMS}")
        if self.batch_size < 1 or self.epochs < 1 or self.warmup_batches < 1:
            raise ValueError("batch_size, epochs and warmup_batches must be >= 1")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConsumerSpec:
        return cls(**data)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ConsumerSpec:
        return cls.from_json(json.loads(path.read_text()))


__all__ = ["CONSUMER_SYSTEMS", "ConsumerSpec"]
