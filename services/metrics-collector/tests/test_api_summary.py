"""/api/v1/cluster/resources: batch and mid allocatable summed over nodes, per bucket."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from koordcommon.resources import Resources
from koordcommon.schemas import NodeResource
from metrics_collector.api import mount
from metrics_collector.api_summary import STALE_MS, Report, bucket_sums
from metrics_collector.core.rows import build_rows
from metrics_collector.settings import Settings
from metrics_collector.store import Store

MIN = 60_000
T0 = 1_700_000_040_000  # a multiple of one minute


def rep(node, minute, batch_cpu, mid_cpu=0):
    return Report(node, T0 + minute * MIN, (batch_cpu, batch_cpu * 1000, mid_cpu, mid_cpu * 1000))


@pytest.mark.parametrize(
    "reports, start_min, end_min, expected",
    [
        # one node, one report before the window: it holds for every bucket
        ([rep("a", -3, 4000)], 0, 3, [(0, 1, 4000), (1, 1, 4000), (2, 1, 4000)]),
        # a new value counts from the bucket it falls in (value at the bucket's end)
        ([rep("a", -1, 4000), rep("a", 1, 1000)], 0, 3, [(0, 1, 4000), (1, 1, 1000), (2, 1, 1000)]),
        # two nodes sum; a node appearing mid-window joins from its bucket
        ([rep("a", 0, 4000), rep("b", 2, 2500)], 0, 4, [(0, 1, 4000), (1, 1, 4000), (2, 2, 6500), (3, 2, 6500)]),
        # buckets before any report are left out, not zero
        ([rep("a", 2, 3000)], 0, 4, [(2, 1, 3000), (3, 1, 3000)]),
        # degraded (None stored as 0) counts as zero, the node still counts
        ([rep("a", 0, 4000), rep("a", 1, 0)], 0, 2, [(0, 1, 4000), (1, 1, 0)]),
    ],
)
def test_bucket_sums_carry_each_nodes_last_value(reports, start_min, end_min, expected):
    out = bucket_sums(reports, T0 + start_min * MIN, T0 + end_min * MIN, MIN)
    got = [((p["ts"] - T0) // MIN, p["nodes"], p["batch_allocatable"]["cpu_milli"]) for p in out]
    assert got == expected
    for p in out:
        assert p["batch_allocatable"]["memory_bytes"] == p["batch_allocatable"]["cpu_milli"] * 1000


def test_a_node_silent_for_longer_than_the_stale_bound_drops_out():
    # bucket ends at stale, stale + 1, stale + 2 minutes: "a" (reported at 0) is exactly
    # stale-old at the first end and too old after; "b" reported again in between
    reports = [rep("a", 0, 4000), rep("b", 0, 1000), rep("b", STALE_MS // MIN, 1000)]
    start = T0 + (STALE_MS // MIN - 1) * MIN
    out = bucket_sums(reports, start, start + 3 * MIN, MIN)
    assert [(p["nodes"], p["batch_allocatable"]["cpu_milli"]) for p in out] == [(2, 5000), (1, 1000), (1, 1000)]


def test_buckets_align_with_the_cluster_summary():
    out = bucket_sums([rep("a", 0, 1)], T0 + 20_000, T0 + 3 * MIN, MIN)
    assert [p["ts"] for p in out] == [T0, T0 + MIN, T0 + 2 * MIN]


@pytest.fixture
def client(database_url, tmp_path):
    store = Store.open(database_url, tmp_path, migrate=True)
    msgs = [
        NodeResource(node=n, ts=T0 + m * MIN + 5_000, seq=m, source="slo-controller",
                     batch=Resources(cpu, cpu * 2**20), mid=Resources(500, 2**30) if n == "a" else None)
        for n, m, cpu in (("a", -2, 4000), ("a", 1, 3000), ("b", 0, 2000))
    ]  # fmt: skip
    store.write(build_rows(msgs))
    app = FastAPI()
    mount(app, store, Settings())
    yield TestClient(app)
    store.close()


def test_endpoint_reads_the_store(client):
    r = client.get("/api/v1/cluster/resources", params={"from": T0, "to": T0 + 3 * MIN, "step": "1m"})
    assert r.status_code == 200
    body = r.json()
    assert (body["from"], body["to"], body["step_s"]) == (T0, T0 + 3 * MIN, 60)
    got = [(p["ts"], p["nodes"], p["batch_allocatable"]["cpu_milli"], p["mid_allocatable"]["memory_bytes"])
           for p in body["points"]]  # fmt: skip
    assert got == [(T0, 2, 6000, 2**30), (T0 + MIN, 2, 5000, 2**30), (T0 + 2 * MIN, 2, 5000, 2**30)]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"step": "fast"}, "step"),
        ({"from": "yesterday"}, "from"),
        ({"from": T0, "to": T0 - 1}, "must be after"),
        ({"from": T0, "to": T0 + 10**9, "step": "1s"}, "points"),
    ],
)
def test_bad_parameters_answer_400_naming_them(client, params, message):
    r = client.get("/api/v1/cluster/resources", params=params)
    assert r.status_code == 400 and message in r.json()["detail"]
