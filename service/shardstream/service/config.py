"""Service configuration: one frozen dataclass, layered defaults -> SHARDSTREAM_* env -> flags.

The Helm chart's values mirror these fields (helm/shardstream/values.yaml documents each).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "SHARDSTREAM_"


@dataclass(frozen=True)
class ServeSettings:
    """How a decode actor's batch server serves ranks (shipped to every actor)."""

    ports: range = range(0, 1)  # its batch server binds the first free one; port 0: any free port
    decode_timeout_s: float = 300.0  # a batch that takes longer ends its stream with DEADLINE_EXCEEDED
    max_message_bytes: int = 1 << 30


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    ray_address: str | None = None  # None: start an embedded local Ray
    num_decoders: int | None = None  # None: one per unit of the cluster's `decode` resource
    decoder_cpus: float = 1.0
    allowed_transform_modules: tuple[str, ...] = ()  # import-path prefixes user transforms may use
    allowed_dataset_prefixes: tuple[str, ...] = ()  # URL prefixes clients' datasets must lie under; () any
    data_port_base: int = 0  # decode actors' gRPC and bulk ports: the first free ones from here; 0: any
    data_ports: int = 32  # ... among this many (data_port_base .. + data_ports - 1) on each node
    decode_timeout_s: float = 300.0  # deadline for one batch's decode
    row_group_cache_bytes: int = 256 * 2**20  # per decode actor, in memory
    local_copy_dir: str = ""  # per decode node: the row groups it read, on local disk; "": $TMPDIR/...
    local_copy_bytes: int = 64 * 2**30  # bound of that local copy; 0: off (misses read storage)
    # Per decode node, what transforms' `prepare` made of each sample (node/prepared_cache.py): a
    # memory tier (a tmpfs) and a disk tier, each bounded; 0: off. "": the default directories.
    prepared_cache_memory_bytes: int = 0
    prepared_cache_memory_dir: str = ""  # "": /dev/shm/shardstream-prepared
    prepared_cache_disk_bytes: int = 0
    prepared_cache_disk_dir: str = ""  # "": $TMPDIR/shardstream-prepared
    max_message_bytes: int = 1 << 30  # largest batch message a decode actor sends
    max_request_bytes: int = 16 << 20  # largest request accepted (RESOURCE_EXHAUSTED above)
    job_idle_ttl_s: float = 3600.0  # a job with no open stream for this long is forgotten
    grpc_workers: int = 64  # concurrent OpenJob, GetStatus and health calls (each returns at once)
    max_abandoned_storage_calls: int = 64  # storage calls still running past their RPC's deadline
    object_store_memory: int | None = None  # embedded Ray only
    metrics_port: int | None = None  # Prometheus /metrics over HTTP; None: off, 0: any free port
    tls_cert_file: str | None = None  # PEM certificate chain: the gRPC port speaks TLS (see tls.py)
    tls_key_file: str | None = None  # its PEM private key
    tls_client_ca_file: str | None = None  # PEM CA(s): clients must present a certificate it signed

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if self.num_decoders is not None and self.num_decoders < 1:
            raise ValueError(f"num_decoders must be >= 1, got {self.num_decoders}")
        if self.decoder_cpus <= 0:
            raise ValueError(f"decoder_cpus must be > 0, got {self.decoder_cpus}")
        if self.decode_timeout_s <= 0:
            raise ValueError("decode_timeout_s must be > 0")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be 0..65535, got {self.metrics_port}")
        if self.max_request_bytes <= 0 or self.max_message_bytes <= 0:
            raise ValueError("max_request_bytes and max_message_bytes must be > 0")
        if self.job_idle_ttl_s <= 0:
            raise ValueError("job_idle_ttl_s must be > 0")
        if self.grpc_workers < 2:
            raise ValueError("grpc_workers must be >= 2")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together: set both, or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("tls_client_ca_file needs TLS on: set tls_cert_file and tls_key_file too")
        if not 0 <= self.data_port_base <= 65535 or self.data_ports < 1:
            raise ValueError("data_port_base must be 0..65535 and data_ports >= 1")
        if self.data_port_base and self.data_port_base + self.data_ports - 1 > 65535:
            raise ValueError(f"data_port_base + data_ports - 1 must be <= 65535, got "
                             f"{self.data_port_base + self.data_ports - 1}")
        if self.local_copy_bytes < 0 or self.row_group_cache_bytes < 0:
            raise ValueError("local_copy_bytes and row_group_cache_bytes must be >= 0")
        if self.prepared_cache_memory_bytes < 0 or self.prepared_cache_disk_bytes < 0:
            raise ValueError("prepared_cache_memory_bytes and prepared_cache_disk_bytes must be >= 0")
        if self.max_abandoned_storage_calls < 1:
            raise ValueError("max_abandoned_storage_calls must be >= 1")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def batch_serving(self) -> ServeSettings:
        """How decode actors serve batches to ranks."""
        ports = (range(self.data_port_base, self.data_port_base + self.data_ports) if self.data_port_base
                 else range(0, 1))
        return ServeSettings(ports, self.decode_timeout_s, self.max_message_bytes)
    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> ServiceConfig:
        """Defaults, then SHARDSTREAM_<FIELD> from the environment, then overrides (flags)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _parse(f, raw)
        for key, value in (overrides or {}).items():
            if value is not None:
                values[key] = value
        return cls(**values)


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    kind = str(f.type)
    try:
        if "tuple" in kind:
            return tuple(p.strip() for p in raw.split(",") if p.strip())
        if "float" in kind:
            return float(raw)
        if "int" in kind:
            return int(raw)
    except ValueError as exc:
        raise ValueError(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: {exc}") from None
    return raw


__all__ = ["ENV_PREFIX", "ServeSettings", "ServiceConfig"]
