"""The recommender's HTTP server driven by generated requests through the whole chassis (guard,
app): every operation of its OpenAPI over a state fed with real samples, and requests off the
description. No request causes a server error; a bad one gets a 4xx that says what was wrong."""

from __future__ import annotations

from koordcommon.service import Service
from koordcommon.testing.openapi import assert_no_server_errors, assert_stray_requests_answered
from recommender.api import router
from recommender.bus import apply_sample
from recommender.cluster import WorkloadResolver
from recommender.main import Settings, build_state


async def test_no_generated_request_causes_a_server_error(metric_samples, tmp_path):
    settings = Settings(data_dir=str(tmp_path))
    state = build_state(settings)
    resolve = WorkloadResolver(None)
    for msg in metric_samples(0, 60):
        await apply_sample(state, msg, resolve)
    svc = Service("recommender", settings)
    svc.app.include_router(router)  # as run_service mounts it
    svc.app.state.recommender_state = state
    svc.mark_started()
    assert state.workloads(), "the state has recommendations to serve"
    done = assert_no_server_errors(svc.asgi(), min_operations=2, max_examples=25)
    assert {"GET /api/v1/recommendations", "GET /api/v1/recommendations/{namespace}/{kind}/{name}"} <= set(done)
    assert_stray_requests_answered(svc.asgi())
