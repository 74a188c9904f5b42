"""The REST API over real stored data on both backends: buckets, percentiles, pages, 4xx."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeResource
from metrics_collector.api import mount
from metrics_collector.core.rows import build_rows
from metrics_collector.settings import Settings
from metrics_collector.store import Store

MIN = 60_000
# 20 minutes of samples every 10 s from an hour boundary 1-2 h ago: inside the raw retention.
T0 = (int(time.time() * 1000) - 2 * 3_600_000) // (60 * MIN) * (60 * MIN)
NODES = ("node-a", "node-b", "node-c")
STEPS = 120


@pytest.fixture
async def api(database_url, sample_factory):
    store = Store.open(database_url)
    samples = [sample_factory(n, T0 + i * 10_000, i + 3 * k) for i in range(STEPS) for k, n in enumerate(NODES)]
    store.write(build_rows(samples))
    store.write(build_rows([
        NodeResource(node="node-a", ts=T0, batch=Resources(20_000, 30 << 30), reason="computed"),
        NodeResource(node="node-a", ts=T0 + 5 * MIN, batch=Resources(24_000, 31 << 30), reason="computed"),
        NodeResource(node="node-b", ts=T0, degraded=True, reason="NodeMetric expired"),
        *(Event(kind="evict" if j % 3 else "qos", node=NODES[j % 3], action="evict" if j % 3 else "suppress",
                ts=T0 + (j // 2) * 1000, source="node-agent/x", seq=j) for j in range(25)),
    ]))  # fmt: skip
    app = FastAPI()
    mount(app, store, Settings(api_max_page=50))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        client.samples = samples
        yield client
    store.close()


async def test_nodes_latest_and_pages(api):
    r = await api.get("/api/v1/nodes")
    assert r.json() == {"items": [], "next_cursor": None}  # by default only nodes reporting in the last hour
    r = await api.get("/api/v1/nodes", params={"limit": 2, "since": T0})
    assert r.status_code == 200
    page = r.json()
    assert [n["node"] for n in page["items"]] == ["node-a", "node-b"] and page["next_cursor"]
    a = page["items"][0]
    last = STEPS - 1  # node-a's last sample is i = 119
    assert a["ts"] == T0 + last * 10_000
    assert a["usage"] == {"cpu_milli": 1000 + 7 * last, "memory_bytes": (4 << 30) + last}
    assert a["capacity"] == {"cpu_milli": 8000, "memory_bytes": 32 << 30}
    assert a["prod_usage"]["cpu_milli"] == 100 + 10 * last
    assert a["batch_allocated"] == {"cpu_milli": 2000, "memory_bytes": 4 << 30}  # two batch pods, 1000m/2Gi each
    assert a["batch_allocatable"] == {"cpu_milli": 24_000, "memory_bytes": 31 << 30}  # the newest NodeResource
    assert (a["degraded"], page["items"][1]["degraded"], page["items"][1]["batch_allocatable"]) == (False, True, None)
    r = await api.get("/api/v1/nodes", params={"limit": 2, "since": T0, "cursor": page["next_cursor"]})
    assert [n["node"] for n in r.json()["items"]] == ["node-c"] and r.json()["next_cursor"] is None
    assert r.json()["items"][0]["batch_allocatable"] is None and r.json()["items"][0]["degraded"] is None


@pytest.mark.parametrize("asked, expected", [
    ("cpu,memory", ["cpu_milli", "memory_bytes"]),  # the names the parameter's documentation gives
    ("cpu_milli,memory", ["cpu_milli", "memory_bytes"]),
    ("prod_used_cpu,system_memory_bytes", ["prod_used_cpu_milli", "system_memory_bytes"]),
])  # fmt: skip
async def test_usage_metric_names_with_or_without_unit(api, asked, expected):
    r = await api.get("/api/v1/nodes/node-b/usage", params={"from": T0, "to": T0 + 20 * MIN, "metrics": asked})
    assert r.status_code == 200, r.text
    assert r.json()["metrics"] == expected and set(r.json()["points"][0]["avg"]) == set(expected)
    p = await api.get("/api/v1/nodes/node-b/percentiles", params={"from": T0, "to": T0 + 20 * MIN, "metric": "memory"})
    assert p.status_code == 200 and p.json()["metric"] == "memory_bytes"


@pytest.mark.parametrize("step, step_ms", [("5m", 5 * MIN), ("60", MIN), ("90s", 90_000), ("1h", 60 * MIN)])
async def test_node_usage_buckets(api, step, step_ms):
    r = await api.get("/api/v1/nodes/node-b/usage",
                      params={"from": T0, "to": T0 + 20 * MIN, "step": step, "metrics": "cpu_milli,memory_bytes"})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["resolution"], body["step_s"], body["metrics"]) == ("raw", step_ms / 1000, ["cpu_milli", "memory_bytes"])
    mine = [s for s in api.samples if s.node == "node-b"]
    ts = np.array([s.ts for s in mine])
    cpu = np.array([s.node_usage.cpu_milli for s in mine], dtype=float)
    starts = np.unique(ts - ts % step_ms)
    assert [p["ts"] for p in body["points"]] == starts.tolist()
    for p in body["points"]:
        sel = (ts >= p["ts"]) & (ts < p["ts"] + step_ms)
        assert p["samples"] == int(sel.sum())
        assert p["avg"]["cpu_milli"] == pytest.approx(cpu[sel].mean())
        assert p["max"]["cpu_milli"] == cpu[sel].max()


@pytest.mark.parametrize("method, np_method", [("linear", "linear"), ("nearest", "inverted_cdf")])
async def test_percentiles_match_numpy(api, method, np_method):
    frm, to = T0 + 2 * MIN, T0 + 17 * MIN
    r = await api.get("/api/v1/nodes/node-c/percentiles",
                      params={"from": frm, "to": to, "metric": "cpu_milli", "q": "50,90,0.99", "method": method})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    values = np.array([s.node_usage.cpu_milli for s in api.samples if s.node == "node-c" and frm <= s.ts < to], float)
    assert body["samples"] == len(values) == 90
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert body["quantiles"][key] == pytest.approx(np.percentile(values, q, method=np_method))
    assert (body["min"], body["max"], body["avg"]) == (values.min(), values.max(), pytest.approx(values.mean()))
    r = await api.get("/api/v1/pods/node-a-pod-0/percentiles", params={"from": frm, "to": to, "q": "0.95"})
    pod = np.array([s.pods[0].usage.cpu_milli for s in api.samples if s.node == "node-a" and frm <= s.ts < to], float)
    assert r.json()["quantiles"]["p95"] == pytest.approx(np.percentile(pod, 95))


async def test_pods_list_and_pod_usage(api):
    r = await api.get("/api/v1/pods", params={"node": "node-a", "since": T0, "limit": 2})
    page = r.json()
    assert [p["uid"] for p in page["items"]] == ["node-a-pod-0", "node-a-pod-1"]
    assert page["items"][1]["band"] == "batch" and page["items"][1]["batch_requests"]["cpu_milli"] == 1000
    r = await api.get("/api/v1/pods", params={"node": "node-a", "since": T0, "limit": 2, "cursor": page["next_cursor"]})
    assert [p["uid"] for p in r.json()["items"]] == ["node-a-pod-2"] and r.json()["next_cursor"] is None
    r = await api.get("/api/v1/pods/node-a-pod-2/usage", params={"from": T0, "to": T0 + 20 * MIN, "step": "10m"})
    points = r.json()["points"]
    assert [(p["samples"], p["max"]["cpu_milli"]) for p in points] == [(60, 102 + 10 * 59), (60, 102 + 10 * 119)]


async def test_cluster_summary_sums_node_averages(api):
    r = await api.get("/api/v1/cluster/summary", params={"from": T0, "to": T0 + 20 * MIN, "step": "10m"})
    assert r.status_code == 200, r.text
    points = r.json()["points"]
    assert len(points) == 2 and all(p["nodes"] == 3 for p in points)
    first = points[0]
    assert first["capacity"] == {"cpu_milli": 3 * 8000, "memory_bytes": 3 * (32 << 30)}
    # node k's sample i has cpu 1000 + 7 (i + 3k); average over i < 60 per node, summed over nodes
    want = sum(np.mean([1000 + 7 * (i + 3 * k) for i in range(60)]) for k in range(3))
    assert first["used"]["cpu_milli"] == pytest.approx(want)
    assert first["bands"]["batch"]["allocated"]["cpu_milli"] == pytest.approx(3 * 2000)
    assert first["bands"]["prod"]["allocated"]["cpu_milli"] == pytest.approx(3 * 500)


async def test_events_filters_and_pages(api):
    seen, cursor = [], None
    while True:
        r = await api.get("/api/v1/events", params={"limit": 10, **({"cursor": cursor} if cursor else {})})
        body = r.json()
        seen += body["items"]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert len(seen) == 25 and len({e["msg_id"] for e in seen}) == 25
    assert [e["ts"] for e in seen] == sorted((e["ts"] for e in seen), reverse=True)
    r = await api.get("/api/v1/events", params={"kind": "qos", "node": "node-a"})
    assert {(e["kind"], e["node"], e["action"]) for e in r.json()["items"]} == {("qos", "node-a", "suppress")}
    assert len(r.json()["items"]) == 9  # j = 0, 3, ..., 24: qos events, all on node-a
    r = await api.get("/api/v1/events", params={"from": T0 + 5000, "to": T0 + 7000})
    assert sorted(e["ts"] for e in r.json()["items"]) == [T0 + 5000] * 2 + [T0 + 6000] * 2


@pytest.mark.parametrize(
    "path, params, status, message",
    [
        ("/api/v1/nodes/node-a/usage", {"step": "fortnight"}, 400, "step: 'fortnight' is not a duration"),
        ("/api/v1/nodes/node-a/usage", {"from": "2026-13-01"}, 400, "from: '2026-13-01' is neither"),
        ("/api/v1/nodes/node-a/usage", {"from": T0, "to": T0}, 400, "must be after from"),
        ("/api/v1/nodes/node-a/usage", {"from": T0, "to": T0 + 86_400_000, "step": "1s"}, 400, "more than 11000"),
        ("/api/v1/nodes/node-a/usage", {"metrics": "cpu_milli,gpu"}, 400, "metrics: unknown 'gpu'"),
        ("/api/v1/nodes/nope/usage", {}, 404, "node 'nope' has no stored samples"),
        ("/api/v1/pods/nope/usage", {}, 404, "pod 'nope' has no stored samples"),
        ("/api/v1/nodes/node-a/percentiles", {"q": "0.5,150"}, 400, "q: 150 is outside"),
        ("/api/v1/nodes/node-a/percentiles", {"metric": "disk"}, 400, "metric: unknown 'disk'"),
        ("/api/v1/nodes/node-a/percentiles", {"method": "median"}, 400, "method: 'median' is not one of"),
        ("/api/v1/nodes", {"cursor": "%%%"}, 400, "cursor: not a cursor returned by this API"),
        ("/api/v1/events", {"cursor": "bm9kZS1h"}, 400, "cursor: not a cursor returned by this API"),
        ("/api/v1/events", {"from": 10, "to": 5}, 400, "to (5) must be after from (10)"),
        ("/api/v1/nodes", {"limit": 0}, 422, "greater than or equal to 1"),
        ("/api/v1/nodes", {"limit": 51}, 422, "less than or equal to 50"),
    ],
)
async def test_bad_parameters_answer_4xx_with_a_reason(api, path, params, status, message):
    r = await api.get(path, params=params)
    assert r.status_code == status, r.text
    assert message in str(r.json()["detail"])


async def test_openapi_documents_the_routes(api):
    # the router is mounted on a bare app here; the service app adds the probes
    schema = (await api.get("/openapi.json")).json()
    assert {"/api/v1/nodes", "/api/v1/nodes/{node}/usage", "/api/v1/cluster/summary", "/api/v1/events"} <= set(
        schema["paths"]
    )
    params = {p["name"] for p in schema["paths"]["/api/v1/nodes/{node}/usage"]["get"]["parameters"]}
    assert {"from", "to", "step", "metrics"} <= params
