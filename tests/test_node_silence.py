"""Unknown or stale means less batch, over real processes: the slo-controller and the scheduler
extender run as processes on a simulated cluster (10x speed); the test plays two node agents.

* a node agent that goes silent: its node's batch allocatable falls to 0 within
  degradeTimeMinutes, and the extender stops trusting the node after
  nodeMetricExpirationSeconds ("node(s) nodeMetric expired"), while the node that still reports
  keeps both;
* clock skew between agent and controller: a NodeMetric stamped an hour ahead of the receivers'
  clock is dead-lettered by both services and counted (reason_kind clock_skew), never used.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import orjson
from koordcommon import subjects
from koordcommon.kube_codec import pod_to_k8s
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from koordcommon.testing.net import free_port, wait_http_ready
from koordsim.cluster import SimCluster, SimSpec

GI = 1 << 30
SPEED = 10.0  # simulated seconds per wall second: a degradeTimeMinutes of 1 is 6 s


def _start(module: str, prefix: str, env: dict[str, str], log_path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    full = {**os.environ, f"{prefix}HTTP_HOST": "127.0.0.1", f"{prefix}HTTP_PORT": str(port), **env}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", module], env=full, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    wait_http_ready(url + "/healthz", 30)
    return proc, url


async def _until(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return time.monotonic()
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout_s} s")


async def test_silent_agent_loses_batch_and_trust_and_skewed_metrics_are_refused(bus, bus_namespace, nats_url, tmp_path):
    sim = SimCluster(SimSpec(nodes=2, online_pods_per_node=2, seed=3, speed=SPEED), bus=bus, genesis=True)
    await sim.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM)
    quiet, talking = sorted(n.name for n in await sim.list_nodes())
    cm = tmp_path / "cm.json"
    cm.write_text(json.dumps({"data": {"colocation-config": json.dumps({"enable": True, "degradeTimeMinutes": 1})}}))
    common = {"NATS_URL": nats_url}
    slo, slo_url = _start("slo_controller", "KOORD_SLO_", {
        **common, "KOORD_SLO_BUS_NAMESPACE": bus_namespace, "KOORD_SLO_CONFIG_MAP_FILE": str(cm),
        "KOORD_SLO_RESYNC_S": "0.3", "KOORD_SLO_METRICS_CATCHUP_S": "0.3", "KOORD_SLO_WEBHOOK_ENABLED": "false",
    }, tmp_path / "slo.log")
    ext, ext_url = _start("scheduler_extender", "KOORD_EXTENDER_", {
        **common, "KOORD_EXTENDER_BUS_NAMESPACE": bus_namespace,
    }, tmp_path / "extender.log")
    stop = asyncio.Event()
    silent = asyncio.Event()

    async def agents():
        """Both nodes report every 5 simulated seconds; `quiet` stops when told."""
        while not stop.is_set():
            for name in (quiet, talking):
                if name == quiet and silent.is_set():
                    continue
                await bus.publish(subjects.nodemetric(name), bus.stamp(NodeMetric(
                    node=name, ts=sim.now_ms(), report_interval_s=5, capacity=Resources(32000, 128 * GI),
                    node_usage=Resources(4000, 16 * GI), system_usage=Resources(500, 2 * GI), pods=pods[name])))
            await asyncio.sleep(5 / SPEED)

    pods = {name: [PodMetric(uid=p.uid, namespace=p.namespace, name=p.name, priority_class="koord-prod",
                             usage=Resources(500, 2 * GI)) for p in await sim.list_pods(name)]
            for name in (quiet, talking)}
    task = asyncio.create_task(agents())
    try:
        async def batch_of(name: str) -> int:
            batch = (await sim.get_node(name)).batch_allocatable()
            return batch.cpu_milli if batch else 0

        async def both_offer() -> bool:
            return await batch_of(quiet) > 0 and await batch_of(talking) > 0

        await _until(both_offer, 30, "batch allocatable on both nodes")

        async with httpx.AsyncClient(timeout=5) as http:
            async def extender_follows_both() -> bool:
                return (await http.get(ext_url + "/api/v1/summary")).json().get("metrics") == 2

            # The extender's tail starts at each node's last NodeMetric: a skewed one published
            # before it follows the stream would be superseded by the next good one, never seen.
            await _until(extender_follows_both, 30, "the extender following both nodes' NodeMetrics")

            # clock skew: an hour ahead of the simulated clock every receiver runs on
            await bus.publish(subjects.nodemetric(talking), bus.stamp(NodeMetric(
                node=talking, ts=sim.now_ms() + 3_600_000, capacity=Resources(32000, 128 * GI),
                node_usage=Resources(31000, 120 * GI))))

            async def skew_counted() -> bool:
                texts = [(await http.get(u + "/metrics")).text for u in (slo_url, ext_url)]
                return all('reason_kind="clock_skew"' in t for t in texts)

            await _until(skew_counted, 45, "the skewed NodeMetric dead-lettered by both services")

            silent.set()
            went_quiet = time.monotonic()

            async def quiet_degraded() -> bool:
                return await batch_of(quiet) == 0

            degraded_at = await _until(quiet_degraded, 30, "batch of the silent node removed")
            assert degraded_at - went_quiet <= 60 / SPEED + 6  # degradeTimeMinutes (60 sim s) + a resync
            assert await batch_of(talking) > 0  # the skewed metric was never used, the node still offers

            pod = PodRecord(namespace="default", name="p", uid="p-uid", priority=9000,
                            containers=[ContainerSpec("c", {"cpu": 2000, "memory": 4 * GI}, {"cpu": 2000, "memory": 4 * GI})])
            body = orjson.dumps({"Pod": pod_to_k8s(pod), "NodeNames": [quiet, talking]})

            async def quiet_untrusted() -> bool:
                reply = (await http.post(ext_url + "/filter", content=body)).json()
                return reply.get("NodeNames") == [talking] and "expired" in (reply.get("FailedNodes") or {}).get(quiet, "")

            untrusted_at = await _until(quiet_untrusted, 40, "the extender refusing the silent node")
            assert untrusted_at - went_quiet >= 180 / SPEED - 2  # not before nodeMetricExpirationSeconds
    finally:
        stop.set()
        task.cancel()
        for p in (slo, ext):
            p.terminate()
            p.wait(15)
        await sim.close()
