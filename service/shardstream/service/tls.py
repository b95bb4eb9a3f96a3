"""TLS for the gRPC port: the service's certificate, and optionally client certificates (mTLS).

Off by default: inside a cluster network the service is usually reached in
plaintext, as Ray's own ports are. With `tls_cert_file` and `tls_key_file` the
port speaks only TLS; with `tls_client_ca_file` as well, it also requires every
client to present a certificate signed by that CA. Files that cannot be read
stop the service at start, naming the file.

Certificates are short-lived where they are managed (cert-manager renews them
into the mounted Secret), so the files are read again before every new
connection's handshake and a renewed certificate is served without a restart.
Connections already open keep the certificate they were made with. Files caught
half-written (a key that does not match its certificate) keep the previous
certificate until a later handshake finds them whole.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from shardstream.service.config import ServiceConfig

log = logging.getLogger(__name__)


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class TlsFiles:
    """Where a port's TLS files are: the head's, and (direct data plane) every decode actor's."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    @classmethod
    def of(cls, config: ServiceConfig) -> TlsFiles | None:
        if not config.tls_cert_file or not config.tls_key_file:
            return None
        return cls(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file)


class CertificateFiles:
    """The certificate, key and client CA files, and what they held when last read."""

    def __init__(self, tls: TlsFiles) -> None:
        self.files = [(tls.key_file, "TLS key (tls_key_file)"),
                      (tls.cert_file, "TLS certificate (tls_cert_file)")]
        if tls.client_ca_file:
            self.files.append((tls.client_ca_file, "client CA (tls_client_ca_file)"))
        self.contents = self.read()
        self.check_pair()

    def read(self) -> tuple[bytes, ...]:
        return tuple(_read(path, what) for path, what in self.files)

    def check_pair(self) -> None:
        """ValueError unless the key file belongs to the certificate file."""
        (key, _), (cert, _) = self.files[:2]
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"the TLS key {key!r} does not belong to the certificate {cert!r}, or "
                             f"either is not PEM: {exc}") from None

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        key, chain, *client_ca = self.contents
        return grpc.ssl_server_certificate_configuration([(key, chain)], client_ca[0] if client_ca else None)

    def renewed(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration if the files changed since the last read, else None (keep it)."""
        try:
            contents = self.read()
            if contents == self.contents:
                return None
            self.check_pair()
            if self.read() != contents:
                return None  # still being written: look again at the next handshake
            self.contents = contents
            configuration = self.configuration()
        except Exception as exc:  # half-written files: keep serving the previous certificate
            log.warning("TLS files changed but could not be loaded (%s); keeping the previous certificate",
                        exc)
            return None
        log.info("TLS certificate files changed: new connections get the renewed certificate")
        return configuration


def server_ssl_context(tls: TlsFiles, previous: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """The same files as an ``ssl`` context, for a port gRPC does not serve (a decode actor's bulk
    port). Read as they are now, so each new connection gets a renewed certificate; `previous`
    when they cannot be loaded (caught half-written), as the gRPC ports keep theirs."""
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.client_ca_file:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(tls.client_ca_file)
        return context
    except (OSError, ssl.SSLError) as exc:
        if previous is None:
            raise ValueError(f"cannot load the TLS files {tls.cert_file!r}, {tls.key_file!r}: {exc}") from None
        log.warning("TLS files changed but could not be loaded (%s); keeping the previous certificate", exc)
        return previous


def server_credentials(config: ServiceConfig) -> grpc.ServerCredentials | None:
    """The port's credentials, or None for plaintext."""
    tls = TlsFiles.of(config)
    return credentials_from(tls) if tls is not None else None


def credentials_from(tls: TlsFiles) -> grpc.ServerCredentials:
    files = CertificateFiles(tls)
    return grpc.dynamic_ssl_server_credentials(files.configuration(), files.renewed,
                                               require_client_authentication=bool(tls.client_ca_file))


__all__ = ["CertificateFiles", "TlsFiles", "credentials_from", "server_credentials", "server_ssl_context"]
