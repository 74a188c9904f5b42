"""Real mode end to end on fake cgroup trees: two collections, a NodeSLO, the files the strategies wrote."""

import pytest
from koordcommon.records import ContainerSpec, NodeRecord, PodRecord
from koordcommon.schemas import NodeSLO, NodeSLOSpec
from node_agent.qos.manager import QoSManager
from node_agent.qos.strategies.cpuset import format_cpuset
from node_agent.real_mode import RealAgent
from node_agent.settings import AgentSettings

S = 1_000_000_000
GI = 1 << 30


class FakeCluster:
    def __init__(self, node, pods):
        self.node, self.pods, self.evicted = node, pods, []

    async def get_node(self, name):
        return self.node

    async def list_pods(self, node_name=None, namespace=None):
        return self.pods

    async def evict_pod(self, namespace, name, reason="", dry_run=False, grace_period_s=None):
        from koordcommon.cluster.port import EvictionOutcome, EvictionResult

        self.evicted.append(name)
        return EvictionResult(EvictionOutcome.EVICTED)


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
async def test_cfs_quota_suppress_and_batch_resources_on_a_fake_tree(fake_tree, driver):
    tree = fake_tree
    node = NodeRecord(name="n1", capacity={"cpu": 16000, "memory": 64 * GI},
                      allocatable={"cpu": 15000, "memory": 60 * GI})
    ls = PodRecord(namespace="on", name="web", uid="11111111-1111-1111-1111-111111111111", node_name="n1",
                   phase="Running", containers=[ContainerSpec("app", {"cpu": 4000, "memory": GI}, {"cpu": 8000})],
                   container_ids={"app": "containerd://aaaa"})
    batch = {"koordinator.sh/batch-cpu": 2000, "koordinator.sh/batch-memory": 2 * GI}
    be = PodRecord(namespace="b", name="job", uid="22222222-2222-2222-2222-222222222222", node_name="n1",
                   phase="Running", labels={"koordinator.sh/qosClass": "BE"},
                   containers=[ContainerSpec("main", batch, batch)], container_ids={"main": "containerd://bbbb"})
    kp = "kubepods.slice" if driver == "systemd" else "kubepods"
    tree.dir(kp, "cpu")
    settings = AgentSettings(mode="real", node_name="n1", cgroup_root=str(tree.root), proc_root=str(tree.proc))
    cluster = FakeCluster(node, [ls, be])
    agent = RealAgent(settings, publish=None, cluster=cluster)
    assert (agent.layout.version, agent.layout.driver) == (tree.version, driver)
    await agent.refresh()
    layout = agent.layout
    web, job = agent.pods
    dirs = {}
    for p in (web, job):
        rel = layout.pod_dir(p.uid, p.kube_qos)
        dirs[p.name] = [rel] + [layout.container_dir(rel, cid) for _, cid in p.container_ids]
    be_dir = layout.qos_dir("BestEffort")

    def seed_cpu_files():
        for rel in dirs["web"]:  # every cgroup has its cpuset (the cpuset allocator sets the share pool)
            tree.write(rel, "cpuset", "cpuset.cpus", "\n")
        for rel in [be_dir, *dirs["job"]]:
            tree.write(rel, "cpuset", "cpuset.cpus", "\n")
            if tree.version == "v2":
                tree.write(rel, "cpu", "cpu.max", "max 100000\n")
                tree.write(rel, "cpu", "cpu.weight", "100\n")
                tree.write(rel, "memory", "memory.max", "max\n")
            else:
                tree.write(rel, "cpu", "cpu.cfs_quota_us", "-1\n")
                tree.write(rel, "cpu", "cpu.shares", "1024\n")
                tree.write(rel, "memory", "memory.limit_in_bytes", "9223372036854771712\n")

    def read(n, web_ns, job_ns):
        tree.set_proc(user=1000 + n * 1100, nice=0, system=100, idle=5000, iowait=0, irq=0, softirq=0,
                      mem_total_kb=64 * 1024 * 1024, mem_avail_kb=50 * 1024 * 1024)
        for rel in dirs["web"]:
            tree.set_cgroup(rel, cpu_ns=web_ns, active_anon=GI)
        for rel in dirs["job"]:
            tree.set_cgroup(rel, cpu_ns=job_ns, active_anon=GI // 2)

    read(0, 0, 0)
    seed_cpu_files()
    manager = QoSManager(agent, None, settings, cluster, simulated=False)
    agent.on_round.append(manager.on_round)
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(
        update={"enable": True, "cpuSuppressPolicy": "cfsQuota"})
    manager.set_slo(NodeSLO(node="n1", spec=spec))
    agent.collector.proc.ticks_per_s = 100

    agent.collector.collect(agent.pods, 0)  # baseline
    read(1, 5 * S, 1 * S)  # +1 s: web 5 cores, job 1 core; node 11 cores
    r = agent.collector.collect(agent.pods, S)
    assert r.node[0] == 11000.0 and r.pods[web.uid][0] == 5000.0
    await manager.on_round(1_000, {"n1": r})

    def text(rel, v1, v2):
        sub = v1.split(".")[0]
        path = tree.root / rel / v2 if tree.version == "v2" else tree.root / sub / rel / v1
        return path.read_text().strip()

    # 16000 x 65 % - LS 5000 - max(system 11000 - 6000, reserved 1000) = 400m -> 40000 us
    assert text(be_dir, "cpu.cfs_quota_us", "cpu.max") == ("40000" if tree.version == "v1" else "40000 100000")
    # batch resources: quotas stay unlimited under cfsQuota suppress; shares and memory from batch-*
    pod_dir, cont_dir = dirs["job"]
    assert text(pod_dir, "cpu.shares", "cpu.weight") == ("2048" if tree.version == "v1" else "79")
    assert text(cont_dir, "memory.limit_in_bytes", "memory.max") == str(2 * GI)
    assert text(pod_dir, "cpu.cfs_quota_us", "cpu.max") == ("-1" if tree.version == "v1" else "max 100000")
    # cpu burst policy none touches nothing, so no file was reported missing; the BE cpuset is the full one
    assert manager.nodes["n1"].executor.unsupported == set()
    full = [p.cpu for p in manager.nodes["n1"].processors]
    assert text(be_dir, "cpuset.cpus", "cpuset.cpus") == format_cpuset(full)
    # the unlabelled Burstable pod runs in the share pool: every CPU, none being bound or reserved
    assert text(dirs["web"][1], "cpuset.cpus", "cpuset.cpus") == format_cpuset(full)


async def test_node_facts_host_apps_and_kubelet_pins_reach_qos_and_the_node_metric(fake_tree, tmp_path):
    """The node object's annotations and batch allocatable, the kubelet's checkpoint and the NodeSLO's
    host applications on a real (fake) node: what suppress leaves BE, what the NodeMetric reports."""
    from node_agent.qos.strategies.cpuset import synthetic_topology

    tree = fake_tree
    node = NodeRecord(name="n1", capacity={"cpu": 16000, "memory": 64 * GI},
                      allocatable={"cpu": 16000, "memory": 64 * GI, "kubernetes.io/batch-cpu": 6000},
                      annotations={"node.koordinator.sh/system-qos-resource": '{"cpuset": "0,8"}'})
    pinned = PodRecord(namespace="on", name="pinned", uid="33333333-3333-3333-3333-333333333333", node_name="n1",
                       phase="Running", containers=[ContainerSpec("app", {"cpu": 2000, "memory": GI},
                                                                  {"cpu": 2000, "memory": GI})],
                       container_ids={"app": "containerd://cccc"})
    batch = {"koordinator.sh/batch-cpu": 2000, "koordinator.sh/batch-memory": 2 * GI}
    be = PodRecord(namespace="b", name="job", uid="22222222-2222-2222-2222-222222222222", node_name="n1",
                   phase="Running", labels={"koordinator.sh/qosClass": "BE"},
                   containers=[ContainerSpec("main", batch, batch)], container_ids={"main": "containerd://bbbb"})
    checkpoint = tmp_path / "cpu_manager_state"
    checkpoint.write_text('{"policyName": "static", "defaultCpuSet": "0,3-15", "entries": {"'
                          + pinned.uid + '": {"app": "1,9"}}, "checksum": 1}')
    tree.dir("kubepods", "cpu")
    settings = AgentSettings(mode="real", node_name="n1", cgroup_root=str(tree.root), proc_root=str(tree.proc),
                             kubelet_cpu_manager_state=str(checkpoint))
    cluster = FakeCluster(node, [pinned, be])
    agent = RealAgent(settings, publish=None, cluster=cluster)
    await agent.refresh()
    layout = agent.layout
    by_name = {p.name: p for p in agent.pods}
    dirs = {}
    for p in agent.pods:
        rel = layout.pod_dir(p.uid, p.kube_qos)
        dirs[p.name] = [rel] + [layout.container_dir(rel, cid) for _, cid in p.container_ids]
    be_dir = layout.qos_dir("BestEffort")
    for rel in [be_dir, *dirs["job"]]:
        tree.write(rel, "cpuset", "cpuset.cpus", "0-15\n")
    app_dir = "host-latency-sensitive/nginx"

    def read(n, pinned_ns, job_ns, app_ns):
        tree.set_proc(user=1000 + n * 1100, nice=0, system=100, idle=5000, iowait=0, irq=0, softirq=0,
                      mem_total_kb=64 * 1024 * 1024, mem_avail_kb=50 * 1024 * 1024)
        for rel in dirs["pinned"]:
            tree.set_cgroup(rel, cpu_ns=pinned_ns, active_anon=GI)
        for rel in dirs["job"]:
            tree.set_cgroup(rel, cpu_ns=job_ns, active_anon=GI // 2)
        tree.set_cgroup(app_dir, cpu_ns=app_ns, active_anon=GI // 4)

    read(0, 0, 0, 0)
    manager = QoSManager(agent, None, settings, cluster, simulated=False)
    manager._topology = synthetic_topology(16)  # the machine running the test may have 2 CPUs
    agent.on_round.append(manager.on_round)
    events = []
    manager.on_events.append(lambda t, evs: events.extend(evs))
    spec = NodeSLOSpec.model_validate({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65},
        "hostApplications": [{"name": "nginx", "qos": "LS", "priority": "koord-prod"}],
        "systemStrategy": {"minFreeKbytesFactor": 100},
    })
    manager.set_slo(NodeSLO(node="n1", spec=spec))
    assert agent.host_apps == [("nginx", app_dir)]
    agent.collector.proc.ticks_per_s = 100

    agent.collect(0, 0)  # baseline
    read(1, 2 * S, 1 * S, 3 * S)  # +1 s: pinned pod 2 cores, job 1, nginx 3; node 11 cores
    r = agent.collect(1_000, S)
    assert r.host_apps == {"nginx": (3000.0, float(GI // 4))}
    await manager.on_round(1_000, {"n1": r})

    state = manager.nodes["n1"].state(1_000, agent.reporter.nodes["n1"].capacity,
                                      agent.reporter.nodes["n1"].allocatable, agent.pods, r, node)
    assert state.tier_allocatable == {"batch-cpu": 6000}
    assert (state.system_qos_cpus, state.kubelet_pinned_cpus, state.kubelet_cpu_policy) == ({0, 8}, {1, 9}, "static")
    # 16000 x 65 % - pinned 2000 - nginx 3000 - system max(11000 - 3000 - 3000, 0) = 400m -> the 2-CPU floor,
    # from neither the SYSTEM-QoS CPUs (0, 8) nor the kubelet's (1, 9); containers only, under the static policy
    cont = dirs["job"][1]

    def cpus(rel):
        path = tree.root / rel / "cpuset.cpus" if tree.version == "v2" else tree.root / "cpuset" / rel / "cpuset.cpus"
        return path.read_text().strip()

    assert cpus(cont) == "2,10"
    assert cpus(be_dir) == cpus(dirs["job"][0]) == "2-7,10-15"
    # the NodeMetric reports the host application; the system usage leaves it out
    metric = agent.reporter.nodes["n1"].node_metric(1_000, 300, (300,), 60)
    (h,) = metric.host_applications
    assert (h.name, h.priority_class, h.qos, h.usage.cpu_milli) == ("nginx", "koord-prod", "LS", 3000)
    assert metric.system_usage.cpu_milli == 11000 - 2000 - 1000 - 3000
    assert by_name["job"].qos == "BE"
    # the setting the agent does not honour was said once, as a qos event of the first round
    said = [(s, e.reason) for s, e in events if e.action == "not_supported"]
    what = "systemStrategy.minFreeKbytesFactor (a node-wide kernel setting) is not supported"
    assert said == [("koord.events.qos.n1", what)]
    manager.set_slo(NodeSLO(node="n1", spec=spec))  # the same NodeSLO again: nothing new to say
    events.clear()
    await manager.on_round(2_000, {"n1": r})
    assert not [e for _, e in events if e.action == "not_supported"]
