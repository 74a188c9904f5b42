"""The simulated cluster: genesis, usage from the traces, mutations, PDBs, replicas over NATS."""

from __future__ import annotations

import asyncio
import time

import pytest
from koordcommon.bus import Bus
from koordcommon.cluster import EvictionOutcome, open_cluster
from koordcommon.cluster.port import ClusterPort
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.resources import Resources
from koordsim import traces
from koordsim.cluster import PDB_KIND, MutationError, SimClock, SimCluster, SimSpec

T0 = 1_780_000_200_000  # a multiple of 300 s: trace samples fall on it exactly


def spec(**kw) -> SimSpec:
    base = {"nodes": 6, "seed": 11, "start_ms": T0, "wall_anchor_ms": int(time.time() * 1000), "online_pods_per_node": 8}
    base.update(kw)
    return SimSpec(**base)


@pytest.fixture(scope="module")
def sim() -> SimCluster:
    return SimCluster(spec())


def batch_pod(name: str, batch_cpu: int = 2000, batch_mem: int = 4 << 30, labels=None, node=None) -> PodRecord:
    return PodRecord(
        namespace="batch",
        name=name,
        uid="",
        node_name=node,
        labels=dict(labels or {"app": "spark", "koordinator.sh/qosClass": "BE"}),
        priority=5000,
        priority_class_name="koord-batch",
        containers=[
            ContainerSpec(
                "main",
                {"koordinator.sh/batch-cpu": batch_cpu, "koordinator.sh/batch-memory": batch_mem},
                {"koordinator.sh/batch-cpu": batch_cpu, "koordinator.sh/batch-memory": batch_mem},
            )
        ],
    )


def pdb(name: str, namespace: str, selector: dict | None, **spec_fields) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, **spec_fields},
    }


# --------------------------------------------------------------------------- genesis


async def test_genesis_is_deterministic():
    a, b = SimCluster(spec()), SimCluster(spec())
    assert await a.list_nodes() == await b.list_nodes()
    assert await a.list_pods() == await b.list_pods()
    for t in (T0, T0 + 3_600_000, T0 + 7 * 86_400_000 + 123_456):
        for n in await a.list_nodes():
            assert a.usage_snapshot(n.name, t) == b.usage_snapshot(n.name, t)
    other = SimCluster(spec(seed=12))
    assert [p.name for p in await other.list_pods()] != [p.name for p in await a.list_pods()]


async def test_nodes_have_reserved_capacity_and_names(sim):
    nodes = await sim.list_nodes()
    assert [n.name for n in nodes] == [f"sim-node-00{i}" for i in range(6)]
    for n in nodes:
        assert n.capacity == {"cpu": 32000, "memory": 128 << 30, "pods": 110}
        assert n.allocatable == {"cpu": 31500, "memory": (128 << 30) - (1 << 30), "pods": 110}
        assert n.ready and not n.unschedulable
        assert n.labels["kubernetes.io/hostname"] == n.name
        assert n.labels["topology.kubernetes.io/zone"]
    assert SimSpec(nodes=1000).node_name(7) == "sim-node-007"
    assert SimSpec(nodes=1001).node_name(7) == "sim-node-0007"


async def test_prod_requests_fill_60_to_80_percent(sim):
    for n in await sim.list_nodes():
        pods = await sim.list_pods(node_name=n.name)
        prod = [p for p in pods if p.priority_class is PriorityClass.PROD]
        assert len(prod) == 8
        req = sum((p.request_resources() for p in prod), Resources())
        alloc = n.allocatable_resources()
        assert 0.59 <= req.cpu_milli / alloc.cpu_milli <= 0.80
        assert 0.59 <= req.memory_bytes / alloc.memory_bytes <= 0.80
        total = sum((p.request_resources() for p in pods), Resources())
        assert total.fits_in(alloc)
        for p in prod:
            r = p.request_resources()
            assert 0 < r.cpu_milli <= 0.4 * alloc.cpu_milli and 0 < r.memory_bytes <= 0.4 * alloc.memory_bytes
            assert p.limit_resources() == Resources(2 * r.cpu_milli, 2 * r.memory_bytes)
            assert 9000 <= p.priority <= 9099 and p.qos is QoSClass.LS
            assert p.namespace == "online" and p.phase == "Running"
            assert p.name.startswith(p.labels["app"] + "-")


async def test_mid_pods_and_workloads(sim):
    pods = await sim.list_pods(namespace="online")
    mid = [p for p in pods if p.priority_class is PriorityClass.MID]
    assert len(mid) == 1  # nodes // 4
    for p in pods:
        kind, name = await sim.resolve_workload(p)
        assert (kind, name) == ("Deployment", p.labels["app"])
    bare = PodRecord("x", "bare", "u1")
    assert await sim.resolve_workload(bare) == ("Pod", "bare")
    rs = PodRecord("x", "w-1", "u2", owners=[OwnerRef("ReplicaSet", "web-7d4b9c8f5x")])
    assert await sim.resolve_workload(rs) == ("Deployment", "web")
    job = PodRecord("x", "j-1", "u3", owners=[OwnerRef("Job", "etl")])
    assert await sim.resolve_workload(job) == ("Job", "etl")


async def test_usage_follows_the_bitbrains_trace(sim):
    pod = next(p for p in await sim.list_pods() if p.priority_class is PriorityClass.PROD)
    vm = traces.bitbrains_vm(int(pod.labels["app"].split("-")[1]))
    src = sim.state.usage.pod_sources[pod.uid]
    req = pod.request_resources()
    step = T0 // 300_000
    for k in (0, 1, 17, 288, 5000):
        i = (step + k + src.offset) % len(vm)
        got = sim.pod_usage(pod, T0 + k * 300_000)
        assert got.cpu_milli == int(vm.cpu_milli[i] * req.cpu_milli / (vm.cores * 1000))
        assert abs(got.memory_bytes - vm.memory_bytes[i] * req.memory_bytes / vm.memory_bytes_provisioned) <= 1
    # half-way between two samples: linear interpolation; one whole trace later: the same value
    i0, i1 = (step + src.offset) % len(vm), (step + 1 + src.offset) % len(vm)
    half = sim.pod_usage(pod, T0 + 150_000).cpu_milli
    assert half == int((vm.cpu_milli[i0] + vm.cpu_milli[i1]) / 2 * req.cpu_milli / (vm.cores * 1000))
    assert sim.pod_usage(pod, T0 + len(vm) * 300_000) == sim.pod_usage(pod, T0)
    assert sim.container_usage(pod, "app", T0) == sim.pod_usage(pod, T0)
    assert sim.container_usage(pod, "nope", T0) == Resources()


async def test_node_usage_is_pods_plus_system(sim):
    for n in await sim.list_nodes():
        for t in (T0, T0 + 40_000, T0 + 86_400_000):
            snap = sim.usage_snapshot(n.name, t)
            pods = sum((sim.pod_usage(p, t) for p in await sim.list_pods(node_name=n.name)), Resources())
            system = sim.system_usage(n.name, t)
            assert system.cpu_milli > 0 and system.memory_bytes > 0
            assert snap.system_usage == system
            assert sim.node_usage(n.name, t) == pods + system == snap.node_usage
            assert snap.node_usage.cpu_milli < n.capacity["cpu"]
    assert sim.node_usage("no-such-node", T0) == Resources()


async def test_nodes_differ():
    s = SimCluster(spec())
    usages = {s.node_usage(n.name, T0) for n in await s.list_nodes()}
    assert len(usages) == 6


# --------------------------------------------------------------------------- mutations


async def test_batch_pod_lifecycle_and_usage():
    s = SimCluster(spec())
    events = s.watch()
    created = await s.create_pod(batch_pod("spark-1"))
    assert created.uid and created.phase == "Pending" and created.node_name is None
    assert s.pod_usage(created) == Resources()
    await s.bind_pod("batch", "spark-1", "sim-node-002", created.uid)
    pod = await s.get_pod("batch", "spark-1")
    assert pod.node_name == "sim-node-002" and pod.phase == "Running"
    assert pod in await s.list_pods(node_name="sim-node-002")
    for t in range(T0, T0 + 3_600_000, 97_000):
        u = s.pod_usage(pod, t)
        assert 1200 <= u.cpu_milli <= 1600  # 0.7 +- 0.1 of 2000m batch-cpu
        assert 0.55 * (4 << 30) <= u.memory_bytes <= 0.65 * (4 << 30)
    assert s.usage_snapshot("sim-node-002", T0).pods["batch/spark-1"] == s.pod_usage(pod, T0)
    with pytest.raises(MutationError):
        await s.bind_pod("batch", "spark-1", "sim-node-003")  # already bound
    with pytest.raises(MutationError):
        await s.create_pod(batch_pod("spark-1"))  # exists
    await s.delete_pod("batch", "spark-1")
    assert await s.get_pod("batch", "spark-1") is None
    got = [await asyncio.wait_for(events.__anext__(), 1) for _ in range(3)]
    assert [(e.type, e.kind, e.obj.name) for e in got] == [
        ("ADDED", "Pod", "spark-1"),
        ("MODIFIED", "Pod", "spark-1"),
        ("DELETED", "Pod", "spark-1"),
    ]
    await events.aclose()


async def test_watch_each_subscriber_gets_all():
    s = SimCluster(spec())
    w1, w2 = s.watch(), s.watch()
    await s.patch_node_status("sim-node-000", {"koordinator.sh/batch-cpu": 1000})
    await s.apply_custom("NodeSLO", {"metadata": {"name": "sim-node-000"}, "spec": {}})
    for w in (w1, w2):
        e1 = await asyncio.wait_for(w.__anext__(), 1)
        e2 = await asyncio.wait_for(w.__anext__(), 1)
        assert (e1.type, e1.kind, e1.obj.name) == ("MODIFIED", "Node", "sim-node-000")
        assert (e2.type, e2.kind, e2.custom_kind, e2.obj["metadata"]["name"]) == ("ADDED", "Custom", "NodeSLO", "sim-node-000")
    await w1.aclose()
    assert len(s._watchers) == 1
    await s.close()


async def test_node_status_patch_sets_capacity_and_allocatable():
    s = SimCluster(spec())
    n = await s.patch_node_status("sim-node-001", {"koordinator.sh/batch-cpu": 12345, "koordinator.sh/batch-memory": 6 << 30})
    for node in (n, await s.get_node("sim-node-001")):
        assert node.capacity["koordinator.sh/batch-cpu"] == node.allocatable["koordinator.sh/batch-cpu"] == 12345
        assert node.batch_allocatable() == Resources(12345, 6 << 30)
        assert node.allocatable["cpu"] == 31500  # untouched
    n = await s.patch_node_status("sim-node-001", {}, ["koordinator.sh/batch-memory"])
    assert "koordinator.sh/batch-memory" not in n.capacity and "koordinator.sh/batch-memory" not in n.allocatable
    assert n.allocatable["koordinator.sh/batch-cpu"] == 12345
    with pytest.raises(MutationError):
        await s.patch_node_status("nope", {"x": 1})


async def test_custom_objects():
    s = SimCluster(spec())
    await s.apply_custom("Recommendation", {"metadata": {"name": "vm-1", "namespace": "online"}, "spec": {"a": 1}})
    await s.apply_custom("Recommendation", {"metadata": {"name": "vm-1", "namespace": "online"}, "spec": {"a": 2}})
    await s.apply_custom("NodeSLO", {"metadata": {"name": "sim-node-000"}})
    got = await s.get_custom("Recommendation", "vm-1", "online")
    assert got["spec"] == {"a": 2}
    assert await s.get_custom("Recommendation", "vm-1") is None  # wrong namespace
    assert len(await s.list_custom("Recommendation")) == 1
    assert await s.list_custom("Recommendation", namespace="other") == []
    await s.delete_custom("Recommendation", "vm-1", "online")
    assert await s.list_custom("Recommendation") == []
    await s.emit_event({"kind": "Pod", "name": "x", "namespace": "y"}, "Evicted", "memory pressure", "Warning")
    assert s.events[-1]["reason"] == "Evicted"


# --------------------------------------------------------------------------- eviction / PDB


async def _two_replicas(s: SimCluster, app: str) -> None:
    for i in range(2):
        p = batch_pod(f"{app}-{i}", labels={"app": app})
        created = await s.create_pod(p)
        await s.bind_pod("batch", p.name, "sim-node-000", created.uid)


@pytest.mark.parametrize(
    "pdb_spec, first, second",
    [
        (None, EvictionOutcome.EVICTED, EvictionOutcome.EVICTED),  # no PDB at all
        ({"minAvailable": 1}, EvictionOutcome.EVICTED, EvictionOutcome.BLOCKED),
        ({"minAvailable": 2}, EvictionOutcome.BLOCKED, EvictionOutcome.BLOCKED),
        ({"minAvailable": "50%"}, EvictionOutcome.EVICTED, EvictionOutcome.BLOCKED),
        ({"maxUnavailable": 1}, EvictionOutcome.EVICTED, EvictionOutcome.BLOCKED),
        ({"maxUnavailable": "100%"}, EvictionOutcome.EVICTED, EvictionOutcome.EVICTED),
        ({"maxUnavailable": 0}, EvictionOutcome.BLOCKED, EvictionOutcome.BLOCKED),
    ],
)
async def test_eviction_with_pdb(pdb_spec, first, second):
    s = SimCluster(spec())
    await _two_replicas(s, "kv")
    if pdb_spec is not None:
        await s.apply_custom(PDB_KIND, pdb("kv-pdb", "batch", {"matchLabels": {"app": "kv"}}, **pdb_spec))
    r1 = await s.evict_pod("batch", "kv-0", reason="test")
    assert r1.outcome is first
    assert (await s.get_pod("batch", "kv-0") is None) == (first is EvictionOutcome.EVICTED)
    r2 = await s.evict_pod("batch", "kv-1")
    assert r2.outcome is second
    if second is EvictionOutcome.BLOCKED:
        assert r2.message.startswith("Cannot evict pod as it would violate the pod's disruption budget.")
        assert "kv-pdb" in r2.message and r2.retry_after_s == 10
        assert await s.get_pod("batch", "kv-1") is not None


async def test_eviction_edge_cases():
    s = SimCluster(spec())
    await _two_replicas(s, "kv")
    await s.apply_custom(PDB_KIND, pdb("block", "batch", {"matchLabels": {"app": "kv"}}, minAvailable=2))
    assert (await s.evict_pod("batch", "nope")).outcome is EvictionOutcome.NOT_FOUND
    # dry run answers without deleting
    assert (await s.evict_pod("batch", "kv-0", dry_run=True)).outcome is EvictionOutcome.BLOCKED
    # a pod of another namespace or not selected is not protected
    other = await s.create_pod(batch_pod("free-0", labels={"app": "other"}))
    await s.bind_pod("batch", "free-0", "sim-node-001", other.uid)
    assert (await s.evict_pod("batch", "free-0", dry_run=True)).outcome is EvictionOutcome.EVICTED
    assert await s.get_pod("batch", "free-0") is not None
    assert (await s.evict_pod("batch", "free-0")).outcome is EvictionOutcome.EVICTED
    # a pending pod is deleted without a PDB check
    await s.create_pod(batch_pod("kv-pending", labels={"app": "kv"}))
    assert (await s.evict_pod("batch", "kv-pending")).outcome is EvictionOutcome.EVICTED
    # null selector selects nothing; a second matching PDB makes eviction unsupported
    await s.apply_custom(PDB_KIND, pdb("null", "batch", None, minAvailable=5))
    assert (await s.evict_pod("batch", "kv-0", dry_run=True)).outcome is EvictionOutcome.BLOCKED
    await s.apply_custom(PDB_KIND, pdb("all", "batch", {}, maxUnavailable=5))
    r = await s.evict_pod("batch", "kv-0")
    assert r.outcome is EvictionOutcome.FORBIDDEN and "more than one PodDisruptionBudget" in r.message
    # an unhealthy pod may go while the budget is healthy
    await s.delete_custom(PDB_KIND, "all", "batch")
    await s.apply_custom(PDB_KIND, pdb("block", "batch", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["kv"]}]}, minAvailable=1))
    await s.set_pod_phase("batch", "kv-1", "Unknown")
    assert (await s.evict_pod("batch", "kv-1")).outcome is EvictionOutcome.EVICTED


# --------------------------------------------------------------------------- overrides, clock


async def test_usage_override_hot_spot():
    s = SimCluster(spec())
    node = "sim-node-003"
    base = s.usage_snapshot(node, T0 + 60_000)
    await s.set_usage_override(node=node, factor=3.0, from_ms=T0, to_ms=T0 + 600_000)
    hot = s.usage_snapshot(node, T0 + 60_000)
    for k, u in base.pods.items():
        assert hot.pods[k].cpu_milli in (3 * u.cpu_milli, 3 * u.cpu_milli + 1, 3 * u.cpu_milli + 2)
    assert hot.system_usage == base.system_usage
    assert s.usage_snapshot(node, T0 + 600_000) == SimCluster(spec()).usage_snapshot(node, T0 + 600_000)
    key = next(iter(base.pods))
    await s.set_usage_override(pod_key=key, cpu_factor=1.0, memory_factor=2.0)
    pod = await s.get_pod(*key.split("/"))
    assert s.pod_usage(pod, T0 + 700_000).memory_bytes >= 2 * SimCluster(spec()).pod_usage(pod, T0 + 700_000).memory_bytes - 2
    await s.clear_usage_overrides()
    assert s.usage_snapshot(node, T0 + 60_000) == base


async def test_usage_of_nodes_is_each_nodes_snapshot():
    """A node agent's one evaluation of all its nodes gives every node exactly its own snapshot,
    with an override in force and after a pod left (the joined pod set is built again)."""
    s = SimCluster(spec())
    names = ["sim-node-001", "sim-node-003", "sim-node-005", "no-such-node"]
    await s.set_usage_override(node="sim-node-003", cpu_factor=2.5, from_ms=T0)

    def check(t: int) -> None:
        u = s.usage_of_nodes(names, t)
        assert u.nodes == names[:3]
        for i, node in enumerate(u.nodes):
            snap = s.usage_snapshot(node, t)
            lo, hi = u.bounds[i], u.bounds[i + 1]
            pods = {k: Resources(int(c), int(m)) for k, c, m in zip(u.keys[lo:hi], u.pod_cpu[lo:hi], u.pod_mem[lo:hi])}
            assert pods == snap.pods
            assert (int(u.node_cpu[i]), int(u.node_mem[i])) == (snap.node_usage.cpu_milli, snap.node_usage.memory_bytes)

    check(T0 + 60_000)
    victim = s.state.pods_on("sim-node-005")[0]
    assert (await s.evict_pod(victim.namespace, victim.name)).outcome is EvictionOutcome.EVICTED
    check(T0 + 120_000)
    assert victim.key not in s.usage_of_nodes(names, T0 + 120_000).keys


def test_sim_clock_speed():
    wall = [1000.0]
    clock = SimClock(start_ms=5_000, speed=60, wall_anchor_ms=1_000_000, wall=lambda: wall[0])
    assert clock.now_ms() == 5_000
    wall[0] = 1010.0
    assert clock.now_ms() == 5_000 + 600_000
    assert clock.sim_to_wall_s(5_000 + 600_000) == 1010.0
    resolved = SimSpec().resolved(wall_ms=42)
    assert (resolved.start_ms, resolved.wall_anchor_ms) == (42, 42)
    assert SimSpec.model_validate_json(resolved.model_dump_json()) == resolved


async def test_synthetic_load_only_when_asked_for(tmp_path):
    s = SimCluster(spec(trace_set="synthetic"))
    assert s.state.synthetic
    assert len(await s.list_pods()) == 6 * 8 + 1
    assert s.node_usage("sim-node-000", T0).cpu_milli > 0
    # a folder without the traces is an error, never a quiet switch to synthetic load
    with pytest.raises(traces.TracesNotFound):
        SimCluster(spec(traces_dir=str(tmp_path / "absent")))


def test_genesis_resolves_which_traces_every_replica_reads(monkeypatch):
    monkeypatch.delenv("KOORD_TRACE_DIR", raising=False)
    resolved = spec().resolved()
    assert resolved.trace_set == "sample" and resolved.trace_source() == traces.sample_source()
    assert not SimCluster(spec(nodes=1)).state.synthetic
    with pytest.raises(traces.FullTracesRequired, match="KOORD_TRACE_DIR"):
        spec(trace_set="full").trace_source()


def test_open_cluster_and_protocol():
    c = open_cluster("sim", spec=spec(nodes=2))
    assert isinstance(c, SimCluster) and isinstance(c, ClusterPort)


async def test_thousand_nodes_build_and_query_fast():
    t0 = time.perf_counter()
    s = SimCluster(spec(nodes=1000, online_pods_per_node=30, mid_pods=0))
    build_s = time.perf_counter() - t0
    assert len(s.state.pods) == 30_000
    assert build_s < 15  # a few seconds on an idle machine; bounded for a shared CI box
    names = list(s.state.nodes)
    for n in names:
        s.usage_snapshot(n, T0)  # compiles the per-node index arrays
    t0 = time.perf_counter()
    for n in names:
        s.usage_snapshot(n, T0 + 5_000)
    assert time.perf_counter() - t0 < 1.5


# --------------------------------------------------------------------------- replicas over NATS


def _state(s: SimCluster) -> tuple:
    return (
        s.spec,
        sorted(s.state.nodes.items()),
        sorted(s.state.pods.items()),
        {k: sorted(v.items()) for k, v in s.state.custom.items()},
        s.state.overrides,
        list(s.state.events),
        [s.usage_snapshot(n, T0 + 900_000) for n in sorted(s.state.nodes)],
    )


async def test_replicas_converge_over_nats(bus, nats_url, bus_namespace):
    other = Bus(nats_url, service="test-b", namespace=bus_namespace)
    await other.connect(timeout_s=10)
    a = SimCluster(spec(nodes=4), bus=bus, genesis=True)
    b = SimCluster(bus=other)
    try:
        await asyncio.wait_for(asyncio.gather(a.start(), b.start()), 30)
        assert a.spec == b.spec and abs(a.now_ms() - b.now_ms()) < 1000
        events_b = b.watch()

        async def writer_a():
            p = await a.create_pod(batch_pod("a-0", labels={"app": "kv"}))
            await a.bind_pod("batch", "a-0", "sim-node-001", p.uid)
            await a.patch_node_status("sim-node-000", {"koordinator.sh/batch-cpu": 7000})
            await a.apply_custom(PDB_KIND, pdb("kv", "batch", {"matchLabels": {"app": "kv"}}, minAvailable=1))
            await a.set_usage_override(node="sim-node-002", factor=2.0)

        async def writer_b():
            p = await b.create_pod(batch_pod("b-0", labels={"app": "kv"}))
            await b.bind_pod("batch", "b-0", "sim-node-002", p.uid)
            await b.patch_node_status("sim-node-000", {"koordinator.sh/batch-memory": 9 << 30})
            await b.apply_custom("NodeSLO", {"metadata": {"name": "sim-node-003"}, "spec": {"x": 1}})
            await b.emit_event({"kind": "Node", "name": "sim-node-003"}, "Test", "from b")

        await asyncio.wait_for(asyncio.gather(writer_a(), writer_b()), 30)
        # read-your-writes: the writer sees its own change at once
        assert (await b.get_pod("batch", "b-0")).node_name == "sim-node-002"
        # one eviction passes the PDB, the second is blocked, whoever sends it
        first = await a.evict_pod("batch", "a-0")
        second = await b.evict_pod("batch", "b-0")
        assert (first.outcome, second.outcome) == (EvictionOutcome.EVICTED, EvictionOutcome.BLOCKED)
        await a.emit_event({"kind": "Node", "name": "x"}, "Barrier", "a")  # after every write of b
        await b.emit_event({"kind": "Node", "name": "x"}, "Barrier", "b")  # after every write of a
        await asyncio.wait_for(_until(lambda: len(a.state.events) == len(b.state.events) == 3), 10)
        assert _state(a) == _state(b)
        node0 = await a.get_node("sim-node-000")
        assert node0.allocatable["koordinator.sh/batch-cpu"] == 7000
        assert node0.allocatable["koordinator.sh/batch-memory"] == 9 << 30
        seen = []
        while len(seen) < 8:
            seen.append(await asyncio.wait_for(events_b.__anext__(), 5))
        assert ("MODIFIED", "Pod", "a-0") in [(e.type, e.kind, getattr(e.obj, "name", "")) for e in seen]

        # a late replica replays the stream to the same state
        late_bus = Bus(nats_url, service="test-c", namespace=bus_namespace)
        await late_bus.connect(timeout_s=10)
        c = SimCluster(bus=late_bus)
        try:
            await asyncio.wait_for(c.start(), 30)
            assert _state(c) == _state(a)
        finally:
            await c.close()
            await late_bus.close()
        # a bad mutation fails its writer only
        with pytest.raises(MutationError):
            await b.bind_pod("batch", "missing", "sim-node-000")
        await a.delete_pod("batch", "b-0")
        await _until(lambda: b.state.pods.get("batch/b-0") is None)
    finally:
        await a.close()
        await b.close()
        await other.close()


async def test_genesis_published_separately(bus):
    resolved = await SimCluster.publish_genesis(bus, spec(nodes=2))
    s = SimCluster(bus=bus)
    await asyncio.wait_for(s.start(), 30)
    try:
        assert s.spec == resolved and len(await s.list_nodes()) == 2
        # a new genesis rebuilds every replica
        await SimCluster.publish_genesis(bus, spec(nodes=3))
        await asyncio.wait_for(_until(lambda: len(s.state.nodes) == 3), 10)
    finally:
        await s.close()


async def _until(cond, interval: float = 0.02) -> None:
    while not cond():
        await asyncio.sleep(interval)


# --------------------------------------------------------------------------- batch stream


def test_batch_arrivals_follow_the_2017_trace():
    from koordsim.batch import BATCH_NAMESPACE, batch_arrivals

    s = spec(nodes=20, batch_tasks_per_node_hour=4.0)
    trace_cpus = set(traces.alibaba2017_batch_tasks().plan_cpu_milli.tolist()) - {-1} | {500}
    day = batch_arrivals(s, T0, T0 + 86_400_000)
    assert 0.8 * 20 * 4 * 24 <= len(day) <= 1.25 * 20 * 4 * 24  # ~80 tasks per hour for 20 nodes
    assert day == batch_arrivals(s, T0, T0 + 86_400_000)
    assert [p.created_ms for p in day] == sorted(p.created_ms for p in day)
    halves = batch_arrivals(s, T0, T0 + 43_200_000) + batch_arrivals(s, T0 + 43_200_000, T0 + 86_400_000)
    assert [p.name for p in halves] == [p.name for p in day]
    for p in day:
        assert p.namespace == BATCH_NAMESPACE and p.node_name is None and p.phase == "Pending"
        assert p.priority_class is PriorityClass.BATCH and p.qos is QoSClass.BE
        assert p.batch_requests().cpu_milli in trace_cpus  # plan_cpu x 10, or 500m where the trace left it empty
        assert p.batch_requests().memory_bytes >= 64 << 20
    # the trace's arrival span (about 17 h) loops, replayed under new names
    created = traces.alibaba2017_batch_tasks().create_s
    period_ms = (int(created.max() - created.min()) + 1) * 1000
    first = batch_arrivals(s, T0, T0 + period_ms)
    second = batch_arrivals(s, T0 + period_ms, T0 + 2 * period_ms)
    assert len(second) == len(first) and second[0].name.endswith("-1") and first[0].name.endswith("-0")
    # an offset starts simulated time later in the trace: the same tasks, shifted
    shifted = batch_arrivals(spec(nodes=20, batch_tasks_per_node_hour=4.0, batch_trace_offset_s=3600), T0, T0 + period_ms)
    assert {p.name.rsplit("-", 1)[0] for p in shifted} == {p.name.rsplit("-", 1)[0] for p in first}


async def test_run_batch_stream_creates_pending_pods():
    s = SimCluster(spec(nodes=20, batch_stream=True, speed=3600, wall_anchor_ms=None, start_ms=None))
    stop = asyncio.Event()
    task = asyncio.create_task(s.run_batch_stream(stop, poll_s=0.05))
    await asyncio.sleep(0.6)  # ~36 simulated minutes
    stop.set()
    created = await task
    pending = await s.list_pods(namespace="batch-stream")
    assert created == len(pending) > 10
    assert all(p.node_name is None for p in pending)
    assert await SimCluster(spec(nodes=2)).run_batch_stream(stop) == 0  # off by default


async def test_evicted_replica_comes_back_pending_with_the_same_demand():
    s = SimCluster(spec())
    victim = next(p for p in await s.list_pods() if p.controller and p.controller.kind == "ReplicaSet")
    t = s.now_ms()
    usage_before = s.pod_usage(victim, t)
    assert (await s.evict_pod(victim.namespace, victim.name)).outcome is EvictionOutcome.EVICTED
    assert await s.get_pod(victim.namespace, victim.name) is None
    pending = [
        p for p in await s.list_pods(namespace=victim.namespace)
        if p.node_name is None and p.controller and p.controller.name == victim.controller.name
    ]
    assert len(pending) == 1
    new = pending[0]
    assert new.phase == "Pending" and new.name.startswith(victim.controller.name + "-") and new.uid != victim.uid
    assert new.requests() == victim.requests() and new.labels == victim.labels
    target = next(n.name for n in await s.list_nodes() if n.name != victim.node_name)
    await s.bind_pod(new.namespace, new.name, target, new.uid)
    assert s.pod_usage(await s.get_pod(new.namespace, new.name), t) == usage_before
    # the trace source passed to the replacement: the gone pod keeps none
    assert victim.uid not in s.state.usage.pod_sources and new.uid in s.state.usage.pod_sources
    # a finished pod is not replaced
    done = await s.create_pod(batch_pod("done-0"))
    await s.bind_pod("batch", "done-0", target, done.uid)
    await s.set_pod_phase("batch", "done-0", "Succeeded")
    before = len(await s.list_pods())
    await s.delete_pod("batch", "done-0")
    assert len(await s.list_pods()) == before - 1


def test_a_trace_set_with_few_vms_lends_each_to_several_workloads():
    """The sample holds 24 VMs; the 165 online and mid pods of 20 nodes are still 165 workloads,
    as with the full set, so replica counts (and what a descheduler may evict) do not change."""
    s = SimCluster(spec(nodes=20, online_pods_per_node=8, trace_set="sample"))
    apps = [p.labels["app"] for p in s.state.pods.values()]
    assert len(apps) == 165 and len(set(apps)) == len(apps)
    sample_ids = set(traces.bitbrains_vm_ids(traces.sample_source()))
    prod = [a for a in apps if a.startswith("vm-")]
    assert {int(a.split("-")[1]) for a in prod} <= sample_ids
    assert any(a.count("-") == 2 for a in prod)  # vm-<id>-<n>: a VM's later workloads
