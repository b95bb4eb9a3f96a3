"""The gRPC port over TLS and mutual TLS: batches arrive as in plaintext; a client that speaks the
wrong protocol, does not trust the service's CA, presents no certificate or one from a CA the
service does not trust gets an error naming its own cause and what to pass; and a renewed
certificate is served without a restart."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardstream.client import TLS, RemoteLoader, ServiceUnavailable
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.certs import Pki, make_pki
from tests.datasets import oracle_batches, write_indexed

N = 11


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("tls-data"))
    write_indexed(directory, [6, 5])
    return directory


def _serve(pki: Pki, client_ca: str | None) -> tuple[Service, str]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
                                                tls_client_ca_file=client_ca))
    return running, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def tls_address(local_ray: None, pki: Pki) -> Iterator[str]:
    running, address = _serve(pki, client_ca=None)
    yield address
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def mtls_address(local_ray: None, pki: Pki) -> Iterator[str]:
    running, address = _serve(pki, client_ca=pki.ca)
    yield address
    running.stop(grace=1.0)


def _epoch(address: str, dataset: str, tls: TLS | None, connect_timeout: float = 30.0) -> list[list[int]]:
    with RemoteLoader(address, dataset=dataset, batch_size=4, seed=2, world_size=1, rank=0, tls=tls,
                      connect_timeout=connect_timeout) as loader:
        return [b["idx"].tolist() for b in loader]


def test_batches_over_tls(tls_address: str, dataset: str, pki: Pki) -> None:
    assert _epoch(tls_address, dataset, TLS(ca_file=pki.ca)) == oracle_batches(N, 1, 0, 4, True, 2, False, 0)


def test_a_plaintext_client_is_told_to_use_tls(tls_address: str, dataset: str) -> None:
    with pytest.raises(ServiceUnavailable, match="in plaintext: if the service speaks TLS"):
        _epoch(tls_address, dataset, None, connect_timeout=3)


# What each refusal's message must say, and no other's: a phrase naming the cause and what to pass.
NO_CERTIFICATE = (r"the service requires a client certificate \(mutual TLS\) and this client presented none: "
                  r"pass TLS\(cert_file=\.\.\., key_file=\.\.\.\)")
UNTRUSTED_CERTIFICATE = (r"the service did not accept this client's certificate '[^']*stranger\.pem': "
                         r"it is not signed by the CA the service trusts \(its tls_client_ca_file\)")
UNTRUSTED_SERVICE = (r"this client does not trust the service's certificate: "
                     r"pass TLS\(ca_file=\.\.\.\) with the CA that signed it")
CAUSES = (NO_CERTIFICATE, UNTRUSTED_CERTIFICATE, UNTRUSTED_SERVICE)


def test_a_client_that_trusts_another_ca_is_refused(tls_address: str, dataset: str, pki: Pki) -> None:
    with pytest.raises(ServiceUnavailable, match=f"over TLS: {UNTRUSTED_SERVICE} \\(ca_file '[^']*other-ca\\.pem'"):
        _epoch(tls_address, dataset, TLS(ca_file=pki.other_ca), connect_timeout=2)


@pytest.mark.parametrize("case", ["no certificate", "certificate from another CA", "service not trusted"])
def test_each_mutual_tls_refusal_names_its_own_cause(mtls_address: str, dataset: str, pki: Pki, case: str) -> None:
    """gRPC reports the first two alike (the service closed the connection in the handshake); the
    client tells them apart by what it presented."""
    tls, cause = {
        "no certificate": (TLS(ca_file=pki.ca), NO_CERTIFICATE),
        "certificate from another CA": (TLS(ca_file=pki.ca, cert_file=pki.stranger_cert, key_file=pki.stranger_key),
                                        UNTRUSTED_CERTIFICATE),
        "service not trusted": (TLS(ca_file=pki.other_ca, cert_file=pki.client_cert, key_file=pki.client_key),
                                UNTRUSTED_SERVICE),
    }[case]
    with pytest.raises(ServiceUnavailable, match=f"at {re.escape(mtls_address)} over TLS: {cause}") as refused:
        _epoch(mtls_address, dataset, tls, connect_timeout=2)
    assert [other for other in CAUSES if other != cause and re.search(other, str(refused.value))] == []


def test_mutual_tls_serves_a_client_with_a_certificate_of_its_ca(mtls_address: str, dataset: str, pki: Pki) -> None:
    trainer = TLS(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
    assert _epoch(mtls_address, dataset, trainer) == oracle_batches(N, 1, 0, 4, True, 2, False, 0)


def test_tls_settings_from_the_environment(mtls_address: str, dataset: str, pki: Pki,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A platform sets them in every training pod; the script passes no tls=."""
    for name, path in (("CA_FILE", pki.ca), ("CERT_FILE", pki.client_cert), ("KEY_FILE", pki.client_key)):
        monkeypatch.setenv(f"SHARDSTREAM_CLIENT_TLS_{name}", path)
    assert _epoch(mtls_address, dataset, None) == oracle_batches(N, 1, 0, 4, True, 2, False, 0)


def test_status_over_mutual_tls(mtls_address: str, pki: Pki) -> None:
    cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
    result = subprocess.run([cli, "status", mtls_address, "--tls-ca", pki.ca, "--tls-cert", pki.client_cert,
                             "--tls-key", pki.client_key], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "1 decoder(s) on 1 node(s)" in result.stdout


def test_a_renewed_certificate_is_served_without_a_restart(local_ray: None, dataset: str,
                                                          tmp_path: Path) -> None:
    """As cert-manager renews a mounted Secret: new connections get the new certificate."""
    old, new = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(old.server_cert, cert)
    shutil.copyfile(old.server_key, key)
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                tls_cert_file=str(cert), tls_key_file=str(key)))
    address = f"127.0.0.1:{port}"
    try:
        expected = oracle_batches(N, 1, 0, 4, True, 2, False, 0)
        assert _epoch(address, dataset, TLS(ca_file=old.ca)) == expected
        shutil.copyfile(new.server_key, key)
        shutil.copyfile(new.server_cert, cert)
        assert _epoch(address, dataset, TLS(ca_file=new.ca)) == expected
        with pytest.raises(ServiceUnavailable, match="over TLS"):
            _epoch(address, dataset, TLS(ca_file=old.ca), connect_timeout=3)
    finally:
        running.stop(grace=1.0)


def test_the_direct_data_plane_over_mutual_tls(local_ray: None, dataset: str, pki: Pki) -> None:
    """Ranks fetch from the decode actors' own ports (gRPC and bulk): those speak TLS too, with the
    same files, and want the same client certificates. Clients connect to them by IP, so they name
    the certificate."""
    import grpc

    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
                                                tls_client_ca_file=pki.ca))
    address = f"127.0.0.1:{port}"
    try:
        trainer = TLS(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key, server_name="localhost")
        for shared_memory in (True, False):  # False: a decoder on another host, its bulk socket over TLS
            with RemoteLoader(address, dataset=dataset, batch_size=4, seed=2, world_size=1, rank=0,
                              tls=trainer, shared_memory=shared_memory) as loader:
                (decoder,) = loader.job.batch_servers
                assert [b["idx"].tolist() for b in loader] == oracle_batches(N, 1, 0, 4, True, 2, False, 0)
                assert loader.stats.bulk_batches == (0 if shared_memory else loader.stats.batches)
        with grpc.insecure_channel(decoder) as channel:  # plaintext to a decoder: refused
            with pytest.raises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(channel).result(timeout=3)
    finally:
        running.stop(grace=1.0)
