"""TLS files that cannot be read are named, on the service (at start) and on the client."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardstream.client import TLS, InvalidJobSpec
from shardstream.service.config import ServiceConfig
from shardstream.service.tls import server_credentials
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
    with pytest.raises(InvalidJobSpec, match=r"CA file '.*absent\.pem'"):
        TLS(ca_file=str(tmp_path / "absent.pem")).credentials()


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(InvalidJobSpec, match="go together"):
        TLS(cert_file="client.pem")


def test_server_name_overrides_the_checked_name() -> None:
    assert TLS(server_name="loader.internal").channel_options() == [
        ("grpc.ssl_target_name_override", "loader.internal")]
    assert TLS().channel_options() == []
