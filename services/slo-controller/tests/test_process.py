"""`python -m slo_controller` as a process: chassis wiring, sim backend over the bus, ConfigMap
hot reload (good and bad), the webhook on the service port, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from koordcommon import subjects
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from koordcommon.testing.net import free_port
from koordsim.cluster import SimCluster, SimSpec

GI = 1 << 30
NODE = "sim-node-000"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def configmap(**colocation) -> str:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slo-controller-config"},
           "data": {"colocation-config": json.dumps({"enable": True, **colocation})}}
    return json.dumps(doc)


def start_service(env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "slo_controller"], env=env, stdout=log, stderr=log)


async def wait_for(predicate, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout_s} s")


@pytest.fixture
async def sim(bus):
    cluster = SimCluster(SimSpec(nodes=2, online_pods_per_node=4, seed=3), bus=bus, genesis=True)
    await cluster.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM)
    yield cluster
    await cluster.close()


async def test_service_process(bus, bus_namespace, nats_url, sim, tmp_path):
    cm = tmp_path / "slo-controller-config.json"
    cm.write_text(configmap())
    port = free_port()
    log_path = tmp_path / "slo-controller.log"
    env = dict(os.environ)
    env.update({
        "NATS_URL": nats_url,
        "KOORD_SLO_BUS_NAMESPACE": bus_namespace,
        "KOORD_SLO_HTTP_HOST": "127.0.0.1",
        "KOORD_SLO_HTTP_PORT": str(port),
        "KOORD_SLO_RESYNC_S": "0.3",
        "KOORD_SLO_CONFIG_MAP_FILE": str(cm),
        "KOORD_SLO_CONFIG_POLL_S": "0.1",
        "KOORD_SLO_METRICS_CATCHUP_S": "0.3",
        "KOORD_SLO_PROFILES_FILE": str(EXAMPLES / "spark-colocation-profile.yaml"),
        "KOORD_RESOURCE_PREFIX": "koordinator.sh/",
    })
    proc = start_service(env, log_path)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=2) as http:
            async def ready():
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    return (await http.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_for(ready, 20)

            pods = await sim.list_pods(NODE)
            usage = Resources(1000, 4 * GI)
            await bus.publish(subjects.nodemetric(NODE), bus.stamp(NodeMetric(
                node=NODE, ts=sim.now_ms(), node_usage=Resources(5000, 18 * GI), system_usage=Resources(1000, 2 * GI),
                pods=[PodMetric(uid=p.uid, namespace=p.namespace, name=p.name, priority_class="koord-prod",
                                usage=usage) for p in pods])))

            async def batch_cpu_is(value):
                return (await sim.get_node(NODE)).allocatable.get("koordinator.sh/batch-cpu") == value

            # 32000 - 12800 (60%) - 1000 system - 4 x 1000 pods
            await wait_for(lambda: batch_cpu_is(14200))

            # hot reload: 70% -> margin 9600 -> 17400
            cm.write_text(configmap(cpuReclaimThresholdPercent=70))
            await wait_for(lambda: batch_cpu_is(17400))

            # an invalid config is refused; the last good one stays
            cm.write_text(configmap(cpuReclaimThresholdPercent=-1))
            await wait_for(lambda: _logged(log_path, "cpuReclaimThresholdPercent must be >= 0, got -1"))
            await asyncio.sleep(0.5)
            assert await batch_cpu_is(17400)

            # the webhook answers on the service port
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "e2e", "operation": "CREATE", "namespace": "spark-demo",
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": "exec-1", "labels": {"sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}
            resp = (await http.post("/mutate-pod", json=review)).json()["response"]
            assert resp["uid"] == "e2e" and resp["allowed"] and resp["patchType"] == "JSONPatch"

            metrics = (await http.get("/metrics")).text
            assert 'koord_slo_node_status_writes_total{reason="expired"}' in metrics
            assert "koord_slo_admission_reviews_total" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0, log_path.read_text()[-3000:]


async def _logged(path: Path, text: str) -> bool:
    return text in path.read_text()
