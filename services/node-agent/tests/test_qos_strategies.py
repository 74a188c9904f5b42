import json
from pathlib import Path

import pytest
from koordcommon.model import KubeQoS
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeSLOSpec
from node_agent.collect.cgroups import CgroupLayout
from node_agent.core.pods import PodInfo
from node_agent.qos.files import MemoryCgroupFiles
from node_agent.qos.model import MAX_INT64, BESample, PodState, Processor, QoSState
from node_agent.qos.strategies import (
    batch_resources,
    cpu_burst,
    cpu_evict,
    cpu_suppress,
    group_identity,
    memory_evict,
    memory_qos,
)
from node_agent.qos.strategies.cpuset import format_cpuset, parse_cpuset, pick_cpus, synthetic_topology

GI = 1 << 30
LAYOUT = CgroupLayout(Path("/sim"), "v2", "cgroupfs")


def info(name, *, qos=None, priority=None, cpu_req=0, cpu_lim=0, mem_req=0, mem_lim=0, batch=None, annotations=None,
         containers=None, uid=None):
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    if containers is None:
        req, lim = {}, {}
        if cpu_req:
            req["cpu"] = cpu_req
        if mem_req:
            req["memory"] = mem_req
        if cpu_lim:
            lim["cpu"] = cpu_lim
        if mem_lim:
            lim["memory"] = mem_lim
        if batch:
            req.update(batch[0])
            lim.update(batch[1])
        containers = [ContainerSpec("main", req, lim)]
    return PodInfo.from_record(PodRecord(namespace="ns", name=name, uid=uid or f"uid-{name}", labels=labels,
                                         priority=priority, containers=containers, phase="Running",
                                         annotations=annotations or {}))


def pstate(p: PodInfo, usage=None, throttled=None):
    rel = LAYOUT.pod_dir(p.uid, p.kube_qos)
    return PodState(p, rel, {c.name: f"{rel}/c-{c.name}" for c in p.containers}, usage, throttled)


CAP = Resources(16000, 64 * GI)
ALLOC = Resources(15000, 60 * GI)


def state(pods, *, cap=CAP, alloc=ALLOC, node=None, files=None, now=100_000,
          procs=None, history=(), last_cpu_evict=0, last_mem_evict=0):
    files = files or MemoryCgroupFiles({"cpuset.cpus": "0-15"})
    return QoSState(node="n1", now_ms=now, capacity=cap, allocatable=alloc, node_usage=node, pods=pods,
                    qos_dirs={k: LAYOUT.qos_dir(k) for k in KubeQoS}, processors=procs or synthetic_topology(16),
                    read=files.read, be_history=list(history),
                    last_evict_ms={cpu_evict.COOL_DOWN: last_cpu_evict, memory_evict.COOL_DOWN: last_mem_evict})


def slo(**threshold):
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(update={"enable": True, **threshold})
    return spec


LS1 = info("ls1", cpu_req=4000, cpu_lim=8000, mem_req=GI, mem_lim=2 * GI)
LS2 = info("ls2", qos="LS", cpu_req=2000, cpu_lim=2000, mem_req=GI, mem_lim=GI)
BE1 = info("be1", qos="BE", priority=5500, batch=({"kubernetes.io/batch-cpu": 4000}, {"kubernetes.io/batch-cpu": 4000}))
BE2 = info("be2", qos="BE", priority=5100, batch=({"kubernetes.io/batch-cpu": 6000}, {"kubernetes.io/batch-cpu": 6000}))


def suppress_state(ls_cpu=(3000, 2000), node_cpu=11000, files=None, **kw):
    pods = [pstate(LS1, Resources(ls_cpu[0], GI)), pstate(LS2, Resources(ls_cpu[1], GI)),
            pstate(BE1, Resources(4000, GI))]
    return state(pods, node=Resources(node_cpu, 20 * GI), files=files, **kw)


# --------------------------------------------------------------------------- cpu suppress


def test_suppress_amount():
    # 16000 x 65 % - LS (5000) - max(system 11000 - 9000, reserved 1000) = 3400
    assert cpu_suppress.suppress_milli(suppress_state(), 65) == 3400
    # system below reserved: the reservation counts
    assert cpu_suppress.suppress_milli(suppress_state(node_cpu=9500), 65) == 10400 - 5000 - 1000
    # every write of the plan says how the amount came about (the events carry it)
    writes = cpu_suppress.plan(suppress_state(), slo(cpuSuppressPolicy="cfsQuota"))
    assert writes and all(w.inputs == {"capacity": 16000, "threshold_percent": 65, "non_be_pods": 5000,
                                       "non_be_host_apps": 0, "system_or_reserved": 2000, "min_percent": None,
                                       "be_allowed": 3400} for w in writes)  # fmt: skip


@pytest.mark.parametrize(
    "current,ls_cpu,expected",
    [
        ("-1", (3000, 2000), 340000),  # unlimited before: no step limit
        ("340000", (1000, 2000), 500000),  # +160000 = exactly 10 % of 16 cores
        ("500000", (0, 0), 660000),  # wants 840000: raised by at most 160000
        ("500000", (1680, 1670), None),  # wants 505000: under 1 % of capacity, skipped
        ("500000", (9000, 9000), 2000),  # nothing left: the 2000 us floor
    ],
)
def test_suppress_cfs_quota(current, ls_cpu, expected):
    files = MemoryCgroupFiles({"cpuset.cpus": "0-15", "cpu.cfs_quota_us": current})
    node_cpu = sum(ls_cpu) + 4000 + 2000
    writes = cpu_suppress.plan(suppress_state(ls_cpu, node_cpu, files), slo(cpuSuppressPolicy="cfsQuota"))
    quota = [w.value for w in writes if w.resource == "cpu.cfs_quota_us"]
    assert quota == ([] if expected is None else [expected])


def test_suppress_cpuset_pairs_siblings_and_writes_bottom_up():
    files = MemoryCgroupFiles({"cpuset.cpus": "0-15"})
    writes = cpu_suppress.plan(suppress_state(files=files), slo())
    cpusets = [(w.rel, w.value) for w in writes if w.resource == "cpuset.cpus"]
    be_dir = LAYOUT.qos_dir("BestEffort")
    be_pod = LAYOUT.pod_dir(BE1.uid, "BestEffort")
    # 3400m -> 4 cpus: hyper-thread pairs (0,8) and (1,9); container, pod, then the QoS dir
    assert cpusets == [(f"{be_pod}/c-main", "0-1,8-9"), (be_pod, "0-1,8-9"), (be_dir, "0-1,8-9")]
    assert writes[-1].resource == "cpu.cfs_quota_us" and writes[-1].value == -1


def test_suppress_cpuset_growth_step_and_bound_cpus():
    files = MemoryCgroupFiles({"cpuset.cpus": "0,8"})
    lse = info("lse", qos="LSE", cpu_req=2000, cpu_lim=2000,
               annotations={"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": "0-1"})})
    pods = [pstate(lse, Resources(100, GI)), pstate(BE1, Resources(1000, GI))]
    writes = cpu_suppress.plan(state(pods, node=Resources(1200, GI), files=files), slo())
    # wants ceil(9300 / 1000) = 10 cpus; grows by at most ceil(16 x 10 %) = 2 from 2 -> 4; LSE cpus 0-1 never
    final = [w.value for w in writes if w.resource == "cpuset.cpus"][-1]
    assert final == "2-3,10-11"
    # the union is written first (top-down) so children never exceed the parent
    assert writes[0].value == "0,2-3,8,10-11"


def test_suppress_disabled_recovers_full_cpuset():
    files = MemoryCgroupFiles({"cpuset.cpus": "0-1", "cpu.cfs_quota_us": "2000"})
    writes = cpu_suppress.plan(suppress_state(files=files), NodeSLOSpec())
    assert writes[0].value == -1
    assert {w.value for w in writes if w.resource == "cpuset.cpus"} == {"0-15"}


@pytest.mark.parametrize(
    "k,expected",
    [
        (2, [0, 8]),
        (3, [0, 8, 1]),
        (5, [0, 8, 1, 9, 2]),
    ],
)
def test_pick_cpus_single_numa(k, expected):
    assert pick_cpus(k, synthetic_topology(16), 16) == expected


def test_pick_cpus_spreads_over_numa_nodes():
    procs = [Processor(cpu=i, core=i % 4, socket=0, node=0 if i % 4 < 2 else 1) for i in range(8)]
    # buckets: node0 {0,4,1,5} node1 {2,6,3,7}: a pair from each, then singles
    assert pick_cpus(4, procs, 8) == [0, 4, 2, 6]
    assert pick_cpus(9, procs, 8) == []
    # an odd count: pairs from each bucket in turn, then singles from the bucket phase 1 reached
    assert pick_cpus(5, procs, 8) == [0, 4, 2, 6, 1]
    assert pick_cpus(8, procs, 8) == [0, 4, 2, 6, 1, 5, 3, 7]


def test_pick_cpus_four_threads_a_core():
    # one bucket, cores 0 and 1 of four threads: pairs (0,1) then (2,3) of core 0, then a single
    procs = [Processor(cpu=i, core=i // 4) for i in range(8)]
    assert pick_cpus(5, procs, 8) == [0, 1, 2, 3, 4]
    # CPUs 1 and 2 not offered: 0 and 3 are now adjacent siblings of core 0, a pair
    rest = [p for p in procs if p.cpu not in (1, 2)]
    assert pick_cpus(5, rest, 8) == [0, 3, 4, 5, 6]


@pytest.mark.parametrize("text,cpus,canon", [("0-3,8", [0, 1, 2, 3, 8], "0-3,8"), ("2,0,1", [0, 1, 2], "0-2"),
                                             ("", [], "")])
def test_cpuset_text(text, cpus, canon):
    assert parse_cpuset(text) == cpus
    assert format_cpuset(cpus) == canon


def test_cpuset_merge_example_from_koordinator():
    # MergeConditionIfCPUSetIsLooser: old 0-3, new 2-5 -> 0-5 written first
    assert format_cpuset(set(parse_cpuset("0-3")) | set(parse_cpuset("2-5"))) == "0-5"


# --------------------------------------------------------------------------- cpu evict


def hist(n, usage, limit, request, now=100_000):
    return [BESample(now - i * 1000, usage, limit, request) for i in range(n)][::-1]


EVICT_SLO = {"cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 70}


@pytest.mark.parametrize(
    "request_,limit,lower,upper,expected",
    [
        # float64 as in Go: 0.7 - 0.2 = 0.49999999999999994, truncated -> 4999
        (10000, 2000, 40, 70, 4999),  # satisfaction 0.2: release 10000 x (0.7 - 0.2)
        (10000, 4000, 40, 70, 2999),  # satisfaction 0.4 is "at or below"
        (10000, 4100, 40, 70, 0),
        (0, 2000, 40, 70, 0),
        (3000, 1000, 60, 30, 0),  # gap <= 0
    ],
)
def test_release_by(request_, limit, lower, upper, expected):
    assert cpu_evict.release_by(request_, limit, lower, upper) == expected


def evict_state(history, last_evict=0, be_usage=(1000, 900)):
    pods = [pstate(LS1, Resources(3000, GI)), pstate(BE1, Resources(be_usage[0], GI)),
            pstate(BE2, Resources(be_usage[1], GI))]
    return state(pods, node=Resources(9000, 20 * GI), history=history, last_cpu_evict=last_evict)


def test_cpu_evict_lowest_priority_first_until_released():
    evs = cpu_evict.plan(evict_state(hist(5, 1900, 2000, 10000)), slo(**EVICT_SLO))
    assert [(e.name, e.release.cpu_milli) for e in evs] == [("be2", 6000)]  # 6000 >= 4999 to release


@pytest.mark.parametrize(
    "history,last_evict,extra",
    [
        (hist(5, 1700, 2000, 10000), 0, {}),  # BE uses 85 % of its limit: not starving
        (hist(5, 1900, 2000, 10000), 90_000, {}),  # within the 20 s cool-down
        (hist(10, 1900, 2000, 10000), 0, {"cpuEvictTimeWindowSeconds": 60}),  # 10 samples < 60 / 3
        (hist(5, 1900, 5000, 10000), 0, {}),  # satisfaction 0.5 > 0.4
    ],
)
def test_cpu_evict_does_nothing(history, last_evict, extra):
    assert cpu_evict.plan(evict_state(history, last_evict), slo(**EVICT_SLO, **extra)) == []


def test_cpu_evict_takes_the_smaller_of_window_and_now():
    h = hist(5, 1900, 2000, 10000)[:-1] + [BESample(100_000, 1000, 1000, 2000)]  # now: sat 0.5 -> no release
    assert cpu_evict.plan(evict_state(h), slo(**EVICT_SLO)) == []
    h = hist(5, 1900, 2000, 10000)[:-1] + [BESample(100_000, 1000, 1000, 3000)]
    # window avg: req 8600, limit 1800 -> 8600 x (0.7 - 0.2093) = 4220; now 3000 x (0.7 - 0.333) = 1100
    evs = cpu_evict.plan(evict_state(h), slo(**EVICT_SLO))
    assert cpu_evict.release_milli(evict_state(h), slo(**EVICT_SLO)) == 1100
    assert [e.name for e in evs] == ["be2"]
    seen = evs[0].inputs  # the satisfaction over the window that decided it (1 s: the last two samples)
    assert (seen["window_s"], seen["be_limit"], seen["be_request"], seen["satisfaction_percent"]) == (1, 1500, 6500, 23.1)
    assert (seen["satisfaction_lower_percent"], seen["satisfaction_upper_percent"]) == (
        EVICT_SLO["cpuEvictBESatisfactionLowerPercent"], EVICT_SLO["cpuEvictBESatisfactionUpperPercent"])


# --------------------------------------------------------------------------- memory evict


def test_memory_evict_release_and_order():
    cap = Resources(16000, 100 * GI)
    a = info("a", qos="BE", priority=5000)
    b = info("b", qos="BE", priority=5000)
    c = info("c", qos="BE", priority=5500)
    pods = [pstate(a, Resources(0, 3 * GI)), pstate(b, Resources(0, 5 * GI)), pstate(c, Resources(0, 10 * GI)),
            pstate(LS1, Resources(0, 40 * GI))]
    st = state(pods, cap=cap, node=Resources(1000, 75 * GI))
    assert memory_evict.release_bytes(st, slo()) == 107374182400 * 7 // 100  # 75 % - (70 - 2)
    evs = memory_evict.plan(st, slo())
    assert [e.name for e in evs] == ["b", "a"]  # 5 + 3 GiB >= 7 GiB
    # each eviction says what the rule read: usage against threshold, the victim order, what the
    # pods before it released
    first, second = evs[0].inputs, evs[1].inputs
    assert (first["node_usage_percent"], first["threshold_percent"], first["lower_percent"]) == (75, 70, 68)
    assert first["to_release"] == {"memory": 107374182400 * 7 // 100}
    assert [v["pod"] for v in first["victim_order"]] == ["ns/b", "ns/a", "ns/c"]
    assert (first["released_before"], second["released_before"]) == ({"podUsed:memory": 5 * GI}, {"podUsed:memory": 8 * GI})
    below = state(pods, cap=cap, node=Resources(1000, 69 * GI))
    assert memory_evict.plan(below, slo()) == []
    assert memory_evict.plan(st, slo(memoryEvictLowerPercent=60))[-1].name == "c"  # 15 % to release
    cooled = state(pods, cap=cap, node=Resources(1000, 75 * GI), last_mem_evict=97_000)
    assert memory_evict.plan(cooled, slo()) == []


def test_memory_evict_pods_without_usage_last_by_name_descending():
    a, b, c = (info(n, qos="BE") for n in ("a", "b", "c"))
    pods = [pstate(a, None), pstate(b, Resources(0, 0)), pstate(c, Resources(0, GI))]
    st = state(pods, cap=Resources(16000, 10 * GI), node=Resources(0, 10 * GI))
    assert [e.name for e in memory_evict.plan(st, slo())] == ["c", "b", "a"]


# --------------------------------------------------------------------------- cpu burst


def burst_slo(**kw):
    spec = NodeSLOSpec()
    spec.cpuBurstStrategy = spec.cpuBurstStrategy.model_copy(update=kw)
    return spec


def test_static_burst_for_ls_pods_only():
    ls = info("web", cpu_req=1000, cpu_lim=1500)
    lsr = info("db", qos="LSR", cpu_req=2000, cpu_lim=2000)
    be = info("job", qos="BE")
    st = state([pstate(ls), pstate(lsr), pstate(be)], node=Resources(1000, GI))
    writes = [(w.rel.rsplit("/", 1)[-1], w.resource, w.value) for w in cpu_burst.plan(st, burst_slo(policy="cpuBurstOnly"))]
    assert writes == [("c-main", "cpu.cfs_burst_us", 1_500_000), (LAYOUT.pod_dir(ls.uid, ls.kube_qos).rsplit("/", 1)[-1],
                                                                  "cpu.cfs_burst_us", 1_500_000)]
    assert cpu_burst.plan(st, burst_slo(policy="none")) == []
    # pod annotation overrides the node percent
    ann = info("web2", cpu_req=1000, cpu_lim=2000, annotations={"koordinator.sh/cpuBurst": '{"cpuBurstPercent": 200}'})
    st2 = state([pstate(ann)], node=Resources(1000, GI))
    assert cpu_burst.plan(st2, burst_slo(policy="cpuBurstOnly"))[0].value == 400_000


@pytest.mark.parametrize(
    "node_cpu,current,expected",
    [
        (2000, "200000", 240000),  # pool 12.5 % idle: x1.2
        (2000, "580000", 600000),  # capped at 300 % of the 200000 base
        (9000, "300000", 240000),  # pool 56 % >= 50 %: x0.8
        (9000, "210000", 200000),  # never below the base
        (7600, "300000", None),  # 47.5 % (90 % of the 50 % threshold is 45 %): cooling, hold
    ],
)
def test_dynamic_cfs_quota(node_cpu, current, expected):
    ls = info("web", cpu_req=1000, cpu_lim=2000)
    ps = pstate(ls, Resources(500, GI), throttled=0.3)
    files = MemoryCgroupFiles({"cpu.cfs_quota_us": current})
    st = state([ps], node=Resources(node_cpu, GI), files=files)
    writes = [w for w in cpu_burst.plan(st, burst_slo(policy="cfsQuotaBurstOnly")) if w.resource == "cpu.cfs_quota_us"]
    assert [w.value for w in writes if w.level == "container"] == ([] if expected is None else [expected])
    if expected is not None:  # the pod dir held the same quota and moves by the same delta
        assert [w.value for w in writes if w.level == "pod"] == [expected]


# --------------------------------------------------------------------------- group identity


def gi_slo(ls=True, lsr=False, be=True):
    spec = NodeSLOSpec()
    s = spec.resourceQOSStrategy
    for cls, on in ((s.lsClass, ls), (s.lsrClass, lsr), (s.beClass, be)):
        cls.cpuQOS.enable = on
    return spec


def test_group_identity_values():
    g = info("guaranteed", cpu_req=1000, cpu_lim=1000, mem_req=GI, mem_lim=GI)  # no label: LSR by k8s QoS
    lsr = info("lsr", qos="LSR", cpu_req=1000, cpu_lim=1000, mem_req=GI, mem_lim=GI)
    ls = info("ls", qos="LS", cpu_req=100)
    ls_off = info("ls-off", qos="LS", cpu_req=100, annotations={"koordinator.sh/cpuQOS": '{"groupIdentity": 2}'})
    be = info("be", qos="BE")
    st = state([pstate(p) for p in (g, lsr, ls, ls_off, be)])
    got = {(w.level, w.rel): w.value for w in group_identity.plan(st, gi_slo())}
    assert got[("qos", "kubepods")] == 0  # the Guaranteed root stays 0
    assert got[("qos", "kubepods/burstable")] == 2 and got[("qos", "kubepods/besteffort")] == -1
    pod = {p.name: got[("pod", LAYOUT.pod_dir(p.uid, p.kube_qos))] for p in (g, lsr, ls, ls_off, be)}
    # guaranteed without label: LS value as LSR is disabled; LSR label: LSR value (disabled -> 0);
    # an LS pod whose cpuQOS annotation lacks enable gets 0
    assert pod == {"guaranteed": 2, "lsr": 0, "ls": 2, "ls-off": 0, "be": -1}
    assert group_identity.plan(st, gi_slo(False, False, False)) == []


# --------------------------------------------------------------------------- memory QoS


def mq_slo(**kw):
    spec = NodeSLOSpec()
    spec.resourceQOSStrategy.lsClass.memoryQOS = spec.resourceQOSStrategy.lsClass.memoryQOS.model_copy(
        update={"enable": True, **kw})
    return spec


@pytest.mark.parametrize(
    "pct,limit,expected",
    [
        ((50, 80, 80), 2 * GI, {"memory.min": 536870912, "memory.low": 858993459, "memory.high": 1932734464}),
        ((50, 20, 0), 2 * GI, {"memory.min": 536870912, "memory.low": 536870912, "memory.high": MAX_INT64}),
        ((0, 0, 50), 0, {"memory.min": 0, "memory.low": 0, "memory.high": (GI + (60 * GI - GI) // 2) // 4096 * 4096}),
    ],
)
def test_memory_qos_values(pct, limit, expected):
    from koordcommon.schemas import MemoryQOS

    cfg = MemoryQOS(enable=True, minLimitPercent=pct[0], lowLimitPercent=pct[1], throttlingPercent=pct[2])
    assert memory_qos.values(GI, limit, cfg, 60 * GI) == expected


def test_memory_qos_plan_levels_and_sums():
    ls = info("web", cpu_req=100, mem_req=GI, mem_lim=2 * GI)
    ls2 = info("api", cpu_req=100, mem_req=2 * GI, mem_lim=2 * GI)
    st = state([pstate(ls), pstate(ls2)])
    writes = memory_qos.plan(st, mq_slo(minLimitPercent=50, lowLimitPercent=80, throttlingPercent=80, wmarkRatio=95))
    by = {(w.rel, w.resource): w.value for w in writes}
    rel = LAYOUT.pod_dir(ls.uid, ls.kube_qos)
    assert by[(rel + "/c-main", "memory.high")] == 1932734464
    assert by[(rel, "memory.min")] == GI // 2
    assert (rel, "memory.high") not in by  # no memory.high at pod level
    assert by[("kubepods/burstable", "memory.min")] == GI // 2 + GI
    assert by[("kubepods", "memory.low")] == 858993459 + 1717986918
    assert by[(rel + "/c-main", "memory.wmark_ratio")] == 95
    # raises come first, top-down; the exact values follow bottom-up
    assert writes[0].rel == "kubepods" and writes[-1].rel == "kubepods"
    assert memory_qos.plan(st, NodeSLOSpec()) == []


# --------------------------------------------------------------------------- batch resources


def test_batch_resources():
    be = info("job", qos="BE", containers=[
        ContainerSpec("a", {"kubernetes.io/batch-cpu": 500}, {"kubernetes.io/batch-cpu": 1000,
                                                               "kubernetes.io/batch-memory": 2 * GI}),
        ContainerSpec("b", {"koordinator.sh/batch-cpu": 1500}, {"koordinator.sh/batch-cpu": 2000,
                                                                "koordinator.sh/batch-memory": GI}),
    ])
    ps = pstate(be)
    got = {(w.rel.rsplit("/", 1)[-1], w.resource): w.value for w in batch_resources.plan(state([ps]), NodeSLOSpec())}
    pod = ps.rel.rsplit("/", 1)[-1]
    assert got == {
        (pod, "cpu.shares"): 2048, (pod, "cpu.cfs_quota_us"): 300000, (pod, "memory.limit_in_bytes"): 3 * GI,
        ("c-a", "cpu.shares"): 512, ("c-a", "cpu.cfs_quota_us"): 100000, ("c-a", "memory.limit_in_bytes"): 2 * GI,
        ("c-b", "cpu.shares"): 1536, ("c-b", "cpu.cfs_quota_us"): 200000, ("c-b", "memory.limit_in_bytes"): GI,
    }
    quota_off = {w.value for w in batch_resources.plan(state([ps]), slo(cpuSuppressPolicy="cfsQuota"))
                 if w.resource == "cpu.cfs_quota_us"}
    assert quota_off == {-1}
    assert batch_resources.plan(state([pstate(LS1)]), NodeSLOSpec()) == []


@pytest.mark.parametrize("milli,shares,quota", [(0, 2, -1), (1, 2, 1000), (5, 5, 1000), (500, 512, 50000),
                                                (300000, 262144, 30000000)])
def test_batch_conversions(milli, shares, quota):
    assert batch_resources.milli_to_shares(milli) == shares
    assert batch_resources.milli_to_quota(milli) == quota
