"""The simulated cluster places Pending Reservations as koord-scheduler would, when opened to."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request
from koordcommon.bus import Bus
from koordcommon.cluster import open_cluster
from koordcommon.kube_codec import format_time_ms
from koordcommon.reservations import ANNOTATION_RESERVATION_NAME, ANNOTATION_RESERVE_POD, KIND
from koordcommon.testing.net import free_port
from koordsim.cluster import SimCluster, SimSpec
from koordsim.reservations import needs_cleanup, reserve_pod

START_MS = 1_780_000_000_000


def reservation(name: str, nodes: list[str], cpu: str = "2", memory: str = "1Gi") -> dict:
    """A Reservation as a descheduler builds one for moving a ReplicaSet's pod to `nodes`."""
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": KIND,
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-06-01T12:00:00Z"},
        "spec": {
            "template": {
                "metadata": {"namespace": "batch", "labels": {"app": "crunch"}},
                "spec": {
                    "schedulerName": "default-scheduler",
                    "priority": 5000,
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": nodes}]}]}}},
                },
            },
            "owners": [{"controller": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "crunch-7d9f6b8c5d",
                                       "uid": "rs-uid", "controller": True, "namespace": "batch"}}],
            "ttl": "120s",
            "allocateOnce": True,
        },
        "status": {"phase": "Pending"},
    }


def sim(**options) -> SimCluster:
    return SimCluster(SimSpec(nodes=3, online_pods_per_node=0, mid_pods=0, seed=1, start_ms=START_MS, speed=0), **options)


def test_reserve_pod_is_the_template_named_after_the_reservation():
    pod = reserve_pod(reservation("r1", ["sim-node-001"]))
    assert (pod.namespace, pod.name, pod.uid, pod.node_name, pod.phase) == ("batch", "uid-r1", "uid-r1", None, "Pending")
    assert pod.annotations == {ANNOTATION_RESERVE_POD: "true", ANNOTATION_RESERVATION_NAME: "r1"}
    assert pod.labels == {"app": "crunch"} and pod.priority == 5000
    assert pod.requests() == {"cpu": 2000, "memory": 1 << 30}
    assert pod.controller is not None and (pod.controller.kind, pod.controller.name) == ("ReplicaSet", "crunch-7d9f6b8c5d")


async def test_pending_reservation_is_placed_on_the_node_its_template_requires():
    c = sim(schedule_reservations=True)
    written = await c.apply_custom(KIND, reservation("r1", ["sim-node-002"]))
    assert written["status"]["phase"] == "Pending"  # what the API server answers to the create
    placed = await c.get_custom(KIND, "r1")
    assert placed["status"]["phase"] == "Available" and placed["status"]["nodeName"] == "sim-node-002"
    assert placed["status"]["allocatable"] == {"cpu": "2", "memory": "1Gi"}
    assert {cond["type"]: cond["status"] for cond in placed["status"]["conditions"]} == {"Scheduled": "True", "Ready": "True"}
    assert await c.list_pods() == []  # the reserve pod is never a pod of the cluster
    # a reservation that is no longer Pending is left as it is written
    await c.apply_custom(KIND, {**placed, "status": {**placed["status"], "phase": "Succeeded"}})
    assert (await c.get_custom(KIND, "r1"))["status"]["phase"] == "Succeeded"


async def test_a_reservation_that_fits_nowhere_fails_unschedulable():
    c = sim(schedule_reservations=True)
    await c.update_node("sim-node-001", unschedulable=True)
    await c.apply_custom(KIND, reservation("cordoned", ["sim-node-001"]))
    await c.apply_custom(KIND, reservation("too-big", ["sim-node-000", "sim-node-002"], cpu="64"))
    for name, message in (
        ("cordoned", "0/1 nodes are available: 1 node(s) were unschedulable."),
        ("too-big", "0/2 nodes are available: 2 Insufficient cpu."),
    ):
        status = (await c.get_custom(KIND, name))["status"]
        assert status["phase"] == "Failed" and "nodeName" not in status
        [cond] = status["conditions"]
        assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
            "Scheduled", "False", "Unschedulable", message)


DAY_S = 86_400


def ended(name: str, phase: str, transitions_s_ago: list[int | str], created_s_ago: int = 0) -> dict:
    """A reservation in `phase` whose conditions last changed that many seconds before START_MS."""
    obj = reservation(name, ["sim-node-001"])
    obj["metadata"]["creationTimestamp"] = format_time_ms(START_MS - created_s_ago * 1000)
    obj["status"] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "False", "reason": phase,
         "lastTransitionTime": t if isinstance(t, str) else format_time_ms(START_MS - t * 1000)}
        for t in transitions_s_ago]}
    return obj


@pytest.mark.parametrize("phase, transitions_s_ago, created_s_ago, cleaned", [
    ("Succeeded", [DAY_S + 1], 0, True),  # past gcDurationSeconds (86400)
    ("Succeeded", [DAY_S], 0, False),  # not more than it
    ("Failed", [DAY_S * 3, 10], DAY_S * 3, False),  # the newest transition counts
    ("Failed", [], DAY_S + 1, True),  # no condition: the creation
    ("Available", [DAY_S * 5], DAY_S * 5, False),  # only ended reservations
    ("Pending", [], DAY_S * 5, False),
    ("Succeeded", ["yesterday"], DAY_S * 5, False),  # a time that cannot be read keeps it
])
def test_reservation_gc_deletes_ended_ones_past_the_gc_duration(phase, transitions_s_ago, created_s_ago, cleaned):
    assert needs_cleanup(ended("r", phase, transitions_s_ago, created_s_ago), START_MS) is cleaned


async def test_the_scheduling_replica_collects_ended_reservations_when_one_is_written():
    c = sim(schedule_reservations=True)
    await c.apply_custom(KIND, ended("recent", "Succeeded", [3600]))
    await c.apply_custom(KIND, ended("old", "Succeeded", [DAY_S + 60]))
    assert [r["metadata"]["name"] for r in await c.list_custom(KIND)] == ["recent"]
    await c.apply_custom(KIND, reservation("r2", ["sim-node-002"]))
    assert sorted(r["metadata"]["name"] for r in await c.list_custom(KIND)) == ["r2", "recent"]
    # a replica that does not play koord-scheduler leaves them to it
    other = sim()
    await other.apply_custom(KIND, ended("old", "Succeeded", [DAY_S + 60]))
    assert len(await other.list_custom(KIND)) == 1


async def test_without_the_option_reservations_stay_pending():
    c = sim()
    await c.apply_custom(KIND, reservation("r1", ["sim-node-002"]))
    assert (await c.get_custom(KIND, "r1"))["status"] == {"phase": "Pending"}


def test_the_backend_takes_the_options_by_name():
    c = open_cluster("sim", spec=SimSpec(nodes=1), extender_url="http://127.0.0.1:1/x")
    assert c._reservations is not None and c._reservations.extender_url == "http://127.0.0.1:1/x"
    assert open_cluster("sim", spec=SimSpec(nodes=1))._reservations is None


@pytest.fixture
async def extender():
    """An extender that passes only sim-node-000 and sim-node-001 and records what it was sent."""
    app = FastAPI()
    seen: list[dict] = []

    @app.post("/filter")
    async def filter_(request: Request):
        args = json.loads(await request.body())
        seen.append(args)
        keep = [n for n in args["NodeNames"] if n in ("sim-node-000", "sim-node-001")]
        failed = {n: "not for reservations" for n in args["NodeNames"] if n not in keep}
        return {"Nodes": None, "NodeNames": keep, "FailedNodes": failed, "FailedAndUnresolvableNodes": None, "Error": ""}

    @app.post("/prioritize")
    async def prioritize(request: Request):
        args = json.loads(await request.body())
        return [{"Host": n, "Score": 10 if n == "sim-node-001" else 0} for n in args["NodeNames"]]

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "extender did not start"
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}", seen
    server.should_exit = True
    await task


async def test_reserve_pods_go_through_the_extender(extender):
    url, seen = extender
    c = sim(extender_url=url)  # an extender URL alone turns placement on
    await c.apply_custom(KIND, reservation("any", ["sim-node-000", "sim-node-001", "sim-node-002"]))
    assert (await c.get_custom(KIND, "any"))["status"]["nodeName"] == "sim-node-001"  # the extender's score
    [args] = seen
    assert args["NodeNames"] == ["sim-node-000", "sim-node-001", "sim-node-002"]
    meta = args["Pod"]["metadata"]
    assert meta["name"] == "uid-any" and meta["annotations"][ANNOTATION_RESERVE_POD] == "true"
    assert meta["ownerReferences"][0]["name"] == "crunch-7d9f6b8c5d"
    await c.apply_custom(KIND, reservation("only-2", ["sim-node-002"]))
    status = (await c.get_custom(KIND, "only-2"))["status"]
    assert status["phase"] == "Failed"
    assert status["conditions"][0]["message"] == "0/1 nodes are available: 1 not for reservations."


async def test_placement_is_replicated_over_the_bus(bus, nats_url, bus_namespace):
    other = Bus(nats_url, service="test-b", namespace=bus_namespace)
    await other.connect(timeout_s=10)
    spec = SimSpec(nodes=3, online_pods_per_node=0, mid_pods=0, seed=1, start_ms=START_MS, speed=0)
    placing = SimCluster(spec, bus=bus, genesis=True, schedule_reservations=True)
    watching = SimCluster(bus=other)
    try:
        await asyncio.wait_for(asyncio.gather(placing.start(), watching.start()), 30)
        events = watching.watch()
        await placing.apply_custom(KIND, reservation("r1", ["sim-node-001"]))
        phases = []
        while len(phases) < 2:
            e = await asyncio.wait_for(anext(events), 10)
            if e.kind == "Custom" and e.custom_kind == KIND:
                phases.append((e.type, e.obj["status"]["phase"]))
        assert phases == [("ADDED", "Pending"), ("MODIFIED", "Available")]
        assert (await watching.get_custom(KIND, "r1"))["status"]["nodeName"] == "sim-node-001"
        # a replica without the option places nothing
        await watching.apply_custom(KIND, reservation("r2", ["sim-node-001"]))
        assert (await watching.get_custom(KIND, "r2"))["status"]["phase"] == "Pending"
    finally:
        await placing.close()
        await watching.close()
        await other.close()
