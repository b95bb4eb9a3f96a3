"""TLS for the gRPC port: the service's certificate, and optionally client certificates (mTLS).

Off by default: inside a cluster network the service is usually reached in
plaintext, as Ray's own ports are. With `tls_cert_file` and `tls_key_file` the
port speaks only TLS; with `tls_client_ca_file` as well, it also requires every
client to present a certificate signed by that CA. Files that cannot be read
stop the service at start, naming the file.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from shardstream.service.config import ServiceConfig


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from None


def server_credentials(config: ServiceConfig) -> grpc.ServerCredentials | None:
    """The port's credentials, or None for plaintext."""
    if not config.tls_cert_file or not config.tls_key_file:
        return None
    key = _read(config.tls_key_file, "TLS key (tls_key_file)")
    chain = _read(config.tls_cert_file, "TLS certificate (tls_cert_file)")
    client_ca = (_read(config.tls_client_ca_file, "client CA (tls_client_ca_file)")
                 if config.tls_client_ca_file else None)
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


__all__ = ["server_credentials"]
