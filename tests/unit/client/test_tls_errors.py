"""gRPC's last connection error over TLS, turned into what the person at the client can do about it.

The details are grpcio 1.85's own, as a client gets them from a service on port 0 (test_tls.py
runs the three certificate cases against a real service).
"""

from __future__ import annotations

import re

import pytest

from shardstream.client.tls import TLS, explain_handshake_failure

LAST = "failed to connect to all addresses; last error: "
CLOSED = LAST + "UNAVAILABLE: ipv4:127.0.0.1:40793: Socket closed"
UNVERIFIED = (LAST + "UNKNOWN: ipv4:127.0.0.1:40793: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
              "error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer "
              "certificate: OK")
WRONG_NAME = (LAST + "UNKNOWN: ipv4:127.0.0.1:44121: Custom verification check failed with error: "
              "UNAUTHENTICATED: Hostname Verification Check failed.")
PLAINTEXT = (LAST + "UNKNOWN: ipv4:127.0.0.1:39417: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: "
             "error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: Invalid certificate verification "
             "context: OK")
REFUSED = LAST + "UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused"

TRUSTING = TLS(ca_file="ca.pem")
PRESENTING = TLS(ca_file="ca.pem", cert_file="client.pem", key_file="client-key.pem")


@pytest.mark.parametrize(("tls", "detail", "says"), [
    (TRUSTING, CLOSED, r"requires a client certificate .* presented none: pass TLS\(cert_file=\.\.\., key_file"),
    (PRESENTING, CLOSED, r"did not accept this client's certificate 'client\.pem': it is not signed by the CA the "
                         r"service trusts \(its tls_client_ca_file\)"),
    (PRESENTING, UNVERIFIED, r"does not trust the service's certificate: pass TLS\(ca_file=\.\.\.\) with the CA "
                             r"that signed it \(ca_file 'ca\.pem' did not\)"),
    (TLS(), UNVERIFIED, r"does not trust the service's certificate: .*\(no ca_file was given, and the system's"),
    (TLS(ca_file="ca.pem", server_name="trainer.example"), WRONG_NAME,
     r"not issued for the name this client checks it by \('trainer\.example'.*pass TLS\(server_name=\.\.\.\)"),
    (TRUSTING, PLAINTEXT, r"does not speak TLS \(it answered in plaintext\): connect without tls="),
], ids=["no certificate", "certificate refused", "service not trusted", "no CA given", "another name",
        "plaintext port"])
def test_each_failure_names_its_cause_and_what_to_pass(tls: TLS, detail: str, says: str) -> None:
    why = explain_handshake_failure(tls, detail)
    assert why is not None
    assert re.search(says, why), why


def test_what_is_no_tls_failure_is_left_to_the_generic_message() -> None:
    assert explain_handshake_failure(TRUSTING, REFUSED) is None
    assert explain_handshake_failure(TRUSTING, "") is None
