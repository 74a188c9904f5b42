"""The slo-controller's HTTP server driven by generated requests through the whole chassis (the
guard, the app with its REST routes and the admission webhook as main wires them): every
operation of its OpenAPI (the webhook's AdmissionReview bodies included) and requests off the
description. No request causes a server error; a bad one gets a 4xx that says what was wrong."""

from __future__ import annotations

import json

import pytest
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from koordcommon.service import Service
from koordcommon.testing.openapi import assert_no_server_errors, assert_stray_requests_answered
from koordsim.cluster import SimCluster, SimSpec
from slo_controller.api import create_router as create_api_router
from slo_controller.controller import SLOController
from slo_controller.profiles import ProfileStore
from slo_controller.settings import SLOSettings
from slo_controller.webhook import WEBHOOK_PATHS, create_router

GI = 1 << 30
TOKEN = "fuzz-token"


@pytest.fixture
async def service(tmp_path):
    cluster = SimCluster(SimSpec(nodes=3, online_pods_per_node=3, seed=4))
    await cluster.start()
    ctrl = SLOController(cluster, None, resync_s=3600, catchup_timeout_s=0)
    await ctrl.apply_config({"colocation-config": json.dumps({"enable": True})})
    await ctrl.start()
    for n in await cluster.list_nodes():
        pods = await cluster.list_pods(n.name)
        await ctrl.handle_metric(NodeMetric(
            node=n.name, ts=cluster.now_ms(), node_usage=Resources(4000, 8 * GI), system_usage=Resources(500, GI),
            pods=[PodMetric(uid=p.uid, namespace=p.namespace, name=p.name, priority_class="koord-prod",
                            usage=Resources(500, GI)) for p in pods]))  # fmt: skip
    token = tmp_path / "token"
    token.write_text(TOKEN)
    svc = Service("slo-controller", SLOSettings(api_token_file=str(token), data_dir=str(tmp_path)))
    store = ProfileStore()
    store.load_documents([{
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": "spark"},
        "spec": {"selector": {"matchLabels": {"app": "spark"}}, "qosClass": "BE", "priorityClassName": "koord-batch"},
    }])  # fmt: skip
    svc.app.include_router(create_router(store))  # as main wires them
    svc.public_paths.update(WEBHOOK_PATHS)
    svc.app.include_router(create_api_router(ctrl))
    svc.mark_started()
    yield svc
    await ctrl.close()
    await cluster.close()


async def test_no_generated_request_causes_a_server_error(service):
    done = assert_no_server_errors(service.asgi(), min_operations=5, max_examples=25,
                                   headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
    assert {"POST /mutate-pod", "POST /validate-pod", "GET /api/v1/nodes/{name}/resources"} <= set(done), done
    assert_stray_requests_answered(service.asgi())
