"""The REST view (plan and jobs) and the service's configuration loading."""

from __future__ import annotations

import httpx
import pytest
from desched_scenario import all_metrics, batch_pod
from descheduler.api import router
from descheduler.core.config import AnomalyCondition, LowNodeLoadArgs, MigrationLimits, MigrationOptions
from descheduler.loop import Descheduler
from descheduler.main import load_config
from fastapi import FastAPI
from koordsim.cluster import SimCluster, SimSpec

HOT = "sim-node-000"


async def test_plan_and_jobs_endpoints():
    c = SimCluster(SimSpec(nodes=3, seed=3, speed=0, start_ms=1_717_243_200_000))
    await c.start()
    for i in range(4):
        await c.create_pod(batch_pod("crunch-7d9f6b8c5d", i, HOT))
    await c.set_usage_override(node=HOT, cpu_factor=6)
    args = LowNodeLoadArgs(
        anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1),
        limits=MigrationLimits(evictQPS=0), migration=MigrationOptions(defaultJobMode="EvictDirectly"),
    )
    d = Descheduler(args, c, None)
    app = FastAPI()
    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/api/v1/plan")).json() == {"ran": False}
        assert (await client.get("/api/v1/jobs")).status_code == 503
        app.state.descheduler = d
        d.metrics = all_metrics(c)
        app.state.last_report = await d.run_round()
        plan = (await client.get("/api/v1/plan")).json()
        assert plan["classes"][HOT] == "high" and plan["abnormal"] == [HOT]
        assert [m["outcome"] for m in plan["migrations"]] == ["evicted", "evicted"]
        jobs = (await client.get("/api/v1/jobs", params={"limit": 1})).json()
        assert jobs["total"] == 2 and len(jobs["items"]) == 1
        assert jobs["items"][0]["phase"] == "WaitingReplacement" and jobs["items"][0]["mode"] == "EvictDirectly"
        assert (await client.get("/api/v1/jobs", params={"limit": 0})).status_code == 422


def test_args_file_with_koordinator_field_names(tmp_path):
    f = tmp_path / "args.yaml"
    f.write_text(
        "dryRun: true\n"
        "nodePools:\n"
        "  - name: big\n"
        "    nodeSelector: {matchLabels: {pool: big}}\n"
        "    lowThresholds: {cpu: 30}\n"
        "    highThresholds: {cpu: 60, memory: 70}\n"
        "limits: {maxMigratingPerNode: 3, evictQPS: 2, evictBurst: 4}\n"
        "migration: {defaultJobMode: Eviction}\n"
    )
    loaded = load_config(str(f))
    args = loaded.args
    default, pool = args.nodePools  # Koordinator's conversion: the top-level pool comes first
    assert default.name == "__default_node_pool__" and default.nodeSelector is None
    assert args.dryRun is True and pool.name == "big" and pool.selects({"pool": "big"}) and not pool.selects({})
    # completed as Koordinator's newThresholds: memory always, missing values 100
    assert pool.lowThresholds == {"cpu": 30, "memory": 100} and pool.highThresholds == {"cpu": 60, "memory": 70}
    assert args.limits.maxMigratingPerNode == 3 and args.limits.evictBurst == 4
    assert args.migration.defaultJobMode == "EvictDirectly"
    assert loaded.warnings == [] and loaded.interval_s is None
    assert load_config("").args == LowNodeLoadArgs()


@pytest.mark.parametrize(
    "text,error",
    [
        ("migration: {defaultJobMode: Teleport}\n", "defaultJobMode 'Teleport'"),
        ("evictableNamespaces: {include: [a], exclude: [b]}\n", "set include or exclude, not both"),
        ("limits: {maxMigratingPerWorkload: ten}\n", "neither a count"),
        ("nodePools: [{prodHighThresholds: {cpu: high}}]\n", "prodHighThresholds.cpu"),
    ],
)
def test_bad_args_are_rejected_with_a_clear_message(tmp_path, text, error):
    f = tmp_path / "args.yaml"
    f.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_config(str(f))
