"""GET /api/v1/history/{table}.csv over real stored samples on SQLite and PostgreSQL: the exact rows
of each table, node selection, the rollups, and the 4xx answers."""

from __future__ import annotations

import time

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from koordcommon.clusterhistory import NODE_COLUMNS, NODE_USAGE_COLUMNS, POD_USAGE_COLUMNS
from metrics_collector.api import mount
from metrics_collector.core import retention
from metrics_collector.core.rows import build_rows
from metrics_collector.settings import Settings
from metrics_collector.store import Store

GIB = 1 << 30
MIN = 60_000
T0 = (int(time.time() * 1000) - 2 * 3_600_000) // (60 * MIN) * (60 * MIN)  # inside the raw retention
NODES = ("node-a", "node-b")
STEPS = 9  # every 20 s: three minutes


@pytest.fixture
async def collector(database_url, sample_factory):
    store = Store.open(database_url)
    store.write(build_rows([sample_factory(n, T0 + i * 20_000, i) for i in range(STEPS) for n in NODES]))
    app = FastAPI()
    mount(app, store, Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        client.store = store
        yield client
    store.close()


async def table(client, name: str, **params) -> tuple[list[str], str]:
    r = await client.get(f"/api/v1/history/{name}.csv", params={"from": T0, "to": T0 + 3 * MIN, **params})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    lines = r.text.splitlines()
    return lines, r.headers["x-koord-history-resolution"]


async def test_raw_tables_hold_every_stored_sample(collector):
    nodes, res = await table(collector, "nodes")
    assert res == "raw"
    assert nodes == [",".join(NODE_COLUMNS), f"node-a,8000,{32 * GIB},7800,{30 * GIB},{{}}",
                     f"node-b,8000,{32 * GIB},7800,{30 * GIB},{{}}"]  # fmt: skip
    usage, _ = await table(collector, "node_usage")
    assert usage[0] == ",".join(NODE_USAGE_COLUMNS) and len(usage) == 1 + STEPS * 2
    assert usage[1:4] == [f"{T0},node-a,1000,{4 * GIB}", f"{T0},node-b,1000,{4 * GIB}",
                          f"{T0 + 20_000},node-a,1007,{4 * GIB + 1}"]  # fmt: skip
    pods, _ = await table(collector, "pod_usage")
    assert pods[0] == ",".join(POD_USAGE_COLUMNS) and len(pods) == 1 + STEPS * 2 * 3
    # sample i = 4 of node-b: pod p uses 100 + 10 i + p milli-cores, GiB/4 + p bytes
    at = [line for line in pods if line.startswith(f"{T0 + 80_000},node-b,")]
    assert at == [
        f"{T0 + 80_000},node-b,default,pod-0,node-b-pod-0,ReplicaSet,rs-0,koord-prod,9500,LS,500,{GIB},1000,{2 * GIB},140,{GIB // 4}",
        f"{T0 + 80_000},node-b,default,pod-1,node-b-pod-1,ReplicaSet,rs-1,,,BE,0,0,0,0,141,{GIB // 4 + 1}",
        f"{T0 + 80_000},node-b,default,pod-2,node-b-pod-2,ReplicaSet,rs-2,koord-batch,5500,BE,0,0,0,0,142,{GIB // 4 + 2}",
    ]  # fmt: skip


async def test_node_selection_and_range(collector):
    usage, _ = await table(collector, "node_usage", node="node-b", to=T0 + MIN)
    assert usage[1:] == [f"{T0 + k * 20_000},node-b,{1000 + 7 * k},{4 * GIB + k}" for k in range(3)]
    pods, _ = await table(collector, "pod_usage", node=["node-a", "node-b"], **{"from": T0 + 2 * MIN})
    assert len(pods) == 1 + 3 * 2 * 3
    nodes, _ = await table(collector, "nodes", node="node-x")
    assert nodes == [",".join(NODE_COLUMNS)]


async def test_rollups_give_each_minute_s_average_and_what_the_pod_declared(collector):
    store: Store = collector.store
    for _ in range(2):  # raw -> 1 minute, then 1 minute -> 1 hour
        store.apply(retention.plan(int(time.time() * 1000), retention.RetentionPolicy(lag_ms=0), store.retention_state()))
    usage, res = await table(collector, "node_usage", node="node-a", resolution="1m")
    # minute m holds samples i = 3m, 3m+1, 3m+2: the average is sample 3m+1's value
    assert res == "1m" and usage[1:] == [f"{T0 + m * MIN},node-a,{1000 + 7 * (3 * m + 1)},{4 * GIB + 3 * m + 1}" for m in range(3)]
    pods, _ = await table(collector, "pod_usage", node="node-a", resolution="1m")
    assert pods[1] == f"{T0},node-a,default,pod-0,node-a-pod-0,ReplicaSet,rs-0,koord-prod,9500,LS,500,{GIB},1000,{2 * GIB},110,{GIB // 4}"
    # once the raw samples are gone, the rollup's band stands for the class; owner, QoS and limits are unknown
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM pod_samples"))
    pods, _ = await table(collector, "pod_usage", node="node-a", resolution="1m")
    assert pods[1:4] == [
        f"{T0},node-a,default,pod-0,node-a-pod-0,,,koord-prod,,,500,{GIB},0,0,110,{GIB // 4}",
        f"{T0},node-a,default,pod-1,node-a-pod-1,,,koord-batch,,,0,0,0,0,111,{GIB // 4 + 1}",
        f"{T0},node-a,default,pod-2,node-a-pod-2,,,koord-batch,,,0,0,0,0,112,{GIB // 4 + 2}",
    ]
    nodes, res = await table(collector, "nodes", resolution="1h")
    assert res == "1h" and nodes[1] == f"node-a,8000,{32 * GIB},7800,{30 * GIB},{{}}"


@pytest.mark.parametrize("path, params, status, detail", [
    ("nodes.csv", {"from": T0, "to": T0}, 400, f"to ({T0}) must be after from ({T0})"),
    ("nodes.csv", {"resolution": "5m"}, 400, "resolution: '5m' is not one of auto, raw, 1m, 1h"),
    ("nodes.csv", {"from": "yesterday"}, 400, "from: 'yesterday' is neither epoch milliseconds nor an RFC 3339 time"),
    ("pods.csv", {}, 404, "no history table 'pods': nodes.csv, node_usage.csv, pod_usage.csv"),
    ("pod_usage.csv", {"from": 0, "to": "99999999999999999999"}, 400,
     "to: 99999999999999999999 is outside epoch milliseconds 0 .. 253402300799999 (year 9999)"),
    ("node_usage.csv", {"node": "a\x00b"}, 400, "node: 'a\\x00b' is not a node name"),
])  # fmt: skip
async def test_bad_requests_are_answered_4xx_naming_the_parameter(collector, path, params, status, detail):
    r = await collector.get(f"/api/v1/history/{path}", params=params)
    assert (r.status_code, r.json()["detail"]) == (status, detail)
