"""Throw-away PKI for the TLS tests: a CA, a server certificate for 127.0.0.1/localhost (and any
addresses asked for), a client one, and another CA with a client certificate of its own."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str  # a CA that signed only the stranger's certificate
    stranger_cert: str  # a client certificate signed by other_ca, which the service does not trust
    stranger_key: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> str:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return str(path)


def _write_cert(cert: x509.Certificate, path: Path) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str,
                 issuer_key: ec.EllipticCurvePrivateKey, ca: bool = False,
                 server: bool = False, ips: Sequence[str] = ()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", *ips))]),
            critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, ips: Sequence[str] = ()) -> Pki:
    """The PKI in `directory`; the server certificate is also valid for the addresses `ips`."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = {name: ec.generate_private_key(ec.SECP256R1())
            for name in ("ca", "other", "server", "client", "stranger")}
    ca = _certificate("test CA", keys["ca"], "test CA", keys["ca"], ca=True)
    other = _certificate("other CA", keys["other"], "other CA", keys["other"], ca=True)
    server = _certificate("localhost", keys["server"], "test CA", keys["ca"], server=True, ips=ips)
    client = _certificate("trainer", keys["client"], "test CA", keys["ca"])
    stranger = _certificate("stranger", keys["stranger"], "other CA", keys["other"])
    return Pki(ca=_write_cert(ca, directory / "ca.pem"), other_ca=_write_cert(other, directory / "other-ca.pem"),
               server_cert=_write_cert(server, directory / "server.pem"),
               server_key=_write_key(keys["server"], directory / "server-key.pem"),
               client_cert=_write_cert(client, directory / "client.pem"),
               client_key=_write_key(keys["client"], directory / "client-key.pem"),
               stranger_cert=_write_cert(stranger, directory / "stranger.pem"),
               stranger_key=_write_key(keys["stranger"], directory / "stranger-key.pem"))
