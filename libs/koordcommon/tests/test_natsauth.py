"""Bus authentication, TLS and per-role permissions, against a real nats-server.

The server runs the configuration `natsauth.server_config` writes from the roles table; each
check is a real client doing what its role may, or trying what it must not.
"""

from __future__ import annotations

import asyncio
import json
import logging

import nats
import pytest
from koordcommon import natsauth, subjects
from koordcommon.bus import Bus, BusError
from koordcommon.certs import CA
from koordcommon.natsauth import BusCredentials, Identity
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetricSample, NodeSLO, decode
from koordcommon.testing.nats import NatsServer, nats_server_binary

pytestmark = pytest.mark.skipif(nats_server_binary() is None, reason="nats-server not installed")

NS = "sec"
ROLES = ("metrics-collector", "slo-controller", "scheduler-extender")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A TLS server admitting node agents n1 and n2, and a few control-plane identities."""
    d = tmp_path_factory.mktemp("natsauth")
    ca = CA("test-nats-ca")
    ca_file = str(ca.write(d / "ca.crt"))
    server_tls = ca.issue(d, "server", "nats", dns=("localhost",), ips=("127.0.0.1",))
    seeds, identities = {}, []
    for who, role, node in [("n1", "node-agent", "n1"), ("n2", "node-agent", "n2"),
                            *((r, r, None) for r in ROLES)]:
        seed = natsauth.new_seed()
        path = natsauth.write_seed(d / f"{who}.nk", seed)
        seeds[who] = BusCredentials(nkey_seed_file=str(path), ca_file=ca_file)
        identities.append(Identity(role, natsauth.public_key(seed), node))
    config = natsauth.server_config(identities, namespace=NS, tls=(str(server_tls.cert), str(server_tls.key)))
    with NatsServer(config=config, tls=True) as server:
        yield server, seeds, ca_file


async def _bus(server, creds, service, node=None) -> Bus:
    bus = Bus(server.url, service=service, namespace=NS, credentials=creds, node=node, publish_timeout_s=1.0)
    return await bus.connect(timeout_s=10)


async def _raw(server, creds: BusCredentials, inbox: str):
    """A bare nats-py client with these credentials; permission errors land in `errors`."""
    errors: list[str] = []

    async def on_error(exc):
        errors.append(str(exc))

    nc = await nats.connect(server.url, error_cb=on_error, allow_reconnect=False,
                            **creds.connect_options(inbox))
    return nc, errors


def _sample(node: str) -> NodeMetricSample:
    return NodeMetricSample(node=node, node_usage=Resources(1000, 1 << 30), capacity=Resources(8000, 16 << 30))


async def test_forged_metrics_for_another_node_are_refused_and_never_reach_the_collector(secured, caplog):
    server, seeds, _ = secured
    caplog.set_level(logging.WARNING, logger="koordcommon.bus")
    collector = await _bus(server, seeds["metrics-collector"], "metrics-collector")
    agent = await _bus(server, seeds["n1"], "node-agent", node="n1")
    try:
        await collector.ensure_streams(subjects.METRICS_STREAM)
        # its own node: stored
        await agent.publish(subjects.metrics("n1"), agent.stamp(_sample("n1")))
        # another node's subject, with n1's credentials: the server refuses the publish
        with pytest.raises(BusError):
            await agent.publish(subjects.metrics("n2"), agent.stamp(_sample("n2")), retries=0)
        # ... and the refusal is the server's: a permissions violation naming the forged subject
        refusals = [r.getMessage() + " " + str(getattr(r, "error", "")) for r in caplog.records]
        assert any("permissions violation" in t.lower() and f"{NS}.koord.metrics.n2" in t for t in refusals), refusals
        # ... and a sample naming n2 on n1's own subject is n1's subject still (the collector
        # keys rows by subject node; see test_bounds for the body/subject check)
        seen: list[str] = []

        async def handle(batch):
            seen.extend(d.subject for d in batch)

        await collector.consume(subjects.METRICS_STREAM, "sec-collector", "koord.metrics.>", NodeMetricSample, handle)
        for _ in range(50):
            if seen:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)
        assert seen == [subjects.metrics("n1")]
    finally:
        await agent.close()
        await collector.close()


@pytest.mark.parametrize(
    "who, node, attempt",
    [
        ("n1", "n1", "sub koord.metrics.>"),  # sniffing every node's live samples
        ("n1", "n1", "sub _INBOX.>"),  # sniffing other clients' replies (acks, KV reads, pulled messages)
        ("n1", "n1", "sub _INBOX.node-agent.n2.>"),
        ("n1", "n1", "pub koord.nodemetric.n2"),
        ("n1", "n1", "pub koord.events.evict.n2"),
        ("n1", "n1", "pub koord.noderesource.n1"),  # batch allocatable is the slo-controller's
        ("n1", "n1", "pub $KV.{bucket}.n1"),  # writing its own NodeSLO
        ("n1", "n1", "pub $JS.API.STREAM.UPDATE.{ns}_KOORD_METRICS"),
        ("n1", "n1", "pub $JS.API.STREAM.DELETE.{ns}_KOORD_METRICS"),
        ("n1", "n1", "pub $JS.API.CONSUMER.CREATE.{ns}_KOORD_METRICS.x.{ns}.koord.metrics.>"),
        ("n1", "n1", "pub $JS.API.CONSUMER.CREATE.KV_{bucket}.x.$KV.{bucket}.n2"),  # another node's NodeSLO
        ("n1", "n1", "pub $JS.API.CONSUMER.CREATE.KV_{bucket}.x.$KV.{bucket}.>"),
        ("n1", "n1", "pub $JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.n2"),
        ("n1", "n1", "pub $JS.API.STREAM.MSG.GET.KV_{bucket}"),
        ("scheduler-extender", None, "pub koord.noderesource.n1"),  # the extender only reads
        ("scheduler-extender", None, "pub koord.metrics.n1"),
        ("scheduler-extender", None, "pub $KV.{bucket}.n1"),
        ("scheduler-extender", None, "pub $JS.API.STREAM.DELETE.{ns}_KOORD_NODEMETRIC"),
        ("metrics-collector", None, "pub koord.metrics.n1"),
        ("metrics-collector", None, "pub $KV.{bucket}.n1"),
    ],
)
async def test_what_a_role_must_not_do_is_refused(secured, who, node, attempt):
    server, seeds, _ = secured
    role = "node-agent" if node else who
    nc, errors = await _raw(server, seeds[who], subjects.inbox_prefix(role, node))
    verb, subject = attempt.split(" ", 1)
    bucket = subjects.namespaced_bucket(NS, subjects.NODESLO_BUCKET)
    subject = subject.format(ns=NS, bucket=bucket)
    if not subject.startswith(("$", "_")):
        subject = f"{NS}.{subject}"
    try:
        if verb == "sub":
            await nc.subscribe(subject)
        else:
            await nc.publish(subject, b"{}")
        await nc.flush(timeout=2)
        for _ in range(40):
            if errors:
                break
            await asyncio.sleep(0.05)
        assert any("permissions violation" in e.lower() for e in errors), errors
    finally:
        await nc.close()


async def test_node_agent_reads_its_own_nodeslo_and_no_other(secured):
    server, seeds, _ = secured
    slo = await _bus(server, seeds["slo-controller"], "slo-controller")
    agent = await _bus(server, seeds["n1"], "node-agent", node="n1")
    try:
        await slo.ensure_kv(subjects.NODESLO_BUCKET)
        for node in ("n1", "n2"):
            await slo.kv_put(subjects.NODESLO_BUCKET, node, slo.stamp(NodeSLO(node=node)).encode())
        got = []

        async def watch(key):
            async for k, raw in agent.kv_watch(subjects.NODESLO_BUCKET, key=key, create=False):
                got.append((k, decode(NodeSLO, raw).node))
                return

        await asyncio.wait_for(watch("n1"), 10)
        assert got == [("n1", "n1")]
        # The other node's key: the consumer is never created, so nothing ever arrives.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(watch("n2"), 3)
        assert got == [("n1", "n1")]
    finally:
        await agent.close()
        await slo.close()


@pytest.mark.parametrize("how", ["no credentials", "unknown key", "no TLS"])
async def test_a_client_without_a_known_identity_is_not_admitted(secured, tmp_path, how):
    server, seeds, ca_file = secured
    if how == "no credentials":
        creds = BusCredentials(ca_file=ca_file)
    elif how == "unknown key":
        creds = BusCredentials(str(natsauth.write_seed(tmp_path / "x.nk", natsauth.new_seed())), ca_file)
    else:
        creds = BusCredentials(seeds["n1"].nkey_seed_file)
    url = server.url if how != "no TLS" else server.url.replace("tls://", "nats://")
    with pytest.raises(Exception) as info:
        await nats.connect(url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0,
                           **creds.connect_options("_INBOX.x"))
    text = repr(info.value).lower()
    assert any(w in text for w in ("authorization", "tls", "ssl", "no servers")), text


def test_permissions_are_templates_of_one_table():
    """The same roles table gives per-node permissions, namespaced names and the sim extras."""
    p = natsauth.permissions("node-agent", "node.a", namespace="t1")
    pub = p["publish"]["allow"]
    assert "t1.koord.metrics.node_d_a" in pub and "t1.koord.nodemetric.node_d_a" in pub
    assert "t1.koord.events.*.node_d_a" in pub
    assert "$JS.API.CONSUMER.CREATE.KV_t1-koord-nodeslo.*.$KV.t1-koord-nodeslo.node_d_a" in pub
    assert not any(s.startswith("$JS.API.>") or s == "$JS.ACK.>" for s in pub)
    assert p["subscribe"]["allow"] == ["_INBOX.node-agent.node_d_a.>"]
    sim = natsauth.permissions("node-agent", None, sim=True)["publish"]["allow"]
    assert "koord.metrics.>" in sim and "koord.sim.>" in sim
    extender = natsauth.permissions("scheduler-extender")["publish"]["allow"]
    assert [s for s in extender if not s.startswith("$JS.API.")] == ["koord.deadletter.scheduler-extender"]
    # the chart's copy is the same table
    table = natsauth.permissions_table()
    assert table["node-agent"]["publish"]["allow"][0] == "{ns}.koord.metrics.{node}"
    json.dumps(table)


@pytest.mark.parametrize(
    "routes,expected_routes",
    [
        (["nats", "nats-2", "nats-3"], ["tls://koord-route:p%2Fw%40x@nats:6222", "tls://koord-route:p%2Fw%40x@nats-2:6222",
                                        "tls://koord-route:p%2Fw%40x@nats-3:6222"]),
        (["127.0.0.1:7001", "10.0.0.2"], ["tls://koord-route:p%2Fw%40x@127.0.0.1:7001",
                                          "tls://koord-route:p%2Fw%40x@10.0.0.2:6222"]),
    ],
)  # fmt: skip
def test_the_cluster_block_admits_only_the_route_user_over_verified_tls(routes, expected_routes):
    """Routes carry the credential (URL-quoted) to each server's route port; the block admits only
    that user, over TLS verified against the CA; the credential never shows in its repr."""
    creds = natsauth.RouteCredentials("p/w@x", "/s/nats-route.crt", "/s/nats-route.key", "/s/ca.crt")
    block = natsauth.cluster_config("koord", routes, creds)
    assert block == {
        "name": "koord",
        "listen": "0.0.0.0:6222",
        "authorization": {"user": "koord-route", "password": "p/w@x", "timeout": 2},
        "tls": {"cert_file": "/s/nats-route.crt", "key_file": "/s/nats-route.key", "ca_file": "/s/ca.crt",
                "verify": True, "timeout": 2},
        "routes": expected_routes,
    }  # fmt: skip
    assert "p/w@x" not in repr(creds)
    assert natsauth.server_config([], cluster=block)["cluster"] is block
    assert "cluster" not in natsauth.server_config([])
