"""Connecting to a service whose gRPC port speaks TLS (the service's `tls_*` settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from shardstream.proto.errors import InvalidJobSpec


@dataclass(frozen=True)
class TLS:
    """How to verify the service, and how to prove who this client is.

    ca_file: PEM certificates that signed the service's; None trusts the system's roots.
    cert_file, key_file: this client's certificate chain and key, for a service that
        requires client certificates (mutual TLS).
    server_name: the name the service's certificate was issued for, when the address
        names it otherwise (an IP address, a port-forward).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidJobSpec("TLS cert_file and key_file go together: set both, or neither")

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "CA file") if self.ca_file else None,
            private_key=_read(self.key_file, "key file") if self.key_file else None,
            certificate_chain=_read(self.cert_file, "certificate file") if self.cert_file else None)

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidJobSpec(f"cannot read the TLS {what} {path!r}: {exc.strerror or exc}") from None


__all__ = ["TLS"]
