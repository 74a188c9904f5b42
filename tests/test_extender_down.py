"""The extender down, over real processes: the scheduler-extender runs as a process on a simulated
cluster and is killed (kill -9); kube-scheduler (koordsim's ExtenderScheduler, configured as the
deploy example configures kube-scheduler: `ignorable` read from
deploy/scheduler/kube-scheduler-config.yaml) goes on scheduling without it, and the in-tree fit
still holds batch pods to the batch allocatable the slo-controller published: nothing is placed
beyond it. A scheduler that did not ignore the extender would stop placing pods instead."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import yaml
from koordcommon import subjects
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric
from koordcommon.testing import processes
from koordcommon.testing.net import free_port, wait_http_ready
from koordsim.cluster import SimCluster, SimSpec
from koordsim.scheduler import ExtenderScheduler

GI = 1 << 30
BATCH_CPU = "koordinator.sh/batch-cpu"
EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "scheduler" / "kube-scheduler-config.yaml"


def batch_pod(name: str, cpu: int) -> PodRecord:
    return PodRecord(namespace="batch", name=name, uid="", priority=5000, labels={"koordinator.sh/qosClass": "BE"},
                     containers=[ContainerSpec("main", {BATCH_CPU: cpu}, {BATCH_CPU: cpu})])  # fmt: skip


async def test_extender_killed_scheduling_goes_on_within_the_batch_allocatable(bus, bus_namespace, nats_url, tmp_path):
    ignorable = yaml.safe_load(EXAMPLE.read_text())["extenders"][0]["ignorable"]
    assert ignorable is True
    sim = SimCluster(SimSpec(nodes=2, online_pods_per_node=0, mid_pods=0, seed=3, speed=1.0), bus=bus, genesis=True)
    await sim.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM)
    names = sorted(n.name for n in await sim.list_nodes())
    for name in names:  # 4 batch CPUs on each node, as the slo-controller would publish them
        await sim.patch_node_status(name, {BATCH_CPU: 4000})
    for name in names:
        await bus.publish(subjects.nodemetric(name), bus.stamp(NodeMetric(
            node=name, ts=sim.now_ms(), report_interval_s=60, capacity=Resources(32000, 128 * GI),
            node_usage=Resources(4000, 16 * GI), system_usage=Resources(500, 2 * GI))))
    port = free_port()
    env = {**os.environ, "NATS_URL": nats_url, "KOORD_EXTENDER_BUS_NAMESPACE": bus_namespace,
           "KOORD_EXTENDER_HTTP_HOST": "127.0.0.1", "KOORD_EXTENDER_HTTP_PORT": str(port)}  # fmt: skip
    ext = processes.start("scheduler_extender", env, tmp_path / "extender.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ready(url + "/healthz", 30)
        async with httpx.AsyncClient(timeout=5) as http:
            deadline = time.monotonic() + 30
            while True:  # the extender knows both nodes and their metrics
                s = (await http.get(url + "/api/v1/summary")).json()
                if s.get("nodes") == 2 and s.get("metrics") == 2:
                    break
                assert time.monotonic() < deadline, s
                await asyncio.sleep(0.2)

        async with ExtenderScheduler(sim, url + "/", ignorable=ignorable) as sched:
            up = await sched.schedule_pod(await sim.create_pod(batch_pod("while-up", 3000)))
            assert up.node in names and up.error == "" and up.scores  # the extender was asked and answered

            ext.kill()  # kill -9: connection refused from now on
            ext.wait(10)
            other = next(n for n in names if n != up.node)
            results = []
            for i in range(3):  # 3 CPUs each; 4 published per node, 3 already taken on one
                r = await sched.schedule_pod(await sim.create_pod(batch_pod(f"while-down-{i}", 3000)))
                assert r.error == "", r.error  # the extender's absence is no scheduling failure
                results.append(r)
            assert [r.node for r in results] == [other, None, None]
            # the in-tree fit holds batch pods to the batch allocatable published
            assert f"Insufficient {BATCH_CPU}" in results[-1].message, results[-1].message
            pods = [p for p in await sim.list_pods() if p.namespace == "batch" and p.node_name]
            per_node = {n: sum(p.requests().get(BATCH_CPU, 0) for p in pods if p.node_name == n) for n in names}
            assert per_node == {up.node: 3000, other: 3000}

        async with ExtenderScheduler(sim, url + "/", ignorable=False) as strict:
            r = await strict.schedule_pod(await sim.create_pod(batch_pod("strict", 500)))
            assert r.node is None and r.error.startswith("failed filter with extender"), r
    finally:
        if ext.poll() is None:
            ext.kill()
            ext.wait(10)
        await sim.close()
