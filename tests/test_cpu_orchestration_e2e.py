"""Fine-grained CPU orchestration end to end on the simulated cluster: the node agent reports its
node's CPU topology, kube-scheduler (koordsim's ExtenderScheduler) places LSE, LSR, LS and BE pods
through the extender, whose bind verb records each LSE / LSR pod's CPUs on it, and the node agent
writes the cpusets into the node's cgroups (in memory, as a simulated node has them).

Koordinator's rules checked: LSE and LSR pods get whole physical cores (FullPCPUs); LS pods run
on the share pool, which holds neither; BE pods never get an LSE pod's CPUs (LSR CPUs are shared
with BE only, the BE pool being every CPU but LSE ones)."""

import json

from koordcommon import cpus as kc
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.schemas import NodeSLO, NodeSLOSpec
from koordsim.cluster import SimCluster, SimSpec
from koordsim.scheduler import ExtenderScheduler
from node_agent.qos.manager import QoSManager
from node_agent.settings import AgentSettings
from node_agent.sim_mode import SimAgent
from node_agent.topology_report import TopologyPublisher, simulated_topology
from scheduler_extender import api
from scheduler_extender.core import wire
from scheduler_extender.core.extender import bind_request
from scheduler_extender.core.state import ClusterState

NOON = 1_764_590_400_000
GI = 1 << 30
BATCH = {"koordinator.sh/batch-cpu": 1000, "koordinator.sh/batch-memory": GI}


def pod(name, qos, cpu=0, limit=None, extra=None, priority=None, ns="default"):
    req = {"cpu": cpu, "memory": GI} if cpu else {}
    req.update(extra or {})
    lim = dict(req) if limit is None else {**req, "cpu": limit}
    return PodRecord(namespace=ns, name=name, uid="", priority=priority, labels={"koordinator.sh/qosClass": qos},
                     containers=[ContainerSpec("main", req, lim)])


async def test_lse_and_lsr_get_whole_cores_ls_and_be_stay_off_them():
    cluster = SimCluster(SimSpec(nodes=1, seed=5, node_cpu_cores=16, online_pods_per_node=0, speed=0, start_ms=NOON))
    await cluster.start()
    (node,) = await cluster.list_nodes()
    await cluster.patch_node_status(node.name, {"koordinator.sh/batch-cpu": 8000, "koordinator.sh/batch-memory": 16 * GI})

    # the node agent: its rounds run QoS and report the node's CPUs
    settings = AgentSettings(mode="sim")
    sent = []

    async def publish(items):
        sent.extend(msg for _, msg in items)

    agent = SimAgent(cluster, settings, publish)
    manager = QoSManager(agent, None, settings, cluster, simulated=True)
    agent.on_round.append(manager.on_round)
    agent.on_round.append(TopologyPublisher(agent, publish, simulated_topology, check_s=0).on_round)
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(update={"enable": True})
    manager.set_slo(NodeSLO(node=node.name, spec=spec))
    await agent.refresh()
    t = NOON
    await agent.step(t)
    (report,) = [m for m in sent if m.SCHEMA == "NodeTopology"]
    assert len(report.cpus) == 16 and not report.pod_cpu_allocs

    # the extender, fed the cluster and the report, reached in process as kube-scheduler reaches it
    state = ClusterState(clock=cluster.now_ms)
    state.apply_many(nodes=await cluster.list_nodes(), pods=await cluster.list_pods())
    state.apply_topology(report)
    front = api.create_app(state)

    async def transport(verb, body):
        if verb == "bind":
            return 200, await bind_request(state, cluster, wire.decode_binding_args(body))
        return front.routes[f"/{verb}"](body)

    scheduler = ExtenderScheduler(cluster, "", transport=transport, bind_verb="bind")
    for p in (pod("db", "LSR", 4000), pod("cache", "LSE", 2000), pod("web", "LS", 2000, limit=4000),
              pod("job-a", "BE", extra=BATCH, priority=5000, ns="batch"),
              pod("job-b", "BE", extra=BATCH, priority=5000, ns="batch")):  # fmt: skip
        await cluster.create_pod(p)
    results = await scheduler.schedule_pending()
    assert {r.name: r.node for r in results} == {n: node.name for n in ("db", "cache", "web", "job-a", "job-b")}

    # the allocations recorded on the pods: whole cores (the simulated node pairs CPU i with i + 8)
    topo = kc.Topology(tuple(kc.CPU(c.id, c.core, c.socket, c.node) for c in report.cpus))
    pods = {p.name: p for p in await cluster.list_pods()}
    bound = {}
    for name, cpus in (("db", 4), ("cache", 2)):
        status = json.loads(pods[name].annotations[kc.ANNOTATION_RESOURCE_STATUS])
        got = kc.parse_cpuset(status["cpuset"])
        assert len(got) == cpus and all(set(topo.cores[topo.by_id[c].core]) <= set(got) for c in got), (name, got)
        bound[name] = set(got)
    assert not bound["db"] & bound["cache"]
    assert "resource-status" not in json.dumps(pods["web"].annotations)

    # the agent's next round writes them into the node's cgroups, and reports the pods' CPUs
    sent.clear()
    await agent.refresh()
    t += 1000
    await agent.step(t)
    nq = manager.nodes[node.name]

    def container_cpus(name):
        p = pods[name]
        dirs = nq.pod_dirs(next(i for i in agent.reporter.nodes[node.name].pods.values() if i.uid == p.uid))
        return set(kc.parse_cpuset(nq.files.read(dirs[1]["main"], "cpuset.cpus")))

    assert container_cpus("db") == bound["db"] and container_cpus("cache") == bound["cache"]
    share = set(range(16)) - bound["db"] - bound["cache"]
    assert container_cpus("web") == share  # LS: the share pool, neither LSR nor LSE CPUs
    be_dir = nq.layout.qos_dir("BestEffort")
    be_cpus = set(kc.parse_cpuset(nq.files.read(be_dir, "cpuset.cpus")))
    assert be_cpus and not be_cpus & bound["cache"]  # BE never on the LSE pod's cores
    for name in ("job-a", "job-b"):
        assert container_cpus(name) <= be_cpus and not container_cpus(name) & bound["cache"]
    (again,) = [m for m in sent if m.SCHEMA == "NodeTopology"]
    assert {a.name: a.cpuset for a in again.pod_cpu_allocs} == {
        "db": kc.format_cpuset(bound["db"]), "cache": kc.format_cpuset(bound["cache"])}
    be_pool = {c for p in again.be_cpu_shared_pools for c in kc.parse_cpuset(p.cpuset)}
    assert be_pool == set(range(16)) - bound["cache"]  # LSR CPUs stay shareable with BE, LSE ones never

    # a second LSR pod lands on other whole cores: the extender counts what it bound
    await cluster.create_pod(pod("db2", "LSR", 4000))
    (r,) = await scheduler.schedule_pending()
    assert r.node == node.name
    db2 = set(kc.parse_cpuset(json.loads((await cluster.get_pod("default", "db2")).annotations[
        kc.ANNOTATION_RESOURCE_STATUS])["cpuset"]))
    assert len(db2) == 4 and not db2 & (bound["db"] | bound["cache"])
    await cluster.close()
