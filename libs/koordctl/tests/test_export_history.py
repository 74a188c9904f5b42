"""The round trip of a cluster's history: the collector stores real samples (SQLite and PostgreSQL),
`koordctl export-history` exports them over HTTP, koordsim's history scenario replays them, and
the simulated nodes and pods use what was stored (exact values, by hand)."""

from __future__ import annotations

import json
import time

import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetricSample, Owner, PodUsage
from koordctl.cli import app
from koordsim.cluster import SimCluster
from koordsim.history import spec as history_spec
from typer.testing import CliRunner

from .conftest import ThreadServer

GIB = 1 << 30
MIN = 60_000
T0 = (int(time.time() * 1000) - 30 * MIN) // MIN * MIN  # half an hour ago: raw samples
runner = CliRunner()


def pod(node: str, name: str, cls, prio, qos, cpu: int, mem: int, req=Resources(), lim=Resources(), batch=Resources()):
    return PodUsage(uid=f"uid-{name}", namespace="shop" if cls is not PriorityClass.BATCH else "jobs", name=name,
                    owner=Owner(kind="ReplicaSet", name=f"{name[:-2]}-7f9c"), qos=qos, priority_class=cls,
                    priority=prio, requests=req, limits=lim, batch_requests=batch, usage=Resources(cpu, mem))  # fmt: skip


def stored_samples() -> list[NodeMetricSample]:
    """node-1: web-1 (prod), cache-1 (mid), etl-1 (batch); web-1 missing at minute 6.
    node-2: web-2 (prod); node-2 reported nothing at minute 4."""
    out = []
    for m in range(10):
        ts = T0 + m * MIN
        pods1 = [
            pod("node-1", "web-1", PriorityClass.PROD, 9500, QoSClass.LS, 1000 + 20 * m, 2 * GIB,
                Resources(2000, 4 * GIB), Resources(4000, 8 * GIB)),
            pod("node-1", "cache-1", PriorityClass.MID, 7500, QoSClass.LS, 200 + m, GIB // 2, Resources(500, GIB)),
            pod("node-1", "etl-1", PriorityClass.BATCH, 5500, QoSClass.BE, 600, GIB, batch=Resources(1000, 2 * GIB)),
        ]  # fmt: skip
        if m == 6:
            pods1 = pods1[1:]
        out.append(NodeMetricSample(node="node-1", ts=ts, seq=ts, source="node-agent/node-1", window_s=60,
                                    capacity=Resources(16_000, 64 * GIB), allocatable=Resources(15_000, 62 * GIB),
                                    node_usage=Resources(3000 + 10 * m, 8 * GIB + m), pods=pods1))  # fmt: skip
        if m != 4:
            web2 = pod("node-2", "web-2", PriorityClass.PROD, 9500, QoSClass.LSR, 800 + m, GIB,
                       Resources(1000, 2 * GIB), Resources(1000, 2 * GIB))  # fmt: skip
            out.append(NodeMetricSample(node="node-2", ts=ts, seq=ts, source="node-agent/node-2", window_s=60,
                                        capacity=Resources(8000, 32 * GIB), allocatable=Resources(7500, 31 * GIB),
                                        node_usage=Resources(2000 + 5 * m, 6 * GIB), pods=[web2]))  # fmt: skip
    return out


@pytest.fixture
def collector(database_url, tmp_path):
    from metrics_collector.core.rows import build_rows
    from metrics_collector.main import build
    from metrics_collector.settings import Settings
    from metrics_collector.store import Store

    store = Store.open(database_url, tmp_path, migrate=True)
    store.write(build_rows(stored_samples()))
    store.close()
    svc, _ = build(Settings(database_url=database_url, data_dir=str(tmp_path)))
    svc.mark_started()
    with ThreadServer(svc.app) as server:
        from koordcommon.testing.net import wait_http_ready

        wait_http_ready(server.url + "/api/v1/nodes", timeout=15)
        yield server.url


# minute -> node-1 cpu, node-1 memory, node-2 cpu, web-1 cpu, cache-1 cpu, web-2 cpu in the simulated cluster
REPLAYED = [
    (0, 3000 - 600, 7 * GIB, 2000, 1000, 200, 800),  # node-1: what it recorded less etl-1 (batch: left out)
    (4, 3040 - 600, 7 * GIB + 4, 2025, 1080, 204, 805),  # node-2 silent at minute 4: the larger side (2025, 805)
    (6, 3060 - 600, 7 * GIB + 6, 2030, 1140, 206, 806),  # web-1 missing at minute 6: the larger side (1140)
    (9, 3090 - 600, 7 * GIB + 9, 2045, 1180, 209, 809),
]


def export(url: str, out, *extra: str):
    r = runner.invoke(app, ["export-history", "--collector", url, "--since", str(T0), "--until", str(T0 + 10 * MIN),
                            "--out", str(out), *extra], catch_exceptions=False)  # fmt: skip
    assert r.exit_code == 0, r.output
    return r


def replayed(out) -> list[tuple]:
    cluster = SimCluster(history_spec(out, speed=0))
    pods = cluster.state.pods
    got = []
    for m, *_ in REPLAYED:
        t = T0 + m * MIN
        n1 = cluster.node_usage("node-1", t)
        got.append((m, n1.cpu_milli, n1.memory_bytes, cluster.node_usage("node-2", t).cpu_milli,
                    *(cluster.pod_usage(pods[k], t).cpu_milli for k in ("shop/web-1", "shop/cache-1", "shop/web-2"))))  # fmt: skip
    return got


def test_stored_samples_export_and_replay_exactly(collector, tmp_path):
    out = tmp_path / "history"
    r = export(collector, out)
    assert f"{out}: 2 nodes, 4 pods (3 online, 1 batch/free), 38 pod samples at raw resolution" in r.stdout
    assert (out / "pod_usage.csv").read_text().count("\n") == 1 + 38
    assert replayed(out) == REPLAYED
    cluster = SimCluster(history_spec(out, speed=0))
    assert sorted(cluster.state.pods) == ["shop/cache-1", "shop/web-1", "shop/web-2"]
    web1, web2 = cluster.state.pods["shop/web-1"], cluster.state.pods["shop/web-2"]
    assert (web1.uid, web1.node_name, web1.priority_class.value, web1.qos.value) == ("uid-web-1", "node-1", "koord-prod", "LS")
    assert (web2.qos.value, web2.request_resources(), web2.limit_resources()) == ("LSR", Resources(1000, 2 * GIB), Resources(1000, 2 * GIB))
    assert cluster.state.pods["shop/cache-1"].priority_class.value == "koord-mid"
    n1 = cluster.state.nodes["node-1"]
    assert (n1.capacity["cpu"], n1.allocatable["cpu"], n1.allocatable["memory"]) == (16_000, 15_000, 62 * GIB)


def test_parquet_export_with_node_labels_replays_the_same(collector, tmp_path):
    kubectl = tmp_path / "nodes.json"
    kubectl.write_text(json.dumps({"kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "node-1", "labels": {"pool": "web", "kubernetes.io/hostname": "node-1"}}},
    ]}))  # fmt: skip
    out = tmp_path / "history"
    r = export(collector, out, "--format", "parquet", "--node-labels", str(kubectl), "--node", "node-1")
    assert "labels of 1 node(s)" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["node_usage.parquet", "nodes.parquet", "pod_usage.parquet"]
    cluster = SimCluster(history_spec(out, speed=0))
    assert list(cluster.state.nodes) == ["node-1"]
    assert cluster.state.nodes["node-1"].labels == {"kubernetes.io/hostname": "node-1", "pool": "web"}
    assert [cluster.node_usage("node-1", T0 + m * MIN).cpu_milli for m, *_ in REPLAYED] == [r[1] for r in REPLAYED]


def test_export_errors_are_one_line(collector, tmp_path):
    r = runner.invoke(app, ["export-history", "--collector", collector, "--since", "7d", "--until", "8d", "--out",
                            str(tmp_path / "h")])  # fmt: skip
    assert r.exit_code == 2 and "--until (" in r.output and "must be after --since" in r.output
    r = runner.invoke(app, ["export-history", "--collector", collector, "--since", "2h", "--out", str(tmp_path / "h"),
                            "--node", "node-x"])  # fmt: skip
    assert r.exit_code == 1 and "cannot be replayed" in r.output and "nodes.csv: no nodes" in r.output
    r = runner.invoke(app, ["export-history", "--collector", collector, "--since", "2h", "--out", str(tmp_path / "h"),
                            "--resolution", "5m"])  # fmt: skip
    assert r.exit_code == 2 and "answered 400 resolution: '5m' is not one of auto, raw, 1m, 1h" in r.output
