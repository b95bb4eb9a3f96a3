"""Connecting to a service whose gRPC port speaks TLS (the service's `tls_*` settings).

A training script passes ``tls=TLS(...)``, or leaves it out and lets the
environment decide (``TLS.from_env``): a platform that mounts certificates into
every training pod sets ``SHARDSTREAM_CLIENT_TLS_CA_FILE`` (and the client certificate's
``SHARDSTREAM_CLIENT_TLS_CERT_FILE`` / ``SHARDSTREAM_CLIENT_TLS_KEY_FILE``,
``SHARDSTREAM_CLIENT_TLS_SERVER_NAME``) once, and no script changes.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import grpc

from shardstream.proto.errors import CredentialsError

ENV_PREFIX = "SHARDSTREAM_CLIENT_TLS_"


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
            raise CredentialsError("TLS cert_file and key_file go together: set both, or neither")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TLS | None:
        """TLS from SHARDSTREAM_CLIENT_TLS_<FIELD> variables; None when none is set (plaintext)."""
        environ = os.environ if environ is None else environ
        values = {f.name: environ.get(ENV_PREFIX + f.name.upper()) or None for f in fields(cls)}
        return cls(**values) if any(values.values()) else None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "CA file") if self.ca_file else None,
            private_key=_read(self.key_file, "key file") if self.key_file else None,
            certificate_chain=_read(self.cert_file, "certificate file") if self.cert_file else None)

    def ssl_context(self) -> ssl.SSLContext:
        """The same verification for a plain socket (the decoders' bulk sockets, bulk_socket.py)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file and self.key_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def for_decoders(self, service_address: str) -> TLS:
        """The settings for the decode actors' batch servers (the direct data plane). They present
        the service's own certificate and are reached by IP, so they are verified by the name the
        service is: server_name, else the host of the service's address."""
        if self.server_name:
            return self
        host = service_address.rsplit(":", 1)[0].removeprefix("dns:///").strip("[]")
        return replace(self, server_name=host)

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def open_channel(address: str, tls: TLS | None, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    """A channel to `address`: over TLS with `tls`, else plaintext."""
    if tls is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, tls.credentials(), options=[*options, *tls.channel_options()])


def explain_handshake_failure(tls: TLS, detail: str) -> str | None:
    """What a person can do about a TLS connection to the service that failed, from gRPC's last
    connection error (`detail`, an UNAVAILABLE status's details) and what this client presented;
    None when `detail` is not a TLS failure (nothing listening, say).

    gRPC's server closes the connection without an alert when it refuses a client certificate,
    whether none was presented or one it cannot verify, so those two are told apart by what this
    client sent."""
    if "CERTIFICATE_VERIFY_FAILED" in detail:
        tried = (f"ca_file {tls.ca_file!r} did not" if tls.ca_file
                 else "no ca_file was given, and the system's CA certificates did not")
        return ("this client does not trust the service's certificate: pass TLS(ca_file=...) with the CA that "
                f"signed it ({tried})")
    if "Hostname Verification" in detail or "not in peer certificate" in detail:
        return ("the service's certificate is not issued for the name this client checks it by "
                f"({tls.server_name!r}, else the address's host): pass TLS(server_name=...) with a name the "
                "certificate holds")
    if "WRONG_VERSION_NUMBER" in detail:
        return ("the service's port does not speak TLS (it answered in plaintext): connect without tls=, or "
                "start the service with --tls-cert and --tls-key")
    if "Socket closed" in detail:  # the service closed the connection in the TLS handshake
        if not tls.cert_file:
            return ("the service requires a client certificate (mutual TLS) and this client presented none: pass "
                    "TLS(cert_file=..., key_file=...) with a certificate signed by the CA the service trusts (its "
                    "tls_client_ca_file)")
        return (f"the service did not accept this client's certificate {tls.cert_file!r}: it is not signed by the "
                "CA the service trusts (its tls_client_ca_file), or it has expired, or it is not meant for client "
                "authentication")
    return None


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CredentialsError(f"cannot read the TLS {what} {path!r}: {exc.strerror or exc}") from None


__all__ = ["TLS", "explain_handshake_failure", "open_channel"]
