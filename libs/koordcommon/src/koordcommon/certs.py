"""A private CA and the certificates it signs: NATS, the webhook, the extender and their clients.

For local use, tests and the embedded demo; a cluster uses cert-manager or its own PKI. Keys
are P-256 and written 0600; certificates name their hosts in subjectAltName (Go ignores the CN).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CA", "Issued", "write_secret"]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def write_secret(path: Path, data: bytes) -> None:
    """Write `data` readable by its owner only, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class CA:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str, days: int = 365) -> None:
        self.days = days
        now = dt.datetime.now(dt.UTC)
        self._not_before, self._not_after = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, path: Path) -> Path:
        path.write_bytes(self.pem())
        return path

    def issue(
        self,
        out_dir: Path,
        stem: str,
        cn: str,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = True,
        client: bool = False,
    ) -> Issued:
        """`<stem>.crt` and `<stem>.key` in out_dir for the named hosts (server) or identity (client)."""
        key = ec.generate_private_key(ec.SECP256R1())
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        san = [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        out_dir.mkdir(parents=True, exist_ok=True)
        issued = Issued(out_dir / f"{stem}.crt", out_dir / f"{stem}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_secret(issued.key, _key_pem(key))
        return issued
