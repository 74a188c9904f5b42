"""NodeNUMAResource through the extender's state and verbs: which nodes an LSE / LSR pod may go
to, where it scores best, and the allocation the bind verb records on the pod."""

import json

import numpy as np
from extender_helpers import T0, Gi, guaranteed, metric, node
from koordcommon.cpus import ANNOTATION_RESOURCE_SPEC, ANNOTATION_RESOURCE_STATUS, Topology
from koordcommon.kube_codec import pod_to_k8s
from koordcommon.schemas import CPUInfo, NodeTopology, PodCPUAlloc
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from scheduler_extender.core import wire
from scheduler_extender.core.explain import Decisions, explain_pod
from scheduler_extender.core.extender import bind_request, filter_request, prioritize_request
from scheduler_extender.core.plugins.numa import NAME
from scheduler_extender.core.state import ClusterState, ExtenderConfig

LSR = {"koordinator.sh/qosClass": "LSR"}
LSE = {"koordinator.sh/qosClass": "LSE"}


def report(name, shape, allocs=(), ts=T0):
    topo = Topology.generate(*shape)
    return NodeTopology(node=name, ts=ts, cpus=[CPUInfo(id=c.id, core=c.core, socket=c.socket, node=c.node)
                                                for c in topo.cpus], pod_cpu_allocs=list(allocs))  # fmt: skip


def state(*nodes):
    # without the load-aware plugin: these small nodes' pods would fill their cpu threshold
    st = ClusterState(ExtenderConfig(plugins=("NodeKnown", NAME)), clock=lambda: T0)
    for name, shape, labels, allocs in nodes:
        n = node(name, cpu=shape[0] * shape[1] * shape[2] * shape[3] * 1000)
        n.labels.update(labels)
        st.apply_node(n)
        st.apply_metric(metric(name, 1000, Gi, alloc=(n.allocatable["cpu"], 64 * Gi)))
        if shape:
            st.apply_topology(report(name, shape, allocs))
    return st


def bound(name, cpus, cpuset, labels=LSR, node_name="a"):
    status = json.dumps({"cpuset": cpuset})
    return guaranteed(name, cpus * 1000, Gi, node=node_name, labels=labels,
                      annotations={ANNOTATION_RESOURCE_STATUS: status})  # fmt: skip


def judge(st, p, names):
    args = wire.decode_extender_args(wire.encode_extender_args(pod_to_k8s(p), None, names))
    out = wire.decode_filter_result(filter_request(st, args).body)
    return out.node_names, {**(out.failed_nodes or {}), **(out.failed_and_unresolvable or {})}


def test_filter_reasons_per_node():
    st = state(("a", (1, 1, 4, 2), {}, ()),  # 8 CPUs
               ("b", (1, 1, 4, 2), {}, [PodCPUAlloc(uid="k", cpuset="0-5", managedByKubelet=True)]),
               ("c", (1, 1, 4, 2), {"node.koordinator.sh/cpu-bind-policy": "SpreadByPCPUs"}, ()))  # fmt: skip
    st.apply_node(node("d"))  # no topology reported
    st.apply_metric(metric("d", 1000, Gi))
    want = guaranteed("w", 4000, Gi, labels=LSR)
    passed, failed = judge(st, want, ["a", "b", "c", "d"])
    assert passed == ["a", "c"]
    assert failed == {"b": "node(s) not enough cpus available to satisfy request",
                      "d": "node(s) invalid CPU Topology"}  # fmt: skip
    # a pod requiring FullPCPUs conflicts with a node requiring SpreadByPCPUs
    strict = guaranteed("s", 4000, Gi, labels=LSR,
                        annotations={ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy": "FullPCPUs"}'})  # fmt: skip
    assert judge(st, strict, ["c"])[1] == {"c": "node(s) cpu bind policy conflicts with pod's required cpu bind policy"}
    # fractional CPUs cannot be bound anywhere; LS pods and BE pods are not this plugin's
    assert judge(st, guaranteed("f", 1500, Gi, labels=LSR), ["a"])[1] == {"a": "the requested CPUs must be integer"}
    assert judge(st, guaranteed("ls", 4000, Gi, labels={"koordinator.sh/qosClass": "LS"}), ["d"])[0] == ["d"]
    spec = '{"preferredCPUBindPolicy": "ConstrainedBurst"}'
    assert judge(st, guaranteed("cb", 2000, Gi, labels=LSR, annotations={ANNOTATION_RESOURCE_SPEC: spec}), ["a"])[1] == {
        "a": "preferredCPUBindPolicy ConstrainedBurst is not supported"}


def test_fragmented_node_fails_a_required_full_cores_pod_that_fits_by_count():
    st = state(("a", (1, 1, 4, 2), {}, ()))
    for name, cpuset in (("x", "1"), ("y", "3"), ("z", "5")):  # one thread of each of three cores taken
        st.apply_pod(bound(name, 1, cpuset))
    strict = guaranteed("s", 2000, Gi, labels=LSE,
                        annotations={ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy": "FullPCPUs"}'})  # fmt: skip
    assert judge(st, strict, ["a"])[0] == ["a"]  # core 3 (6-7) is whole
    st.apply_pod(bound("v", 1, "7"))
    assert judge(st, strict, ["a"])[1] == {
        "a": "node(s) insufficient CPUs to satisfy required cpu bind policy FullPCPUs"}
    # preferred FullPCPUs still fits on the four loose threads
    assert judge(st, guaranteed("p", 2000, Gi, labels=LSE), ["a"])[0] == ["a"]


def test_score_prefers_the_ideal_placement():
    st = state(("whole", (1, 1, 4, 2), {}, ()), ("broken", (1, 1, 4, 2), {}, ()))
    for name, cpuset in (("x", "0"), ("y", "2"), ("z", "4"), ("v", "6")):  # no whole core left on "broken"
        st.apply_pod(bound(name, 1, cpuset, node_name="broken"))
    p = guaranteed("w", 2000, Gi, labels=LSR)
    info = st.pod_info(p)
    rows = st.rows_of(["whole", "broken"])
    plugin = st.plugin(NAME)
    # whole: policy met 25 + one NUMA node 25 + LeastAllocated (8 - 2 free of 8 = 75) / 2 = 87
    # broken: policy not met 0 + 25 + (4 - 2 free of 8 = 25) / 2 = 37
    assert plugin.score(info, rows, T0).tolist() == [87, 37]
    args = wire.ExtenderArgs(pod_to_k8s(p), None, ["whole", "broken"])
    scores = dict(wire.decode_host_priority_list(prioritize_request(st, args).body))
    assert scores["whole"] > scores["broken"]


async def test_bind_records_the_allocation_and_the_next_pod_gets_other_cores():
    sim = SimCluster(SimSpec(nodes=1, seed=3, speed=0, start_ms=T0, online_pods_per_node=0))
    await sim.start()
    try:
        (n,) = await sim.list_nodes()
        st = ClusterState(clock=lambda: T0)
        st.apply_node(n)
        st.apply_metric(metric(n.name, 1000, Gi))
        st.apply_topology(report(n.name, (2, 2, 8, 2)))
        cpusets = []
        for i in range(3):
            record = await sim.create_pod(guaranteed(f"lsr{i}", 6000, Gi, labels=LSR, uid=f"u{i}"))
            judge(st, record, [n.name])  # the verbs learn the pod
            reply = await bind_request(st, sim, wire.ExtenderBindingArgs(record.name, "default", record.uid, n.name))
            assert reply == b'{"Error":""}'
            placed = await sim.get_pod("default", record.name)
            assert placed.node_name == n.name
            status = json.loads(placed.annotations[ANNOTATION_RESOURCE_STATUS])
            cpusets.append(status["cpuset"])
        # LeastAllocated spreads the pods over the NUMA nodes, each on three whole cores of one
        assert cpusets == ["0-5", "32-37", "16-21"]
        assert json.loads((await sim.get_pod("default", "lsr1")).annotations[ANNOTATION_RESOURCE_STATUS]) == {
            "cpuset": "32-37", "numaNodeResources": [{"node": 2, "resources": {"cpu": "6"}}]}
        # what the watch then shows counts the same CPUs as taken
        for p in await sim.list_pods():
            st.apply_pod(p)
        st.flush()
        free = st.plugin(NAME).nodes[st.rows[n.name]].cpus.allocatable()
        assert len(free) == 64 - 18 and not free & {0, 5, 32, 37, 16, 21}
    finally:
        await sim.close()


def test_explain_names_the_allocation_and_its_score():
    st = state(("a", (1, 1, 4, 2), {"node.koordinator.sh/numa-allocate-strategy": "MostAllocated"}, ()))
    st.apply_pod(bound("x", 2, "0-1"))
    p = guaranteed("w", 2000, Gi, labels=LSR)
    judge(st, p, ["a"])
    decisions = Decisions()
    info = st.pod_info(p)
    decisions.record("filter", T0, info, st.rows_of(["a"]), ["a"])
    out = explain_pod(st, decisions, "default/w")
    numbers = next(e["numbers"] for e in out["nodes"][0]["plugins"] if e["plugin"] == NAME)
    assert numbers["cpuset"] == "2-3" and numbers["numa_allocate_strategy"] == "MostAllocated"
    assert numbers["node"]["free"] == "2-7" and numbers["node"]["bound"] == "0-1"
    assert numbers["score"] == {"bind_policy": 25, "numa": 25, "strategy": 25, "total": 75}
    assert np.array_equal(st.rows_of(["a"]), np.array([0]))
