"""A self-signed CA and a serving certificate for the admission webhook (local use and tests).

The API server calls a webhook service at `https://<svc>.<ns>.svc`, checks the serving
certificate against the `caBundle` of the webhook configuration and requires the DNS name in
the subjectAltName (Go ignores the CN). Usage:

    python -m slo_controller.certs --service slo-controller --namespace koordinator-system --out ./certs
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertPaths:
    ca_cert: Path
    cert: Path
    key: Path

    def ca_bundle_b64(self) -> str:
        """The value for `clientConfig.caBundle` in a webhook configuration."""
        return base64.b64encode(self.ca_cert.read_bytes()).decode()


def dns_names(service: str, namespace: str, extra: tuple[str, ...] = ()) -> list[str]:
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    return names + [n for n in extra if n not in names]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def generate(
    out_dir: str | Path,
    service: str = "slo-controller",
    namespace: str = "koordinator-system",
    days: int = 365,
    extra_dns: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1",),
) -> CertPaths:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    not_before, not_after = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{service}-webhook-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.DNSName(n) for n in dns_names(service, namespace, extra_dns)]
    san += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{service}.{namespace}.svc"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    paths = CertPaths(out / "ca.crt", out / "tls.crt", out / "tls.key")
    paths.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(paths.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the key is never world-readable
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Generate a CA and a serving certificate for the webhook.")
    ap.add_argument("--out", default="certs", help="output directory (ca.crt, tls.crt, tls.key)")
    ap.add_argument("--service", default="slo-controller")
    ap.add_argument("--namespace", default="koordinator-system")
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    args = ap.parse_args(argv)
    paths = generate(args.out, args.service, args.namespace, args.days, ("localhost", *args.dns))
    print(f"wrote {paths.ca_cert}, {paths.cert}, {paths.key}")
    print(f"caBundle: {paths.ca_bundle_b64()}")


if __name__ == "__main__":
    main()
