"""Credentials for a local or compose installation: one bus identity per service, a CA and the
NATS server's certificate, the server configuration that admits exactly those identities with
their roles' permissions (koordcommon.natsauth), and the static API token.

`koordctl up` calls `init_secrets` for its private NATS server; `koordctl secure-init` writes the
same files for docker-compose (its `secrets-init` service). A cluster keeps its own: see the
Helm chart's `nats.auth` values.

Given the servers of a NATS cluster (`routes`), the configuration also closes the route port
(natsauth.cluster_config): a route password (`nats-route.password`) and a route certificate
(`nats-route.crt`/`.key`, client and server use, from the same CA) that every server holds.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path

from koordcommon import natsauth
from koordcommon.certs import CA, write_secret

# Every identity of an installation on the simulated cluster: the six services, the command
# line and the sim driver. The simulated node agent speaks for every node (natsauth: node None).
IDENTITIES = (
    "node-agent", "metrics-collector", "slo-controller", "scheduler-extender", "descheduler", "recommender",
    "koordctl", "sim-driver",
)  # fmt: skip


@dataclass(frozen=True)
class Secrets:
    dir: Path
    ca_file: Path
    server_cert: Path
    server_key: Path
    nats_config: Path
    api_token_file: Path
    route_password_file: Path | None = None  # a cluster's route credential (None: one server)

    def seed_file(self, identity: str) -> Path:
        return self.dir / f"{identity}.nk"

    def service_env(self, identity: str, nats: bool = True) -> dict[str, str]:
        """The variables that give a process its identity (the shared names every service reads)."""
        env = {"KOORD_API_TOKEN_FILE": str(self.api_token_file)}
        if nats:
            env.update({"NATS_NKEY_SEED_FILE": str(self.seed_file(identity)), "NATS_CA_FILE": str(self.ca_file)})
        return env

    def bus_credentials(self, identity: str) -> natsauth.BusCredentials:
        return natsauth.BusCredentials(str(self.seed_file(identity)), str(self.ca_file))


def init_secrets(
    out_dir: Path,
    namespace: str = "",
    sim: bool = True,
    hosts: tuple[str, ...] = ("localhost",),
    store_dir: str | None = None,
    mounted_at: str | None = None,
    routes: tuple[str, ...] = (),
    cluster_name: str = "koord",
) -> Secrets:
    """Write every secret of one installation into `out_dir` (files 0600, the directory 0700).

    `hosts`: the names clients reach NATS by (the certificate's subjectAltNames, with 127.0.0.1);
    `mounted_at`: where the server will find the directory when it is mounted elsewhere (compose);
    `routes`: every server of a NATS cluster (host or host:port of its route port, each server
    included): the configuration gets the cluster block, authenticated and TLS both ways.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o700)
    ca = CA("koord-local-ca")
    ca_file = ca.write(out_dir / "ca.crt")
    server = ca.issue(out_dir, "nats-server", "nats", dns=tuple(dict.fromkeys(("localhost", *hosts))), ips=("127.0.0.1",))
    identities = []
    for name in IDENTITIES:
        seed = natsauth.new_seed()
        natsauth.write_seed(out_dir / f"{name}.nk", seed)
        identities.append(natsauth.Identity(name, natsauth.public_key(seed)))
    base = Path(mounted_at) if mounted_at else out_dir
    cluster, route_password_file = None, None
    if routes:
        route_password_file = out_dir / "nats-route.password"
        password = natsauth.token_urlsafe()
        write_secret(route_password_file, (password + "\n").encode())
        route = ca.issue(out_dir, "nats-route", "nats-route", *_route_names(routes), server=True, client=True)
        creds = natsauth.RouteCredentials(
            password, str(base / route.cert.name), str(base / route.key.name), str(base / ca_file.name)
        )
        cluster = natsauth.cluster_config(cluster_name, routes, creds)
    config = natsauth.server_config(
        identities, namespace, sim, tls=(str(base / server.cert.name), str(base / server.key.name)),
        store_dir=store_dir, cluster=cluster,
    )  # fmt: skip
    nats_config = out_dir / "nats-server.conf"
    write_secret(nats_config, json.dumps(config, indent=1).encode())  # public keys only, but the layout stays private
    token = out_dir / "api-token"
    write_secret(token, (natsauth.token_urlsafe() + "\n").encode())
    return Secrets(out_dir, ca_file, server.cert, server.key, nats_config, token, route_password_file)


def _route_names(routes: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(DNS names, IP addresses) of the route certificate: every server's host, as the others
    dial it (they verify it by that name), and localhost."""
    dns, ips = ["localhost"], ["127.0.0.1"]
    for route in routes:
        host = natsauth.route_address(route).rpartition(":")[0].strip("[]")
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            dns.append(host)
    return tuple(dict.fromkeys(dns)), tuple(dict.fromkeys(ips))


def parse_owner(text: str) -> tuple[int, int]:
    """`UID` or `UID:GID` (numeric: the user of the images, which the writing container may not
    know by name); GID defaults to UID."""
    uid, _, gid = text.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise ValueError(f"give a numeric UID or UID:GID, not {text!r}")
    return int(uid), int(gid or uid)


def hand_over(out_dir: Path, uid: int, gid: int) -> None:
    """Give the directory and every file in it to uid:gid, modes unchanged (0700 / 0600): the
    services read their seeds and the token as that user, the NATS server as root."""
    for path in (out_dir, *sorted(out_dir.iterdir())):
        os.chown(path, uid, gid)
