"""The descheduler's HTTP server driven by generated requests through the whole chassis (guard,
app): every operation of its OpenAPI after a round that migrated pods, and requests off the
description. No request causes a server error; a bad one gets a 4xx that says what was wrong."""

from __future__ import annotations

from desched_scenario import all_metrics, batch_pod
from descheduler.api import router
from descheduler.core.config import AnomalyCondition, LowNodeLoadArgs, MigrationLimits, MigrationOptions
from descheduler.loop import Descheduler
from descheduler.main import Settings
from koordcommon.service import Service
from koordcommon.testing.openapi import assert_no_server_errors, assert_stray_requests_answered
from koordsim.cluster import SimCluster, SimSpec

HOT = "sim-node-000"


async def test_no_generated_request_causes_a_server_error(tmp_path):
    cluster = SimCluster(SimSpec(nodes=3, seed=3, speed=0, start_ms=1_717_243_200_000))
    await cluster.start()
    for i in range(4):
        await cluster.create_pod(batch_pod("crunch-7d9f6b8c5d", i, HOT))
    await cluster.set_usage_override(node=HOT, cpu_factor=6)
    args = LowNodeLoadArgs(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1),
                           limits=MigrationLimits(evictQPS=0), migration=MigrationOptions(defaultJobMode="EvictDirectly"))
    desched = Descheduler(args, cluster, None)
    desched.metrics = all_metrics(cluster)
    svc = Service("descheduler", Settings(data_dir=str(tmp_path)))
    svc.app.include_router(router)  # as run_service mounts it; main sets the state below
    svc.app.state.descheduler = desched
    svc.app.state.last_report = await desched.run_round()
    assert svc.app.state.last_report.plan.migrations, "a round with migrations to show"
    svc.mark_started()
    try:
        done = assert_no_server_errors(svc.asgi(), min_operations=3, max_examples=40)
        assert {"GET /api/v1/plan", "GET /api/v1/jobs", "GET /api/v1/explain/pods/{namespace}/{name}"} <= set(done)
        assert_stray_requests_answered(svc.asgi())
    finally:
        await cluster.close()
