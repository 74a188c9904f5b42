"""End to end with processes over a real NATS server: the descheduler and the scheduler
extender run as services against the shared simulated cluster.

Twenty nodes replay the Bitbrains traces from a fixed instant; three of them get batch
workloads whose pods turn hot (cpu x3.5). The test process plays the remaining parts of a cluster: the node
agents (a NodeMetric per node from the simulated usage, every half second) and kube-scheduler
(ExtenderScheduler drives the extender for every pending pod). The node agent's own NodeMetric
averages at least 60 simulated seconds, so with it every move would show a minute late (or, with
the simulated clock sped up, the trace-driven pods drift away from the scenario); the metrics here
are the same messages, taken from the simulated usage at once. The descheduler must bring
every node under its high threshold with ReservationFirst migrations, within its limits,
without violating the PodDisruptionBudget that guards one workload, and every evicted pod's
replacement must land, through the extender, on the low node its reservation holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml
from desched_scenario import BATCH_NS, batch_pod, cpu_percent, node_metric
from koordcommon import subjects
from koordcommon.schemas import Event
from koordcommon.testing.net import free_port, wait_http_ready
from koordsim.cluster import PDB_KIND, SimCluster, SimSpec
from koordsim.scheduler import ExtenderScheduler

pytestmark = pytest.mark.e2e

HOT = ("sim-node-003", "sim-node-010", "sim-node-017")
HIGH_CPU, LOW_CPU = 75, 45
START_MS = 1_717_243_200_000  # the traces' instant the cluster starts at (the same every run)
PER_NODE, PER_ROUND = 2, 4
GUARD_RS = "guard-6c8d9f7b4"
ARGS = {
    "nodePools": [{
        "lowThresholds": {"cpu": LOW_CPU, "memory": 55},
        "highThresholds": {"cpu": HIGH_CPU, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 2},  # acts on the 3rd hot round
    }],
    # the online pods replay traces; only the batch workloads below are this scenario's to move
    "evictableNamespaces": {"include": [BATCH_NS]},
    "limits": {"maxMigratingPerNode": PER_NODE, "maxMigratingPerRound": PER_ROUND, "evictQPS": 5, "evictBurst": 2},
    "migration": {"defaultJobMode": "ReservationFirst", "reservationWaitSeconds": 10, "defaultJobTTLSeconds": 60},
}


def start(module: str, env: dict[str, str], log_path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", module], env=env, stdout=log, stderr=log)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def populate(sim: SimCluster) -> None:
    """Five replicas of a batch workload on each hot node; on the first, three more replicas of a
    lower-priority workload whose PDB allows no disruption (so they are tried first, and refused)."""
    for n, node in enumerate(HOT):
        for i in range(5):
            await sim.create_pod(batch_pod(f"crunch{n}-7d9f6b8c5d", i, node))
    for i in range(3):
        await sim.create_pod(batch_pod(GUARD_RS, i, HOT[0], priority=5100))
    await sim.apply_custom(PDB_KIND, {"metadata": {"name": "guard", "namespace": BATCH_NS},
                                      "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "guard"}}}})
    # the hot spot: the batch workloads' pods use 3.5x what they would (their replacements do not)
    for n in range(len(HOT)):
        for i in range(5):
            await sim.set_usage_override(pod_key=f"{BATCH_NS}/crunch{n}-7d9f6b8c5d-{i:05d}", cpu_factor=3.5)


async def test_three_hot_nodes_are_drained_safely(bus, bus_namespace, nats_url, tmp_path):
    pytest.importorskip("scheduler_extender")
    sim = SimCluster(SimSpec(nodes=20, seed=5, speed=1, start_ms=START_MS), bus=bus, genesis=True)
    await sim.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM, subjects.EVENTS_STREAM)
    await populate(sim)
    before = {n: cpu_percent(sim, n) for n in sim.state.nodes}
    assert all(before[n] > HIGH_CPU for n in HOT), before
    assert all(before[n] < LOW_CPU for n in before if n not in HOT), before

    args_file = tmp_path / "lownodeload.yaml"
    args_file.write_text(yaml.safe_dump(ARGS))
    ext_port, des_port = free_port(), free_port()
    base = dict(os.environ, NATS_URL=nats_url)
    extender = start("scheduler_extender", dict(
        base, KOORD_EXTENDER_HTTP_HOST="127.0.0.1", KOORD_EXTENDER_HTTP_PORT=str(ext_port),
        KOORD_EXTENDER_BUS_NAMESPACE=bus_namespace, KOORD_EXTENDER_CLUSTER_BACKEND="sim",
    ), tmp_path / "extender.log")
    descheduler = start("descheduler", dict(
        base, KOORD_DESCHEDULER_HTTP_HOST="127.0.0.1", KOORD_DESCHEDULER_HTTP_PORT=str(des_port),
        KOORD_DESCHEDULER_BUS_NAMESPACE=bus_namespace, KOORD_DESCHEDULER_CLUSTER_BACKEND="sim",
        KOORD_DESCHEDULER_INTERVAL_S="1", KOORD_DESCHEDULER_JOB_POLL_S="0.5",
        KOORD_DESCHEDULER_ARGS_FILE=str(args_file), KOORD_DESCHEDULER_EXTENDER_URL=f"http://127.0.0.1:{ext_port}",
    ), tmp_path / "descheduler.log")

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in (tmp_path / "extender.log",
                                                                             tmp_path / "descheduler.log"))

    stopping = asyncio.Event()
    guard_healthy: list[int] = []
    events: list[Event] = []

    async def node_agents() -> None:
        while not stopping.is_set():
            await bus.publish_many([(subjects.nodemetric(n), bus.stamp(node_metric(sim, n))) for n in sim.state.nodes])
            guard_healthy.append(sum(1 for p in sim.state.pods.values()
                                     if p.labels.get("app") == "guard" and p.phase == "Running"))
            await asyncio.sleep(0.5)

    placements = []

    async def kube_scheduler(sched: ExtenderScheduler) -> None:
        while not stopping.is_set():
            placements.extend(await sched.schedule_pending())
            await asyncio.sleep(0.3)

    async def collect() -> None:
        async for d in bus.tail(subjects.EVENTS_STREAM, "koord.events.deschedule.>", Event):
            events.append(d.msg)

    tasks = [asyncio.create_task(node_agents()), asyncio.create_task(collect())]
    try:
        await asyncio.to_thread(wait_http_ready, f"http://127.0.0.1:{ext_port}/readyz", 30)
        await asyncio.to_thread(wait_http_ready, f"http://127.0.0.1:{des_port}/readyz", 30)
        sched = ExtenderScheduler(sim, f"http://127.0.0.1:{ext_port}")
        tasks.append(asyncio.create_task(kube_scheduler(sched)))

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{des_port}") as client:
            deadline = time.monotonic() + 50
            while True:
                assert extender.poll() is None and descheduler.poll() is None, logs()
                jobs = (await client.get("/api/v1/jobs")).json()["items"]
                in_flight = [j for j in jobs if j["phase"] not in ("Succeeded", "Failed")]
                pending = [p for p in sim.state.pods.values() if p.phase == "Pending"]
                cool = all(cpu_percent(sim, n) <= HIGH_CPU for n in HOT)
                if cool and not in_flight and not pending and any(e.action == "migrated" for e in events):
                    break
                if time.monotonic() >= deadline:
                    plan = (await client.get("/api/v1/plan")).json()
                    raise AssertionError(
                        f"not settled: {[round(cpu_percent(sim, n)) for n in HOT]} in flight {in_flight} "
                        f"pending {[p.key for p in pending]}\nlast plan {plan}\n"
                        f"events {[(e.node, e.action, e.target.get('name')) for e in events if e.action != 'skip']}"
                        f"\n{logs()}"
                    )
                await asyncio.sleep(0.5)
        await asyncio.sleep(0.5)  # the last events reach the collector
        await sched.aclose()
    finally:
        stopping.set()
        for t in tasks:
            t.cancel()
            with contextlib.suppress(BaseException):
                await t
        stop(descheduler)
        stop(extender)
        await sim.close()

    # every node ends under its high threshold (memory was never near it)
    after = {n: cpu_percent(sim, n) for n in sim.state.nodes}
    assert all(v <= HIGH_CPU for v in after.values()), after

    # the PDB held throughout: its three replicas were running at every sample, each refusal rolled back
    assert guard_healthy and min(guard_healthy) == 3
    assert sorted(p.name for p in sim.state.pods.values() if p.labels.get("app") == "guard") == [
        f"{GUARD_RS}-{i:05d}" for i in range(3)]
    refused = [e for e in events if e.action == "blocked"]
    assert refused and all(e.target["name"].startswith(GUARD_RS) for e in refused)
    assert "disruption budget guard needs 3 healthy pods" in refused[0].reason

    # the limits held: never more than PER_NODE migrations in flight on a node, nor more than
    # the workload allows (5 replicas -> 2), and only batch pods of the hot nodes moved
    open_jobs: dict[str, set[str]] = {}
    open_by_workload: dict[str, set[str]] = {}
    evicted = [e for e in events if e.action == "evicted"]
    for e in events:
        uid, wl = e.target.get("uid"), e.target.get("workload")
        if e.action == "reservation-created":
            open_jobs.setdefault(e.node, set()).add(uid)
            open_by_workload.setdefault(wl, set()).add(uid)
            assert len(open_jobs[e.node]) <= PER_NODE, e
            assert len(open_by_workload[wl]) <= 2, e
        elif e.action in ("migrated", "rollback", "blocked", "timeout", "not_found", "forbidden", "error"):
            open_jobs.get(e.node, set()).discard(uid)
            open_by_workload.get(wl, set()).discard(uid)
    assert evicted and all(e.node in HOT and e.target["namespace"] == BATCH_NS for e in evicted)
    assert len(evicted) <= 3 * 5
    # evictQPS 5 with a burst of 2: any three evictions span at least 0.2 s (less the call's own time)
    times = sorted(e.ts for e in evicted)
    assert all(b - a >= 150 for a, b in zip(times, times[2:])), times

    # every evicted pod was replaced, through the extender, on the low node its reservation held
    migrated = {e.target["uid"]: e for e in events if e.action == "migrated"}
    assert set(migrated) == {e.target["uid"] for e in evicted}, (evicted, migrated)
    for e in migrated.values():
        assert e.target["replacement_node"] == e.target["target_node"], [p for p in placements if p.name == e.target["replacement"].split("/")[1]]
        assert e.target["target_node"] not in HOT
        assert before[e.target["target_node"]] <= LOW_CPU
        placed = sim.state.pods[e.target["replacement"]]
        assert placed.node_name == e.target["target_node"] and placed.phase == "Running"
    reservations = await sim.list_custom("Reservation")
    assert {r["status"]["phase"] for r in reservations} == {"Succeeded"}
    assert len(reservations) == len(evicted)
