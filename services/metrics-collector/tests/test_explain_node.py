"""Why a node offers this much batch: the builder over stored reports (tables of inputs and the
breakdown they give) and the REST route over a real store on both backends."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from koordcommon.resources import Resources
from koordcommon.schemas import NodeResource
from metrics_collector import api_explain
from metrics_collector.api import mount
from metrics_collector.core import explain_node
from metrics_collector.core.rows import build_rows
from metrics_collector.settings import Settings
from metrics_collector.store import Store

GIB = 1 << 30


def batch_inputs(cap=(16000, 64 * GIB), margin=(6400, 22 * GIB), system=(500, 2 * GIB), reserved=(0, 0),
                 used=(4000, 16 * GIB), request=(6000, 24 * GIB), mur=(6500, 25 * GIB), cpu_policy="usage",
                 mem_policy="usage", hp_pods=()) -> dict:  # fmt: skip
    return {"capacity": list(cap), "safetyMargin": list(margin), "systemUsed": list(system),
            "nodeReserved": list(reserved), "podHPUsed": list(used), "podHPRequest": list(request),
            "podHPMaxUsedRequest": list(mur), "cpuCalculatePolicy": cpu_policy, "memoryCalculatePolicy": mem_policy,
            "cpuReclaimThresholdPercent": 60, "memoryReclaimThresholdPercent": 65,
            "batchCPUThresholdPercent": None, "batchMemoryThresholdPercent": None, "hpPods": list(hp_pods)}  # fmt: skip


def report(ts: int, batch: tuple[int, int] | None, inputs: dict | None, degraded=False, reason="expired") -> dict:
    return {"ts": ts, "batch": None if batch is None else {"cpu_milli": batch[0], "memory_bytes": batch[1]},
            "mid": None, "degraded": degraded, "reason": reason, "written": True,
            "inputs": {"batch": inputs, "sync": {"decision": reason, "previous": {}, "resourceDiffThreshold": 0.1,
                                                 "updateTimeThresholdSeconds": 300}} if inputs else {},
            "messages": []}  # fmt: skip


# (inputs, published batch) -> (system term, HP term name, HP value, unclamped) for cpu and memory
CASES = [
    pytest.param(batch_inputs(), (5100, 24 * GIB),
                 {"cpu": ("systemUsageOrNodeReserved", 500, "podHPUsed", 4000, 5100),
                  "memory": ("systemUsageOrNodeReserved", 2 * GIB, "podHPUsed", 16 * GIB, 24 * GIB)}, id="usage"),
    pytest.param(batch_inputs(reserved=(1000, GIB)), (4600, 24 * GIB),
                 {"cpu": ("systemUsageOrNodeReserved", 1000, "podHPUsed", 4000, 4600),
                  "memory": ("systemUsageOrNodeReserved", 2 * GIB, "podHPUsed", 16 * GIB, 24 * GIB)},
                 id="reserved-over-system"),
    pytest.param(batch_inputs(cpu_policy="maxUsageRequest", mem_policy="request", reserved=(0, 3 * GIB)),
                 (2600, 15 * GIB),
                 {"cpu": ("systemUsageOrNodeReserved", 500, "podHPMaxUsedRequest", 6500, 2600),
                  "memory": ("nodeReserved", 3 * GIB, "podHPRequest", 24 * GIB, 15 * GIB)}, id="maxUsageRequest-request"),
    pytest.param(batch_inputs(used=(12000, 40 * GIB)), (0, 0),
                 {"cpu": ("systemUsageOrNodeReserved", 500, "podHPUsed", 12000, -2900),
                  "memory": ("systemUsageOrNodeReserved", 2 * GIB, "podHPUsed", 40 * GIB, 0)}, id="clamped-at-zero"),
]  # fmt: skip


@pytest.mark.parametrize("inputs, published, expected", CASES)
def test_breakdown_terms_per_policy(inputs, published, expected):
    b = explain_node.breakdown(report(1, published, inputs))
    assert b["explained"] is True
    for res, (sys_name, sys_value, hp_name, hp_value, unclamped) in expected.items():
        r = b["resources"][res]
        assert (r["systemTerm"], r["terms"][sys_name], r["hpTerm"], r["terms"][hp_name]) == (
            sys_name, sys_value, hp_name, hp_value)  # fmt: skip
        assert r["unclamped"] == unclamped
        assert r["batch"] == published[0 if res == "cpu" else 1] == max(unclamped, 0)
        # the stacked bands add up to capacity whenever batch is not clamped
        bands = r["bands"]
        assert list(bands) == list(explain_node.BANDS)
        if unclamped >= 0:
            assert sum(bands.values()) == r["terms"]["capacity"]


def test_degraded_report_has_no_formula():
    b = explain_node.breakdown(report(1, None, None, degraded=True, reason="degradedByBatchResource"))
    assert (b["explained"], b["degraded"], b["resources"]) == (False, True, {})


def test_changes_name_the_term_that_moved_most():
    # prod usage rises between the reports: HP grows by 3 cores, system by 0.2: batch falls by 3.2
    first = batch_inputs(used=(4000, 16 * GIB), system=(500, 2 * GIB))
    second = batch_inputs(used=(7000, 16 * GIB), system=(700, 2 * GIB))
    out = explain_node.changes([report(1, (5100, 24 * GIB), first), report(2, (1900, 24 * GIB), second, reason="diff:x"),
                                report(3, None, None, degraded=True)])  # fmt: skip
    assert out[0]["moved"] is None
    cpu = out[1]["moved"]["cpu"]
    assert cpu["batch_delta"] == -3200 and cpu["most"] == "podHPUsed"
    assert cpu["terms"] == [{"term": "podHPUsed", "from": 4000, "to": 7000, "delta": 3000},
                            {"term": "systemUsageOrNodeReserved", "from": 500, "to": 700, "delta": 200}]  # fmt: skip
    assert out[1]["moved"]["memory"] == {"batch_delta": 0, "terms": [], "most": None}
    assert out[1]["decision"] == "diff:x"
    assert out[2]["moved"] == {"degraded": {"from": False, "to": True}}


@pytest.fixture
async def client(database_url):
    store = Store.open(database_url)
    msgs = [
        NodeResource(node="n1", ts=1_000, batch=Resources(5100, 24 * GIB), reason="expired",
                     inputs={"batch": batch_inputs()}),
        NodeResource(node="n1", ts=2_000, batch=Resources(1900, 24 * GIB), reason="diff:koordinator.sh/batch-cpu",
                     inputs={"batch": batch_inputs(used=(7000, 16 * GIB), system=(700, 2 * GIB)),
                             "sync": {"decision": "diff:koordinator.sh/batch-cpu", "resourceDiffThreshold": 0.1,
                                      "previous": {"koordinator.sh/batch-cpu": 5100}}}),
        NodeResource(node="n1", ts=3_000, degraded=True, reason="degradedByBatchResource"),
    ]  # fmt: skip
    store.write(build_rows(msgs))
    app = FastAPI()
    mount(app, store, Settings())
    app.include_router(api_explain.router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c
    store.close()


async def test_explain_route_window_and_at(client):
    r = await client.get("/api/v1/nodes/n1/explain", params={"from": 1_500, "to": 10_000})
    assert r.status_code == 200
    items = r.json()["items"]
    # the report before the window is only what the first one changed from
    assert [i["ts"] for i in items] == [2_000, 3_000]
    assert items[0]["moved"]["cpu"]["most"] == "podHPUsed"
    assert items[0]["previous"] == {"koordinator.sh/batch-cpu": 5100}
    assert items[0]["resources"]["cpu"]["terms"]["podHPUsed"] == 7000
    assert items[1]["degraded"] is True

    r = await client.get("/api/v1/nodes/n1/explain", params={"at": 2_500})
    assert [i["ts"] for i in r.json()["items"]] == [2_000]
    # nothing changed in the window: the report in force is shown
    r = await client.get("/api/v1/nodes/n1/explain", params={"from": 3_500, "to": 9_000})
    assert [i["ts"] for i in r.json()["items"]] == [3_000]


@pytest.mark.parametrize("params, status, words", [
    ({"at": 500}, 404, "no stored NodeResource"),
    ({"at": 2_000, "from": 1}, 400, "either at or from/to"),
    ({"from": 5_000, "to": 4_000}, 400, "must be after"),
    ({"at": "yesterday"}, 400, "at"),
])  # fmt: skip
async def test_explain_route_bad_requests(client, params, status, words):
    r = await client.get("/api/v1/nodes/n1/explain", params=params)
    assert r.status_code == status and words in r.json()["detail"]


async def test_pod_decisions_from_recorded_events(database_url):
    from koordcommon.schemas import Event

    store = Store.open(database_url)
    inputs = {"node_usage_percent": 82, "threshold_percent": 70, "victim_order": [{"pod": "jobs/spark"}]}
    store.write(build_rows([
        Event(kind="evict", node="n1", action="evict", reason="BEMemoryEvict: node memory over threshold", ts=5_000,
              seq=1, source="node-agent/n1", target={"namespace": "jobs", "name": "spark", "uid": "u1"},
              details={"feature": "BEMemoryEvict", "inputs": inputs}),
        Event(kind="evict", node="n1", action="evict", reason="other", ts=5_001, seq=2, source="node-agent/n1",
              target={"namespace": "jobs", "name": "spark-2", "uid": "u2"}),
        Event(kind="evict", node="n2", action="evict", reason="same name, other namespace", ts=5_002, seq=3,
              source="node-agent/n2", target={"namespace": "web", "name": "spark", "uid": "u3"}),
        Event(kind="qos", node="n1", action="cpu_suppress", reason="cpu.max 400000 -> 200000", ts=4_000, seq=4,
              source="node-agent/n1", target={"path": "kubepods/besteffort", "file": "cpu.max"}),
    ]))  # fmt: skip
    app = FastAPI()
    mount(app, store, Settings())
    app.include_router(api_explain.router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.get("/api/v1/explain/pods/jobs/spark", params={"since": 0})
    store.close()
    found = r.json()["decisions"]
    assert [(e["kind"], e["node"], e["reason"]) for e in found] == [
        ("evict", "n1", "BEMemoryEvict: node memory over threshold"), ("qos", "n1", "cpu.max 400000 -> 200000")]
    assert found[0]["details"]["inputs"] == inputs


async def test_a_suppressed_be_pod_gets_its_node_s_suppress_events(database_url, sample_factory):
    from koordcommon.schemas import Event

    store = Store.open(database_url)
    # sample_factory's pod-1 is BE (batch), pod-0 is prod: only the BE pod is suppressed
    store.write(build_rows([sample_factory("n1", 3_000, 0),
                            Event(kind="qos", node="n1", action="cpu_suppress", reason="cpu.cfs_quota_us -1 -> 340000",
                                  ts=4_000, seq=1, source="node-agent/n1", target={"path": "kubepods/besteffort"},
                                  details={"inputs": {"be_allowed": 3400}})]))  # fmt: skip
    app = FastAPI()
    mount(app, store, Settings())
    app.include_router(api_explain.router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        be = (await c.get("/api/v1/explain/pods/default/pod-1", params={"since": 0})).json()["decisions"]
        prod = (await c.get("/api/v1/explain/pods/default/pod-0", params={"since": 0})).json()["decisions"]
    store.close()
    assert [(e["action"], e["details"]["inputs"]) for e in be] == [("cpu_suppress", {"be_allowed": 3400})]
    assert prod == []
