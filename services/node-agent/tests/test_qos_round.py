"""One node's QoS driven round by round on simulated time, without the bus and on in-memory
cgroups, as a what-if replay does; and the strategies' freedom from I/O."""

import ast
from pathlib import Path

from koordcommon.model import KubeQoS
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.schemas import NodeSLOSpec
from koordsim.cluster import SimCluster, SimSpec
from node_agent.core.pods import PodInfo
from node_agent.core.reporter import NodeRound
from node_agent.qos import strategies
from node_agent.qos.executor import TokenBucket
from node_agent.qos.model import CgroupWrite, Eviction
from node_agent.qos.node import NodeQoS
from node_agent.qos.round import QoSMemory, plan_round
from node_agent.qos.strategies import cpu_evict
from node_agent.qos.strategies.cpuset import parse_cpuset

NODE = "sim-node-000"
T0 = 1_717_243_200_000


def be_pod(name: str, priority: int, milli: int) -> PodRecord:
    batch = {"koordinator.sh/batch-cpu": milli, "koordinator.sh/batch-memory": 1 << 30}
    return PodRecord(namespace="batch", name=name, uid="", node_name=NODE, priority=priority,
                     labels={"koordinator.sh/qosClass": "BE"}, containers=[ContainerSpec("main", batch, batch)])


def slo() -> NodeSLOSpec:
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(update={
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuEvictBESatisfactionLowerPercent": 40,
        "cpuEvictBESatisfactionUpperPercent": 70, "cpuEvictTimeWindowSeconds": 6})
    return spec


def usage(pods: list[PodInfo]) -> NodeRound:
    """Online pods take 12 cores, each BE pod 1.5 (more than suppress will leave them), system 0.5."""
    online = [p for p in pods if p.namespace != "batch"]
    per_pod = {p.uid: (12000 / len(online), float(1 << 30)) for p in online}
    per_pod |= {p.uid: (1500.0, float(1 << 30)) for p in pods if p.namespace == "batch"}
    return NodeRound(node=(sum(c for c, _ in per_pod.values()) + 500, float(8 << 30)), pods=per_pod)


async def test_rounds_on_simulated_time_suppress_then_evict_after_the_first_cool_down():
    cluster = SimCluster(SimSpec(nodes=1, seed=3, speed=0, start_ms=T0, node_cpu_cores=16, online_pods_per_node=1))
    await cluster.start()
    await cluster.create_pod(be_pod("be-high", 5500, 2000))
    await cluster.create_pod(be_pod("be-low", 5100, 3000))
    node = await cluster.get_node(NODE)
    now = {"ms": T0}
    limiter = TokenBucket(1.0, clock=lambda: now["ms"] / 1000)  # simulated seconds: no sleeping
    nq = NodeQoS.simulated_node(NODE, node.capacity_resources(), T0, cluster=cluster, limiter=limiter)
    nq.slo = slo()
    be_dir = nq.layout.qos_dir(KubeQoS.BEST_EFFORT)

    evictions = []
    for second in range(45):
        now["ms"] = T0 + second * 1000
        pods = [PodInfo.from_record(p) for p in await cluster.list_pods(node_name=NODE)]
        state = nq.state(now["ms"], node.capacity_resources(), node.allocatable_resources(), pods, usage(pods))
        events = await nq.round(state)
        evictions += [e for e in events if e.kind == "evict"]
        if second == 0:  # suppress at once: LS leaves BE nothing, so the floor of 2 CPUs
            assert parse_cpuset(nq.files.read(be_dir, "cpuset.cpus")) == [0, 8]

    # real limit 2000m for 5000m requested: satisfaction 0.4, but no CPU eviction in the first 20 s
    (ev,) = evictions
    assert (ev.ts, ev.target["name"], ev.details["outcome"]) == (T0 + 20_000, "be-low", "evicted")
    assert "release 1499m" in ev.reason
    assert nq.memory.last_evict_ms == {cpu_evict.COOL_DOWN: T0 + 20_000}
    assert {p.name for p in await cluster.list_pods(namespace="batch")} == {"be-high"}


async def test_plan_round_says_what_would_happen_and_changes_nothing():
    cluster = SimCluster(SimSpec(nodes=1, seed=3, speed=0, start_ms=T0, node_cpu_cores=16, online_pods_per_node=1))
    await cluster.start()
    await cluster.create_pod(be_pod("be-low", 5100, 3000))
    node = await cluster.get_node(NODE)
    nq = NodeQoS.simulated_node(NODE, node.capacity_resources(), T0)
    pods = [PodInfo.from_record(p) for p in await cluster.list_pods(node_name=NODE)]
    state = nq.state(T0, node.capacity_resources(), node.allocatable_resources(), pods, usage(pods))
    memory = QoSMemory(started_ms=T0)

    assert plan_round(state, None, memory) == []  # no NodeSLO: nothing to do, but the round is remembered
    assert [s.usage for s in memory.be_history] == [1500]
    plan = plan_round(state, slo(), memory)
    cpusets = {w.value for w in plan if isinstance(w, CgroupWrite) and w.resource == "cpuset.cpus"}
    assert "0,8" in cpusets and not any(isinstance(a, Eviction) for a in plan)
    assert nq.files.read(nq.layout.qos_dir(KubeQoS.BEST_EFFORT), "cpuset.cpus") == "0-15"  # nothing written


FORBIDDEN = ("prometheus_client", "nats", "pathlib", "os", "io", "shutil", "node_agent.collect", "..collect",
             "koordcommon.bus", "node_agent.qos.files", "..files", "..executor", "..topology")


def test_strategies_import_no_io():
    for path in Path(strategies.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = ["." * node.level + (node.module or "")]
            else:
                continue
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in FORBIDDEN), (path.name, name)
        assert "open(" not in path.read_text(), path.name


async def two_be_pods_node():
    """A 16-core simulated node with one online pod and two BE pods, its QoS under slo()."""
    cluster = SimCluster(SimSpec(nodes=1, seed=3, speed=0, start_ms=T0, node_cpu_cores=16, online_pods_per_node=1))
    await cluster.start()
    await cluster.create_pod(be_pod("be-a", 5500, 2000))
    await cluster.create_pod(be_pod("be-b", 5100, 3000))
    node = await cluster.get_node(NODE)
    nq = NodeQoS.simulated_node(NODE, node.capacity_resources(), T0, cluster=cluster)
    nq.slo = slo()
    return cluster, node, nq


async def test_simulated_cgroups_hold_best_effort_pods_to_what_the_round_grants():
    """Suppress leaves BE 2 CPUs (the floor): the two BE pods asking 1.5 cores each run 1 core
    each, and the node's usage loses what they could not run."""
    cluster, node, nq = await two_be_pods_node()
    pods = [PodInfo.from_record(p) for p in await cluster.list_pods(node_name=NODE)]
    r = usage(pods)
    before = r.node[0]
    state = nq.state(T0, node.capacity_resources(), node.allocatable_resources(), pods, r)
    await nq.round(state)
    nq.enforce(state, r)
    be = [r.pods[p.uid][0] for p in pods if p.namespace == "batch"]
    assert be == [1000.0, 1000.0]
    assert r.node[0] == before - 1000  # 3000 asked, 2000 granted
    # within the grant nothing changes
    r2 = NodeRound(node=(1000.0, 0.0), pods={p.uid: (500.0, 0.0) for p in pods if p.namespace == "batch"})
    nq.enforce(state, r2)
    assert r2.node == (1000.0, 0.0) and all(c == 500.0 for c, _ in r2.pods.values())


async def test_a_pod_gone_from_the_node_leaves_no_simulated_cgroup_nor_cached_plan_behind():
    """A long-running sim agent sees thousands of pods come and go: the kubelet would remove a
    gone pod's cgroups, and the plans kept for it go with it."""
    from node_agent.qos.strategies import batch_resources

    cluster, node, nq = await two_be_pods_node()

    async def round_with(pods: list[PodInfo], t_ms: int) -> None:
        await nq.round(nq.state(t_ms, node.capacity_resources(), node.allocatable_resources(), pods, usage(pods)))

    def dirs_of(name: str) -> set[str]:
        pod_dir = nq.layout.pod_dir(by_name[name].uid, by_name[name].kube_qos)
        return {rel for rel, _ in nq.files.values if rel.startswith(pod_dir)}

    pods = [PodInfo.from_record(p) for p in await cluster.list_pods(node_name=NODE)]
    by_name = {p.name: p for p in pods}
    await round_with(pods, T0)
    # the pod dir and its container's, each with cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes
    assert len(dirs_of("be-a")) == 2 and len(dirs_of("be-b")) == 2
    assert {uid for uid, _, _ in batch_resources._WRITES[NODE]} == {by_name["be-a"].uid, by_name["be-b"].uid}
    b_dir = nq.layout.pod_dir(by_name["be-b"].uid, by_name["be-b"].kube_qos)
    others = {k for k in nq.files.values if not k[0].startswith(b_dir)}
    assert len(nq.files.values) - len(others) >= 6  # be-b's pod and container files

    await round_with([p for p in pods if p.name != "be-b"], T0 + 1000)
    assert dirs_of("be-b") == set() and len(dirs_of("be-a")) == 2
    assert set(nq.files.values) == others  # nothing else forgotten, nothing of be-b's left
    assert {uid for uid, _, _ in batch_resources._WRITES[NODE]} == {by_name["be-a"].uid}
