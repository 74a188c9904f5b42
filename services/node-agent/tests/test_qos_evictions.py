"""The executor's eviction path, with the simulated cluster as the eviction API: rate limit,
cool-down clocks by strategy kind, dry-run, one eviction per pod, pending pods left alone."""

import pytest
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from koordsim.cluster import PDB_KIND, SimCluster, SimSpec
from node_agent.qos.executor import Executor, TokenBucket
from node_agent.qos.files import MemoryCgroupFiles
from node_agent.qos.model import CgroupWrite, Eviction
from node_agent.qos.round import QoSMemory
from node_agent.qos.strategies import cpu_evict, memory_evict

NODE = "sim-node-000"
START_MS = 1_717_243_200_000  # speed 0: simulated time stands still
NOW = START_MS + 60_000
EARLIER = NOW - 1_000
CPU, MEM = cpu_evict, memory_evict


class Clock:
    """Seconds for the token bucket, moved by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def batch_cluster(*names: str) -> tuple[SimCluster, dict[str, PodRecord]]:
    cluster = SimCluster(SimSpec(nodes=1, seed=3, speed=0, start_ms=START_MS, online_pods_per_node=1))
    await cluster.start()
    batch = {"koordinator.sh/batch-cpu": 1000, "koordinator.sh/batch-memory": 1 << 30}
    pods = {}
    for name in names:
        pods[name] = await cluster.create_pod(PodRecord(
            namespace="batch", name=name, uid="", node_name=NODE, labels={"koordinator.sh/qosClass": "BE", "app": "job"},
            containers=[ContainerSpec("main", batch, batch)]))
    return cluster, pods


def eviction(pod: PodRecord, strategy) -> Eviction:
    return Eviction(pod.uid, pod.namespace, pod.name, strategy.NAME, strategy.COOL_DOWN, f"{strategy.NAME} test",
                    Resources(1000, 0))


async def left(cluster: SimCluster) -> set[str]:
    return {p.name for p in await cluster.list_pods(namespace="batch")}


@pytest.mark.parametrize(
    "plan,pending,dry_run,tokens,events,clocks,remaining",
    [
        # cpu eviction restarts the cpu clock only
        ([("a", CPU)], (), False, 9, [("a", "cpu_evict", "evicted")], {CPU.COOL_DOWN}, {"b"}),
        # memory eviction restarts the memory clock only
        ([("a", MEM)], (), False, 9, [("a", "memory_evict", "evicted")], {MEM.COOL_DOWN}, {"b"}),
        ([("a", CPU), ("b", MEM)], (), False, 9,
         [("a", "cpu_evict", "evicted"), ("b", "memory_evict", "evicted")], {CPU.COOL_DOWN, MEM.COOL_DOWN}, set()),
        # a pod two strategies picked: evicted once, by the first, whose clock alone restarts
        ([("a", CPU), ("a", MEM)], (), False, 9, [("a", "cpu_evict", "evicted")], {CPU.COOL_DOWN}, {"b"}),
        # a pod whose eviction is pending is not asked again
        ([("a", CPU), ("b", CPU)], ("a",), False, 9, [("b", "cpu_evict", "evicted")], {CPU.COOL_DOWN}, {"a"}),
        ([("a", CPU)], ("a",), False, 9, [], set(), {"a", "b"}),
        # one token: the second eviction waits (no event, not pending, no clock of its own)
        ([("a", MEM), ("b", CPU)], (), False, 1, [("a", "memory_evict", "evicted")], {MEM.COOL_DOWN}, {"b"}),
        ([("a", CPU)], (), False, 0, [], set(), {"a", "b"}),
        # dry-run: the event and the bookkeeping, but the pod stays
        ([("a", CPU), ("b", MEM)], (), True, 9,
         [("a", "cpu_evict", "dry_run"), ("b", "memory_evict", "dry_run")], {CPU.COOL_DOWN, MEM.COOL_DOWN}, {"a", "b"}),
    ],
)
async def test_eviction_path(plan, pending, dry_run, tokens, events, clocks, remaining):
    cluster, pods = await batch_cluster("a", "b")
    limiter = TokenBucket(1.0, burst=max(tokens, 1), clock=Clock())
    limiter.tokens = float(tokens)
    memory = QoSMemory(pending={pods[n].uid: EARLIER for n in pending})
    ex = Executor(MemoryCgroupFiles(), NODE, dry_run=dry_run, cluster=cluster, limiter=limiter)

    got = await ex.evict([eviction(pods[n], s) for n, s in plan], memory, NOW)

    assert [(e.target["name"], e.details["strategy"], e.details["outcome"]) for e in got] == events
    assert all(e.kind == "evict" and e.node == NODE and e.ts == NOW and e.dry_run == dry_run for e in got)
    assert memory.last_evict_ms == {c: NOW for c in clocks}
    assert set(memory.pending) == {pods[n].uid for n in pending} | {e.target["uid"] for e in got}
    assert await left(cluster) == remaining


async def test_a_refused_eviction_is_reported_and_starts_nothing():
    cluster, pods = await batch_cluster("a")
    await cluster.apply_custom(PDB_KIND, {"metadata": {"name": "job", "namespace": "batch"},
                                          "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "job"}}}})
    memory = QoSMemory()
    plan = [eviction(pods["a"], CPU), eviction(pods["a"], MEM)]  # refused once, not asked twice in a round
    (e,) = await Executor(MemoryCgroupFiles(), NODE, cluster=cluster).evict(plan, memory, NOW)
    assert e.details["outcome"] == "blocked" and "disruption budget" in e.details["message"]
    assert memory.pending == {} and memory.last_evict_ms == {}
    assert await left(cluster) == {"a"}


async def test_the_rate_follows_the_clock_it_is_given():
    cluster, pods = await batch_cluster("a", "b", "c")
    clock = Clock()
    ex = Executor(MemoryCgroupFiles(), NODE, cluster=cluster, limiter=TokenBucket(0.5, burst=1, clock=clock))
    memory = QoSMemory()
    plan = [eviction(pods[n], MEM) for n in ("a", "b", "c")]
    assert [e.target["name"] for e in await ex.evict(plan, memory, NOW)] == ["a"]
    clock.t = 1.0  # half a token
    assert await ex.evict(plan, memory, NOW + 1_000) == []
    clock.t = 2.0
    assert [e.target["name"] for e in await ex.evict(plan, memory, NOW + 2_000)] == ["b"]
    assert memory.last_evict_ms == {MEM.COOL_DOWN: NOW + 2_000}
    assert await left(cluster) == {"c"}


async def test_apply_writes_the_cgroups_before_evicting():
    cluster, pods = await batch_cluster("a")
    files = MemoryCgroupFiles()
    plan = [eviction(pods["a"], CPU), CgroupWrite("kubepods/besteffort", "cpu.cfs_quota_us", 2000, "cpu_suppress", "qos")]
    got = await Executor(files, NODE, cluster=cluster).apply(plan, QoSMemory(), NOW)
    assert [(e.kind, e.action) for e in got] == [("qos", "cpu_suppress"), ("evict", "evict")]
    assert files.read("kubepods/besteffort", "cpu.cfs_quota_us") == "2000"
    assert await left(cluster) == set()
