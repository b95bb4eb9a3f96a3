"""TLS files that cannot be read are named, on the service (at start) and on the client."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.client import TLS, CredentialsError
from shardstream.service.config import ServiceConfig
from shardstream.service.tls import CertificateFiles, TlsFiles, server_credentials
from tests.certs import make_pki


def test_no_tls_files_is_plaintext() -> None:
    assert server_credentials(ServiceConfig()) is None


def test_the_service_reads_its_certificate_key_and_client_ca(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = ServiceConfig(tls_cert_file=pki.server_cert, tls_key_file=pki.server_key, tls_client_ca_file=pki.ca)
    assert server_credentials(config) is not None


def test_a_missing_service_file_is_named(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = ServiceConfig(tls_cert_file=pki.server_cert, tls_key_file=str(tmp_path / "nope.pem"))
    with pytest.raises(ValueError, match=r"TLS key \(tls_key_file\) '.*nope\.pem'"):
        server_credentials(config)


def test_a_missing_client_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=r"CA file '.*absent\.pem'"):
        TLS(ca_file=str(tmp_path / "absent.pem")).credentials()


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(CredentialsError, match="go together"):
        TLS(cert_file="client.pem")


def test_server_name_overrides_the_checked_name() -> None:
    assert TLS(server_name="loader.internal").channel_options() == [
        ("grpc.ssl_target_name_override", "loader.internal")]
    assert TLS().channel_options() == []


def test_a_key_that_does_not_belong_to_the_certificate_is_refused_at_start(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = ServiceConfig(tls_cert_file=pki.server_cert, tls_key_file=pki.client_key)
    with pytest.raises(ValueError, match="does not belong to the certificate"):
        server_credentials(config)


def test_renewed_files_are_picked_up_and_half_written_ones_are_not(tmp_path: Path) -> None:
    first, second = make_pki(tmp_path / "first"), make_pki(tmp_path / "second")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(Path(first.server_cert).read_bytes())
    key.write_bytes(Path(first.server_key).read_bytes())
    files = CertificateFiles(TlsFiles(cert_file=str(cert), key_file=str(key)))
    assert files.renewed() is None  # nothing changed
    cert.write_bytes(Path(second.server_cert).read_bytes())  # the key is not there yet
    assert files.renewed() is None
    key.write_bytes(Path(second.server_key).read_bytes())
    assert files.renewed() is not None
    assert files.renewed() is None  # taken once


def test_tls_from_the_environment() -> None:
    assert TLS.from_env({}) is None
    assert TLS.from_env({"SHARDSTREAM_CLIENT_TLS_CA_FILE": ""}) is None  # empty means unset
    assert TLS.from_env({"SHARDSTREAM_CLIENT_TLS_CA_FILE": "/etc/ca.pem",
                         "SHARDSTREAM_CLIENT_TLS_CERT_FILE": "/etc/me.pem",
                         "SHARDSTREAM_CLIENT_TLS_KEY_FILE": "/etc/me.key",
                         "SHARDSTREAM_TLS_CERT_FILE": "/the/service/s/own"}) == TLS(
        ca_file="/etc/ca.pem", cert_file="/etc/me.pem", key_file="/etc/me.key")
    with pytest.raises(CredentialsError, match="go together"):
        TLS.from_env({"SHARDSTREAM_CLIENT_TLS_CERT_FILE": "/etc/me.pem"})


def test_decoders_are_verified_by_the_name_the_service_is_reached_by() -> None:
    tls = TLS(ca_file="ca.pem")
    assert tls.for_decoders("shardstream.ml.svc:50051").server_name == "shardstream.ml.svc"
    assert tls.for_decoders("127.0.0.1:50051").server_name == "127.0.0.1"
    assert tls.for_decoders("[::1]:50051").server_name == "::1"
    assert tls.for_decoders("dns:///loader.example:443").server_name == "loader.example"
    named = TLS(ca_file="ca.pem", server_name="loader.internal")
    assert named.for_decoders("10.0.0.7:50051") is named
