"""The route port of a NATS cluster is closed to anything but the cluster's own servers.

Three nats-server processes run the configuration `koordctl secure-init --route ...` writes (its
`cluster` block: the route user and password, TLS verified both ways against the installation's
CA, routes to every server). The cluster forms: a NodeResource the slo-controller publishes on one
server, into a stream replicated on all three, reaches the extender connected to another. A server
that dials the route port without the credentials never joins: one with no TLS and no password is
cut at the TLS handshake, one holding the route certificate but not the password is refused as
an authorization failure; neither appears in any member's /routez, and the route password is in
no server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from koordcommon import natsauth, subjects
from koordcommon.bus import Bus
from koordcommon.certs import write_secret
from koordcommon.schemas import NodeResource, Resources
from koordcommon.testing.nats import nats_server_binary
from koordcommon.testing.natscluster import NatsCluster
from koordcommon.testing.net import free_port, wait_http_ready
from koordcommon.testing.processes import stop
from koordctl.secure import init_secrets

pytestmark = pytest.mark.e2e

SIZE = 3
REFUSAL_WAIT_S = 8.0  # a refused server redials about every second; a few attempts are enough


@pytest.fixture
def secured(tmp_path):
    ports = [free_port() for _ in range(SIZE)]
    secrets = init_secrets(tmp_path / "secrets", routes=tuple(f"127.0.0.1:{p}" for p in ports))
    config = json.loads(secrets.nats_config.read_text())
    cluster = NatsCluster(SIZE, store_dir=tmp_path / "nats", config=config, cluster_ports=ports, tls=True)
    try:
        cluster.start(timeout=15)
        yield cluster, secrets
    finally:
        cluster.stop()


def monitor(port: int, endpoint: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{endpoint}", timeout=2) as resp:
        return json.load(resp)


def route_peers(monitor_port: int) -> set[str]:
    """The servers a member has routes to (pooled routes name the same server several times)."""
    return {r.get("remote_name", "") for r in monitor(monitor_port, "routez")["routes"]}


def peers_of_every_member(cluster: NatsCluster, timeout: float = 10.0) -> list[set[str]]:
    """Each member's route peers once every member routes to all the others (a member may
    report healthy with a quorum of routes, before the last one is up), or as they stand at the
    timeout."""
    deadline = time.monotonic() + timeout
    while True:
        peers = [route_peers(p) for p in cluster.monitor_ports]
        if all(len(p) == SIZE - 1 for p in peers) or time.monotonic() > deadline:
            return peers
        time.sleep(0.1)


def others(cluster: NatsCluster) -> list[set[str]]:
    return [{cluster.server_name(j) for j in range(SIZE) if j != i} for i in range(SIZE)]


@contextlib.contextmanager
def intruder(tmp_path: Path, name: str, target_port: int, config: dict | None = None):
    """A nats-server that dials the cluster's route port as a server would; yields its monitoring
    port and log."""
    binary = nats_server_binary()
    own = tmp_path / name
    own.mkdir()
    monitor, route_port = free_port(), free_port()
    cmd = [binary, "-n", name, "-a", "127.0.0.1", "-p", str(free_port()), "-m", str(monitor)]
    if config is None:  # no TLS, no credentials
        cmd += ["--cluster_name", "koord", "--cluster", f"nats://127.0.0.1:{route_port}",
                "--routes", f"nats://127.0.0.1:{target_port}"]  # fmt: skip
    else:
        conf = own / "nats-server.conf"
        write_secret(conf, json.dumps({"cluster": config}).encode())
        cmd += ["-c", str(conf)]
    log = own / "nats-server.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_http_ready(f"http://127.0.0.1:{monitor}/varz", 10)
        yield monitor, log
    finally:
        stop(proc, timeout_s=5)


async def test_the_cluster_forms_over_authenticated_tls_routes(secured):
    cluster, secrets = secured
    assert peers_of_every_member(cluster) == others(cluster)
    servers = cluster.url.split(",")
    # each service as itself (the generated identities and permissions), on a different server,
    # with the cluster's replication (NATS_STREAM_REPLICAS, as deployed)
    slo, extender = (
        Bus(servers[i], service=name, credentials=secrets.bus_credentials(name), stream_replicas=SIZE)
        for i, name in enumerate(("slo-controller", "scheduler-extender"))
    )
    await slo.connect(timeout_s=10)
    await extender.connect(timeout_s=10)
    try:
        # one client on s0, the other on s1, none on s2
        assert [monitor(p, "connz")["num_connections"] for p in cluster.monitor_ports] == [1, 1, 0]
        await slo.ensure_streams(subjects.NODERESOURCE_STREAM)
        info = await slo.js.stream_info(slo.wire_stream(subjects.NODERESOURCE_STREAM))
        assert {info.cluster.leader, *(r.name for r in info.cluster.replicas)} == {"s0", "s1", "s2"}
        sent = NodeResource(node="node-7", batch=Resources(12_000, 24 << 30), reason="routed")
        await slo.publish(subjects.noderesource("node-7"), sent)

        async def first():
            async for d in extender.tail(subjects.NODERESOURCE_STREAM, "koord.noderesource.>", NodeResource):
                return d.msg

        got = await asyncio.wait_for(first(), 10)
        assert (got.node, got.batch, got.reason, got.source) == ("node-7", Resources(12_000, 24 << 30), "routed", slo.source)
    finally:
        await extender.close()
        await slo.close()


def test_a_server_without_the_route_credentials_never_joins(secured, tmp_path):
    cluster, secrets = secured
    target = cluster.cluster_ports[0]
    password = secrets.route_password_file.read_text().strip()
    config = json.loads(secrets.nats_config.read_text())["cluster"]
    # holds the route certificate and key (TLS succeeds both ways) but guesses the password
    guessed = natsauth.RouteCredentials(
        "not-the-password", config["tls"]["cert_file"], config["tls"]["key_file"], config["tls"]["ca_file"]
    )
    certified = natsauth.cluster_config("koord", [f"127.0.0.1:{target}"], guessed, listen=f"127.0.0.1:{free_port()}")
    member_log = cluster.log_path(0)
    with (
        intruder(tmp_path, "plain", target) as (plain_monitor, plain_log),
        intruder(tmp_path, "certified", target, certified) as (cert_monitor, cert_log),
    ):
        # who was refused, the log that says so, and how: s0 cuts the plain one at the TLS
        # handshake; it answers the certified one's CONNECT with the protocol's -ERR
        refusals = {
            "plain": (member_log, "tls route handshake error"),
            "certified": (cert_log, "'authorization violation'"),
        }

        def refused() -> dict[str, bool]:
            return {who: text in log.read_text(errors="replace").lower() for who, (log, text) in refusals.items()}

        deadline = time.monotonic() + REFUSAL_WAIT_S
        while not all(refused().values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert refused() == {"plain": True, "certified": True}, f"not refused within {REFUSAL_WAIT_S} s"
        assert peers_of_every_member(cluster) == others(cluster)  # "plain" and "certified" are in none
        assert monitor(plain_monitor, "routez")["num_routes"] == 0
        assert monitor(cert_monitor, "routez")["num_routes"] == 0
    logs = [cluster.log_path(i) for i in range(SIZE)] + [plain_log, cert_log]
    assert not [str(p) for p in logs if password in p.read_text(errors="replace")], "the route password was logged"
