"""A self-signed CA and a serving certificate for the admission webhook (local use and tests).

The API server calls a webhook service at `https://<svc>.<ns>.svc`, checks the serving
certificate against the `caBundle` of the webhook configuration and requires the DNS name in
the subjectAltName (Go ignores the CN). Usage:

    python -m slo_controller.certs --service slo-controller --namespace koordinator-system --out ./certs
"""

from __future__ import annotations

import argparse
import base64
from dataclasses import dataclass
from pathlib import Path

from koordcommon.certs import CA


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
    ca = CA(f"{service}-webhook-ca", days)
    issued = ca.issue(out, "tls", f"{service}.{namespace}.svc", tuple(dns_names(service, namespace, extra_dns)), ips)
    return CertPaths(ca.write(out / "ca.crt"), issued.cert, issued.key)


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
