"""Certificates made in the test: a CA, a server certificate for 127.0.0.1 and localhost, a client certificate,
all written as PEM files into a folder (the `cryptography` package, the [test] extra)."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pki:
    ca: str  # the CA certificate (what a client trusts)
    cert: str  # the server's certificate and key
    key: str
    client_cert: str  # a client certificate signed by the same CA, and its key
    client_key: str
    other_ca: str  # a CA that signed none of the above


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(ca, ca_key, cn: str, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return b.sign(ca_key, hashes.SHA256()), key


def make_pki(folder: str) -> Pki:
    os.makedirs(folder, exist_ok=True)
    ca, ca_key = _ca("oomwatch test CA")
    srv, srv_key = _leaf(ca, ca_key, "oomwatch test server", server=True)
    cli, cli_key = _leaf(ca, ca_key, "prometheus", server=False)
    other, _ = _ca("some other CA")
    pem = serialization.Encoding.PEM
    return Pki(
        ca=_write(os.path.join(folder, "ca.crt"), ca.public_bytes(pem)),
        cert=_write(os.path.join(folder, "server.crt"), srv.public_bytes(pem)),
        key=_write(os.path.join(folder, "server.key"), _key_pem(srv_key)),
        client_cert=_write(os.path.join(folder, "client.crt"), cli.public_bytes(pem)),
        client_key=_write(os.path.join(folder, "client.key"), _key_pem(cli_key)),
        other_ca=_write(os.path.join(folder, "other-ca.crt"), other.public_bytes(pem)),
    )


def bcrypt_hash(password: str, rounds: int = 4) -> str:
    """A bcrypt hash as a web config takes it (cost 4: fast tests; real configs use 10 or more)."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


def secret_file(folder: str, name: str, secret: str) -> str:
    """A secret written the way `echo` writes it (with a newline), readable by its owner only."""
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(secret + "\n")
    os.chmod(path, 0o600)
    return path
