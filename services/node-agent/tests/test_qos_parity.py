"""Koordinator parity of the node QoS strategies: each NodeSLO field a Koordinator user brings does
what koordlet does with it. Figures are worked out from Koordinator's rules (the formula beside
each case); the limiter cases are the inputs and outputs of koordlet's own burst limiter table."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeSLOSpec
from node_agent.collect.cgroups import CgroupLayout
from node_agent.core.pods import PodInfo
from node_agent.qos.files import MemoryCgroupFiles
from node_agent.qos.model import BESample, BurstLimiter, HostApp, PodState, QoSState
from node_agent.qos.round import QoSMemory, plan_round
from node_agent.qos.strategies import (
    cpu_burst,
    cpu_evict,
    cpu_suppress,
    eviction,
    group_identity,
    memory_evict,
    memory_qos,
)
from node_agent.qos.strategies.cpuset import synthetic_topology

GI = 1 << 30
LAYOUT = CgroupLayout(Path("/sim"), "v2", "cgroupfs")
BATCH = "kubernetes.io/batch-cpu"
BATCH_MEM = "kubernetes.io/batch-memory"


def info(name, *, qos=None, priority=None, cpu_req=0, cpu_lim=0, mem_req=0, mem_lim=0, batch=None, annotations=None,
         containers=None):
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    if containers is None:
        req = {k: v for k, v in (("cpu", cpu_req), ("memory", mem_req)) if v}
        lim = {k: v for k, v in (("cpu", cpu_lim), ("memory", mem_lim)) if v}
        if batch:
            req.update(batch[0])
            lim.update(batch[1])
        containers = [ContainerSpec("main", req, lim)]
    return PodInfo.from_record(PodRecord(namespace="ns", name=name, uid=f"uid-{name}", labels=labels,
                                         priority=priority, containers=containers, phase="Running",
                                         annotations=annotations or {}))


def pstate(p: PodInfo, usage=None, throttled=None):
    rel = LAYOUT.pod_dir(p.uid, p.kube_qos)
    return PodState(p, rel, {c.name: f"{rel}/c-{c.name}" for c in p.containers}, usage, throttled)


def state(pods, *, cap=Resources(16000, 64 * GI), alloc=Resources(15000, 60 * GI), node=None, files=None, now=100_000,
          history=()):
    files = files or MemoryCgroupFiles({"cpuset.cpus": "0-15"})
    return QoSState(node="n1", now_ms=now, capacity=cap, allocatable=alloc, node_usage=node, pods=pods,
                    qos_dirs={k: LAYOUT.qos_dir(k) for k in KubeQoS}, processors=synthetic_topology(16),
                    read=files.read, be_history=list(history))


def slo(**threshold):
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(update={"enable": True, **threshold})
    return spec


LS1 = info("ls1", cpu_req=4000, cpu_lim=8000, mem_req=GI, mem_lim=2 * GI)
LS2 = info("ls2", qos="LS", cpu_req=2000, cpu_lim=2000, mem_req=GI, mem_lim=GI)
BE1 = info("be1", qos="BE", priority=5500, batch=({BATCH: 4000}, {BATCH: 4000}))
BE2 = info("be2", qos="BE", priority=5100, batch=({BATCH: 6000}, {BATCH: 6000}))


def burst_slo(**kw):
    spec = NodeSLOSpec()
    spec.cpuBurstStrategy = spec.cpuBurstStrategy.model_copy(update=kw)
    return spec


def quota_writes(writes):
    return [(w.level, w.value) for w in writes if w.resource == "cpu.cfs_quota_us"]


# --------------------------------------------------------------------------- cpu burst: reset


WEB = info("web", cpu_req=1000, cpu_lim=2000)  # base quota 200000


@pytest.mark.parametrize(
    "policy,expected",
    [
        # the quota was raised to 360000 (pod 460000): once the policy no longer allows quota burst it goes
        # back to the base, the container first, then the pod by the same -160000
        ("cpuBurstOnly", [("container", 200000), ("pod", 300000)]),
        ("none", [("container", 200000), ("pod", 300000)]),
        # still allowed, idle pool, throttled: x1.2 = 432000, the pod first (+72000)
        ("cfsQuotaBurstOnly", [("pod", 532000), ("container", 432000)]),
        ("auto", [("pod", 532000), ("container", 432000)]),
    ],
)
def test_burst_quota_reset_when_policy_no_longer_allows_it(policy, expected):
    ps = pstate(WEB, Resources(500, GI), throttled=0.2)
    files = MemoryCgroupFiles()
    files.write(ps.containers["main"], "cpu.cfs_quota_us", 360000)
    files.write(ps.rel, "cpu.cfs_quota_us", 460000)
    st = state([ps], node=Resources(2000, GI), files=files)
    assert quota_writes(cpu_burst.plan(st, burst_slo(policy=policy))) == expected


def test_burst_static_value_reset_to_zero_when_disabled():
    ps = pstate(WEB, Resources(500, GI))
    files = MemoryCgroupFiles()
    files.write(ps.containers["main"], "cpu.cfs_burst_us", 2_000_000)  # 2 cores x 1000 % x 100000 before
    files.write(ps.rel, "cpu.cfs_burst_us", 2_000_000)
    writes = cpu_burst.plan(state([ps], node=Resources(2000, GI), files=files), burst_slo(policy="none"))
    assert [(w.level, w.resource, w.value) for w in writes] == [("container", "cpu.cfs_burst_us", 0),
                                                                 ("pod", "cpu.cfs_burst_us", 0)]
    # an untouched node (zeros, -1 quotas) needs no write at all
    assert cpu_burst.plan(state([ps], node=Resources(2000, GI)), burst_slo(policy="none")) == []


@pytest.mark.parametrize(
    "threshold,pool_pct,expected",
    [
        (60, 53, "idle"),  # cooling starts at 90 % of the threshold: 54 %
        (60, 54, "cooling"),
        (60, 60, "overload"),
        (50, 44, "idle"),
        (50, 45, "cooling"),
    ],
)
def test_burst_share_pool_cooling_at_ninety_percent_of_the_threshold(threshold, pool_pct, expected):
    # 16 CPUs, an LSR pod requesting 4 of them: the pool is 12 cores; the LSR and BE pods' usage is not the pool's
    lsr = info("db", qos="LSR", cpu_req=4000, cpu_lim=4000, mem_req=GI, mem_lim=GI)
    used = 12000 * pool_pct // 100
    pods = [pstate(lsr, Resources(3000, GI)), pstate(BE1, Resources(2500, GI)), pstate(WEB, Resources(used, GI))]
    st = state(pods, node=Resources(used + 3000 + 2500, GI))
    assert cpu_burst.share_pool_state(st, threshold) == expected
    assert cpu_burst.share_pool_state(state(pods, node=None), threshold) == "unknown"


# --------------------------------------------------------------------------- cpu burst: the limiter


@pytest.mark.parametrize(
    "period,percent,share,elapsed_s,usage,allows,tokens",
    [
        # koordlet's own limiter table: capacity = period x (percent - 100)
        (100, 150, 1.0, 10, 150, True, 4500),  # 5000 - 50 x 10
        (100, 150, 0.01, 10, 200, False, -950),  # 50 - 100 x 10
        (10, 150, 0.01, 10, 200, False, -500),  # 5 - 1000, floored at -capacity
        (100, 150, 0.1, 10, 40, True, 1100),  # 500 + 60 x 10
        (10, 150, 0.1, 10, 40, True, 500),  # 50 + 600, capped at capacity
        (100, 150, 0.1, 10, 80, True, 500),  # 60 <= u < 100: neither spends nor saves
    ],
)
def test_burst_limiter_token_bucket(period, percent, share, elapsed_s, usage, allows, tokens):
    capacity = period * (percent - 100)
    lim = BurstLimiter(capacity, int(capacity * share), 0, 2 * period * 1000)
    after = cpu_burst.consume(lim, elapsed_s * 1000 + 900, usage)  # 10.9 s count as 10
    assert (after.allows, after.tokens) == (allows, tokens)


def test_burst_limiter_denies_growth_when_the_budget_is_spent():
    # period 10 s, 300 %: 2000 tokens; the container runs at 200 % of its limit (4000m of 2000m): -100 a second
    cfg = burst_slo(policy="cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=10)
    ps = pstate(WEB, Resources(4000, GI), throttled=0.5)
    ps.container_usage["main"] = Resources(4000, GI)
    rel = ps.containers["main"]
    files = MemoryCgroupFiles()
    files.write(rel, "cpu.cfs_quota_us", 300000)
    files.write(ps.rel, "cpu.cfs_quota_us", 300000)
    memory = QoSMemory(burst_limiters={rel: BurstLimiter(2000, 250, 0, 20_000)})
    got = []
    for second in (1, 2, 3):
        st = state([ps], node=Resources(4000, GI), files=files, now=second * 1000)
        plan = plan_round(st, cfg, memory)
        got.append((memory.burst_limiters[rel].tokens, [v for lv, v in quota_writes(plan) if lv == "container"]))
    # 150 and 50 tokens: x1.2 of 300000; -50: no budget, x0.8 instead (the files were not written, so 300000 again)
    assert got == [(150, [360000]), (50, [360000]), (-50, [240000])]
    # unused for more than 2 x period, the limiter is dropped
    later = state([], node=Resources(0, GI), files=files, now=3000 + 20_001)
    plan_round(later, cfg, memory)
    assert memory.burst_limiters == {}


def test_burst_limiter_starts_under_half_full_and_restarts_when_resized():
    a = cpu_burst.new_limiter("kubepods/pod1/c1", 10, 300, 5000)
    assert a.capacity == 2000 and 0 <= a.tokens < 1000 and a.updated_ms == 5000
    assert cpu_burst.new_limiter("kubepods/pod1/c1", 10, 300, 9000).tokens == a.tokens  # a fixed share per container


# --------------------------------------------------------------------------- cpu evict


def be_hist(n, usage, limit, request, now=100_000):
    return [BESample(now - i * 1000, usage, limit, request, 9000) for i in range(n)][::-1]


SAT = {"cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 70}


@pytest.mark.parametrize(
    "policy,batch_allocatable,expected",
    [
        # real limit 2000m for 10000m requested, 1900m used: satisfaction 0.2 -> 10000 x (0.7 - 0.2)
        ("evictByRealLimit", {"batch-cpu": 3000}, 4999),
        # the node's batch-cpu allocatable is the limit: 1900 / 3000 = 63 % < 90 %: BE is not starving
        ("evictByAllocatable", {"batch-cpu": 3000}, 0),
        # 1900 / 2100 = 90.5 %, satisfaction 0.21 -> 10000 x (0.7 - 0.21) = 4900
        ("evictByAllocatable", {"batch-cpu": 2100}, 4900),
        # zero allocatable counts as 1m (under a core: always starving): 10000 x (0.7 - 0.0001)
        ("evictByAllocatable", {"batch-cpu": 0}, 6999),
        ("evictByAllocatable", {}, 0),  # no batch-cpu published: no limit, nothing to judge
    ],
)
def test_cpu_evict_policy_real_limit_or_batch_allocatable(policy, batch_allocatable, expected):
    st = state([pstate(BE1, Resources(1000, GI)), pstate(BE2, Resources(900, GI))], node=Resources(9000, GI),
               history=be_hist(5, 1900, 2000, 10000))
    st.tier_allocatable = batch_allocatable
    assert cpu_evict.release_milli(st, slo(cpuEvictPolicy=policy, **SAT)) == expected


def ev_pod(name, priority, usage, *, enabled=True, ann=None, sub=None, qos="LS", batch=0):
    tier = {BATCH: batch, BATCH_MEM: batch * GI // 1000}
    p = info(name, qos=qos, priority=priority, cpu_req=1000, batch=(tier, tier) if batch else None, annotations=ann)
    p = replace(p, evict_enabled=enabled, sub_priority=sub)
    return pstate(p, Resources(usage, usage * GI // 1000))


def test_cpu_evict_by_node_usage_generic_victims_in_order():
    # 16 cores at 75 % over the window, threshold 70 (lower 68): release 16000 x 7 / 100 = 1120m
    pods = [
        ev_pod("a", 5500, 3000, ann={"koordinator.sh/eviction-priority": "1"}),  # evicted last of all
        ev_pod("b", 5500, 500),
        ev_pod("c", 5500, 900),
        ev_pod("d", 7500, 2000),  # over evictEnabledPriorityThreshold 5999
        ev_pod("e", 5100, 4000, enabled=False),  # no eviction-enabled label
        ev_pod("f", 5100, 200),  # lowest priority first
        ev_pod("g", 5500, 300, sub=100),  # koordinator.sh/priority 100 before the 5500 default
    ]
    h = [BESample(100_000 - i * 1000, 0, 16000, 0, 12000) for i in range(3)][::-1]
    st = state(pods, node=Resources(12000, 40 * GI), history=h)
    cfg = slo(cpuEvictThresholdPercent=70, evictEnabledPriorityThreshold=5999)
    evs = cpu_evict.plan(st, cfg)
    assert [(e.name, e.feature, e.release.cpu_milli) for e in evs] == [
        ("f", "CPUEvict", 200), ("g", "CPUEvict", 300), ("c", "CPUEvict", 900)]  # 1400 >= 1120
    assert "release 1120m" in evs[0].reason
    # under the threshold, unset, or half set: nothing
    assert cpu_evict.plan(st, slo(cpuEvictThresholdPercent=76, evictEnabledPriorityThreshold=5999)) == []
    assert cpu_evict.plan(st, slo(cpuEvictThresholdPercent=70)) == []
    assert cpu_evict.usage_problem(slo(cpuEvictThresholdPercent=70).resourceUsedThresholdWithBE)


@pytest.mark.parametrize(
    "threshold,lower,requests,expected",
    [
        # batch-cpu allocatable 10000m; requested 11000 > 100 %: release 11000 - 0.9 x 10000 = 2000
        (100, 90, (6000, 5000), [("big", 6000)]),
        (110, 90, (6000, 5000), []),  # 110 % is not over 110 %
        (100, 40, (6000, 5000), [("big", 6000), ("small", 5000)]),  # 11000 - 4000 = 7000 to release
    ],
)
def test_cpu_allocatable_evict(threshold, lower, requests, expected):
    big = ev_pod("big", 5500, 100, qos="BE", batch=requests[0])
    small = ev_pod("small", 5500, 100, qos="BE", batch=requests[1])
    prod = ev_pod("prod", 9500, 100)
    st = state([small, big, prod], node=Resources(3000, 40 * GI))
    st.tier_allocatable = {"batch-cpu": 10000}
    cfg = slo(cpuAllocatableEvictThresholdPercent=threshold, cpuAllocatableEvictLowerPercent=lower,
              allocatableEvictPriorityThreshold=5999)
    assert [(e.name, e.release.cpu_milli) for e in cpu_evict.plan(st, cfg)] == expected


def test_cpu_eviction_rules_share_what_a_pod_releases():
    # BECPUEvict releases 4999m of batch-cpu requests by evicting be2 (6000m); CPUAllocatableEvict wants
    # 10000 - 0.8 x 9000 = 2800m of the same requests: already met, nobody else goes
    be1 = ev_pod("be1", 5500, 1000, qos="BE", batch=4000)
    be2 = ev_pod("be2", 5100, 900, qos="BE", batch=6000)
    st = state([be1, be2], node=Resources(9000, GI), history=be_hist(5, 1900, 2000, 10000))
    st.tier_allocatable = {"batch-cpu": 9000}  # 10000 requested: over 100 %, release 10000 - 0.8 x 9000
    cfg = slo(**SAT, cpuAllocatableEvictThresholdPercent=100, cpuAllocatableEvictLowerPercent=80,
              allocatableEvictPriorityThreshold=5999)
    assert [(e.name, e.feature) for e in cpu_evict.plan(st, cfg)] == [("be2", "BECPUEvict")]
    # its eviction still pending: it counts as released and nobody is asked
    st.pending_evictions = frozenset({be2.info.uid})
    assert cpu_evict.plan(st, cfg) == []


@pytest.mark.parametrize(
    "policy,evicted",
    [
        (None, ["be2"]),
        ('["MemoryEvict"]', ["be1"]),  # be2 may only be evicted by MemoryEvict: be1 goes (4000m < 4999m, all)
        ('["BECPUEvict"]', ["be2"]),
        ("not json", ["be1"]),  # an annotation that does not parse allows nothing
    ],
)
def test_eviction_policy_annotation(policy, evicted):
    be1 = ev_pod("be1", 5500, 1000, qos="BE", batch=4000)
    be2 = ev_pod("be2", 5100, 900, qos="BE", batch=6000,
                 ann={"koordinator.sh/eviction-policy": policy} if policy else None)
    st = state([be1, be2], node=Resources(9000, GI), history=be_hist(5, 1900, 2000, 10000))
    assert [e.name for e in cpu_evict.plan(st, slo(**SAT))] == evicted


# --------------------------------------------------------------------------- memory evict


@pytest.mark.parametrize(
    "requests,expected",
    [
        ((20 * GI, 30 * GI), []),  # 50 % of the 100Gi batch-memory allocatable
        # 85 % > 80 %: release (0.85 - 0.70) x 107374182400 = 16106127360 bytes: the 45Gi pod alone
        ((45 * GI, 40 * GI), [("p0", 45 * GI)]),
    ],
)
def test_memory_allocatable_evict(requests, expected):
    pods = []
    for i, r in enumerate(requests):
        p = info(f"p{i}", qos="BE", priority=5500, containers=[ContainerSpec("main", {BATCH_MEM: r}, {BATCH_MEM: r})])
        pods.append(pstate(replace(p, evict_enabled=True), Resources(100, GI)))
    st = state(pods, cap=Resources(16000, 200 * GI), node=Resources(1000, 60 * GI))
    st.tier_allocatable = {"batch-memory": 100 * GI}
    cfg = slo(memoryAllocatableEvictThresholdPercent=80, memoryAllocatableEvictLowerPercent=70,
              allocatableEvictPriorityThreshold=5999)
    assert eviction.allocatable_release(st, "memory", 80, 70, 5999) == (
        {"batch-memory": 16106127360} if expected else {})
    assert [(e.name, e.release.memory_bytes) for e in memory_evict.plan(st, cfg)] == expected


def test_memory_evict_generic_after_be_sharing_the_release():
    # 100Gi at 75 %, threshold 70 (lower 68): release 7Gi (7516192768 bytes). BE pods go first (3Gi), then
    # the eviction-enabled pods at or under priority 7999: mid-b (5Gi) before prod-like LS (9500, over)
    be = pstate(info("be", qos="BE", priority=5000), Resources(0, 3 * GI))
    mid_a = ev_pod("mid-a", 7500, 1000)  # 1Gi used
    mid_b = ev_pod("mid-b", 7500, 5000)  # 5Gi used: larger usage first
    prod = ev_pod("prod", 9500, 20000)
    st = state([be, mid_a, mid_b, prod], cap=Resources(16000, 100 * GI), node=Resources(1000, 75 * GI))
    evs = memory_evict.plan(st, slo(evictEnabledPriorityThreshold=7999))
    assert [(e.name, e.feature) for e in evs] == [("be", "BEMemoryEvict"), ("mid-b", "MemoryEvict")]
    # without evictEnabledPriorityThreshold only BE pods are evicted
    assert [e.name for e in memory_evict.plan(st, slo())] == ["be"]


# --------------------------------------------------------------------------- memory QoS


def mq(**kw):
    spec = NodeSLOSpec()
    for cls, cfg in kw.items():
        section = getattr(spec.resourceQOSStrategy, cls)
        section.memoryQOS = section.memoryQOS.model_copy(update=cfg)
    return spec


def pod_files(writes, ps):
    return {w.resource: w.value for w in writes if w.rel == ps.rel}


def cont_files(writes, ps):
    return {w.resource: w.value for w in writes if w.rel == ps.containers["main"]}


@pytest.mark.parametrize(
    "node,annotation,expected",
    [
        # node LS class disabled, no annotation: nothing is written
        ({}, None, None),
        # policy auto: Koordinator's LS template, even though the node disables it
        ({}, {"policy": "auto"}, {"memory.min": 0, "memory.wmark_ratio": 95, "memory.wmark_scale_factor": 20,
                                   "memory.wmark_min_adj": -25}),
        # auto plus a field: min = 1Gi x 50 %
        ({}, {"policy": "auto", "minLimitPercent": 50},
         {"memory.min": GI // 2, "memory.wmark_ratio": 95, "memory.wmark_min_adj": -25}),
        # a default-policy annotation overrides the enabled node's fields it names
        ({"lsClass": {"enable": True, "minLimitPercent": 20, "wmarkRatio": 90}}, {"lowLimitPercent": 30},
         {"memory.min": GI // 5, "memory.low": 322122547, "memory.wmark_ratio": 90}),
        # policy none: memory QoS off for the pod on a node that enables it
        ({"lsClass": {"enable": True, "minLimitPercent": 20, "wmarkRatio": 90}}, {"policy": "none"},
         {"memory.min": 0, "memory.low": 0, "memory.wmark_ratio": 0, "memory.wmark_scale_factor": 50}),
    ],
)
def test_memory_qos_pod_annotation(node, annotation, expected):
    ann = {"koordinator.sh/memoryQOS": json.dumps(annotation)} if annotation else None
    ps = pstate(info("web", qos="LS", cpu_req=100, mem_req=GI, mem_lim=2 * GI, annotations=ann))
    writes = memory_qos.plan(state([ps]), mq(**node))
    if expected is None:
        assert writes == []
        return
    got = pod_files(writes, ps)
    assert {k: got[k] for k in expected} == expected


def test_memory_qos_oom_priority_and_group():
    ps = pstate(info("web", qos="LS", cpu_req=100, mem_req=GI, mem_lim=2 * GI))
    spec = mq(lsClass={"enable": True, "priorityEnable": 1, "priority": 6, "oomKillGroup": 1})
    by = {(w.rel, w.resource): w.value for w in memory_qos.plan(state([ps]), spec)}
    for rel in (ps.rel, ps.containers["main"], "kubepods/burstable"):
        assert (by[(rel, "memory.use_priority_oom")], by[(rel, "memory.priority")], by[(rel, "memory.oom.group")]) \
            == (1, 6, 1)
    # the Guaranteed root follows lsrClass (disabled: the none values)
    assert (by[("kubepods", "memory.priority")], by[("kubepods", "memory.oom.group")]) == (0, 0)


@pytest.mark.parametrize(
    "cfg,expected",
    [
        ({"pageCacheLimitPercent": 50}, {"memory.pagecache_limit.enable": 1, "memory.pagecache_limit.size": GI,
                                         "memory.pagecache_limit.sync": 0}),
        ({"pageCacheLimitSize": 3 * GI, "pageCacheReclaimSync": True},  # capped by the 2Gi limit
         {"memory.pagecache_limit.enable": 1, "memory.pagecache_limit.size": 2 * GI, "memory.pagecache_limit.sync": 1}),
        ({"pageCacheLimitSize": 0}, {"memory.pagecache_limit.enable": 0, "memory.pagecache_limit.size": 0}),
        ({"pageCacheEnable": False, "pageCacheLimitPercent": 50},
         {"memory.pagecache_limit.enable": 0, "memory.pagecache_limit.size": GI, "memory.pagecache_limit.sync": 0}),
        ({}, {}),
    ],
)
def test_memory_qos_page_cache_limit(cfg, expected):
    ps = pstate(info("web", qos="LS", cpu_req=100, mem_req=GI, mem_lim=2 * GI))
    writes = memory_qos.plan(state([ps]), mq(lsClass={"enable": True, **cfg}))
    got = {k: v for k, v in pod_files(writes, ps).items() if k.startswith("memory.pagecache")}
    assert got == expected
    assert not any(k.startswith("memory.pagecache") for k in cont_files(writes, ps))  # pod level only


# --------------------------------------------------------------------------- cpu suppress


def app(name, qos, usage, base=""):
    return HostApp(name, QoSClass(qos), PriorityClass.NONE, base, f"{base or 'host'}/{name}", Resources(usage, GI))


@pytest.mark.parametrize(
    "apps,min_percent,expected",
    [
        # 16000 x 65 % - LS pods 5000 - max(system 11000 - 9000, reserved 1000) = 3400
        ((), None, 3400),
        # an LS host app using 1000m: non-BE, and no longer system: 10400 - 5000 - 1000 - max(1000, 1000)
        ((("ha", "LS", 1000, ""),), None, 3400),
        ((("ha", "LS", 1500, ""),), None, 10400 - 5000 - 1500 - 1000),
        # a BE host app under the besteffort dir counts with BE: 10400 - 5000 - max(2000 - 500, 1000)
        ((("hb", "BE", 500, "KubepodsBesteffort"),), None, 10400 - 5000 - 1500),
        # a BE host app elsewhere counts as non-BE
        ((("hb", "BE", 500, ""),), None, 10400 - 5000 - 500 - 1500),
        # cpuSuppressMinPercent: the floor is 16000 x 30 % = 4800
        ((), 30, 4800),
        ((), 20, 3400),
    ],
)
def test_suppress_host_apps_and_min_percent(apps, min_percent, expected):
    st = state([pstate(LS1, Resources(3000, GI)), pstate(LS2, Resources(2000, GI)), pstate(BE1, Resources(4000, GI))],
               node=Resources(11000, 20 * GI))
    st.host_apps = [app(*a) for a in apps]
    assert cpu_suppress.suppress_milli(st, 65, min_percent) == expected


def suppress_pods():
    return [pstate(LS1, Resources(3000, GI)), pstate(LS2, Resources(2000, GI)), pstate(BE1, Resources(4000, GI))]


def cpuset_writes(writes):
    return [(w.level, w.value) for w in writes if w.resource == "cpuset.cpus"]


@pytest.mark.parametrize(
    "system_qos,pinned,policy,expected",
    [
        # 3400m -> 4 CPUs, hyper-thread pairs first: (0,8), (1,9)
        ((), (), "none", [("container", "0-1,8-9"), ("pod", "0-1,8-9"), ("qos", "0-1,8-9")]),
        # CPUs 0 and 8 held exclusively by SYSTEM-QoS pods: never BE's
        ((0, 8), (), "none", [("container", "1-2,9-10"), ("pod", "1-2,9-10"), ("qos", "1-2,9-10")]),
        # CPUs the kubelet's static policy pinned (1-2, 9-10) are never BE's either; under the static policy
        # the besteffort and pod dirs keep the full BE set and only the containers are narrowed (first)
        ((), (1, 2, 9, 10), "static", [("container", "0,3,8,11"), ("pod", "0,3-8,11-15"), ("qos", "0,3-8,11-15")]),
    ],
)
def test_suppress_cpuset_never_gives_be_system_or_kubelet_pinned_cpus(system_qos, pinned, policy, expected):
    files = MemoryCgroupFiles({"cpuset.cpus": "0-15"})
    st = state(suppress_pods(), node=Resources(11000, 20 * GI), files=files)
    st.system_qos_cpus, st.kubelet_pinned_cpus, st.kubelet_cpu_policy = frozenset(system_qos), frozenset(pinned), policy
    suppressed = cpu_suppress.plan(st, slo())
    assert cpuset_writes(suppressed) == expected
    for w in suppressed:
        files.write(w.rel, w.resource, w.value)
    # suppress off: every narrowed BE dir back to the full BE cpuset, without them
    full = {(0, 8): "1-7,9-15", (1, 2, 9, 10): "0,3-8,11-15"}.get(system_qos or pinned, "0-15")
    restored = cpuset_writes(cpu_suppress.plan(st, NodeSLOSpec()))
    assert {v for _, v in restored} == {full} and {lvl for lvl, v in restored} == {lvl for lvl, v in expected if v != full}


def test_group_identity_on_host_application_dirs():
    spec = NodeSLOSpec()
    s = spec.resourceQOSStrategy
    s.lsClass.cpuQOS.enable = s.beClass.cpuQOS.enable = True
    st = state([])
    st.host_apps = [app("nginx", "LS", 0), app("hadoop", "BE", 0, "KubepodsBesteffort"), app("agent", "", 0),
                    app("db", "LSR", 0)]
    got = {w.rel: w.value for w in group_identity.plan(st, spec) if w.level == "host"}
    # by QoS: LS 2, BE -1, none 0, LSR 0 while lsrClass is disabled
    assert got == {"host/nginx": 2, "KubepodsBesteffort/hadoop": -1, "host/agent": 0, "host/db": 0}


@pytest.mark.parametrize(
    "usage_threshold,expected",
    [
        (None, 0),  # 1700 / 2000 = 85 % of the real limit: under the default 90 %
        (85, 4999),  # at cpuEvictBEUsageThresholdPercent 85 BE counts as starving: 10000 x (0.7 - 0.2)
        (86, 0),
    ],
)
def test_cpu_evict_be_usage_threshold(usage_threshold, expected):
    st = state([pstate(BE1, Resources(1000, GI))], node=Resources(9000, GI), history=be_hist(5, 1700, 2000, 10000))
    cfg = slo(**SAT, **({"cpuEvictBEUsageThresholdPercent": usage_threshold} if usage_threshold else {}))
    assert cpu_evict.release_milli(st, cfg) == expected


@pytest.mark.parametrize(
    "lower,window_s,expected",
    [
        (None, None, 1120),  # 75 % now, lower 70 - 2: 16000 x 7 / 100
        (60, None, 2400),  # cpuEvictLowerPercent 60: 16000 x 15 / 100
        # over cpuEvictTimeWindowSeconds 10 the average is (5 x 8000 + 6 x 12000) / 11 = 10181m: 63 % < 70
        (None, 10, 0),
    ],
)
def test_cpu_evict_by_node_usage_lower_and_window(lower, window_s, expected):
    h = [BESample(100_000 - i * 1000, 0, 16000, 0, 12000 if i <= 5 else 8000) for i in range(11)][::-1]
    st = state([], node=Resources(12000, 40 * GI), history=h)
    extra = {k: v for k, v in (("cpuEvictLowerPercent", lower), ("cpuEvictTimeWindowSeconds", window_s)) if v}
    cfg = slo(cpuEvictThresholdPercent=70, evictEnabledPriorityThreshold=5999, **extra).resourceUsedThresholdWithBE
    assert cpu_evict.usage_release(st, cfg)[1] == expected


@pytest.mark.parametrize(
    "annotation, value, named, expected",
    [
        # cpuBurst: the share pool threshold is the node's (Koordinator's CPUBurstConfig has no such field)
        ("koordinator.sh/cpuBurst", {"cpuBurstPercent": 200, "sharePoolThresholdPercent": 10},
         "sharePoolThresholdPercent", ("cpuBurstPercent", 200, "sharePoolThresholdPercent", 50)),
        ("koordinator.sh/cpuBurst", {"cpuBurstPercnt": 200}, "cpuBurstPercnt", ("cpuBurstPercent", 1000, "policy", "auto")),
        # memoryQOS: `enable` is the policy's to say; a misspelt field is named, the others apply
        ("koordinator.sh/memoryQOS", {"policy": "auto", "enable": False}, "enable", ("wmarkRatio", 95, "minLimitPercent", 0)),
        ("koordinator.sh/memoryQOS", {"policy": "auto", "minLimitPercnt": 50, "lowLimitPercent": 10}, "minLimitPercnt",
         ("minLimitPercent", 0, "lowLimitPercent", 10)),
    ],
)
def test_pod_annotations_name_the_fields_they_do_not_honour(caplog, annotation, value, named, expected):
    ps = pstate(info("web", qos="LS", cpu_req=100, mem_req=GI, mem_lim=2 * GI,
                     annotations={annotation: json.dumps(value)}))
    with caplog.at_level("WARNING", logger="koordcommon.annotations"):
        if annotation == "koordinator.sh/cpuBurst":
            cfg = cpu_burst.pod_config(ps, burst_slo(policy="auto").cpuBurstStrategy)
        else:
            cfg = memory_qos.class_config(ps, NodeSLOSpec())
    f1, v1, f2, v2 = expected
    assert (getattr(cfg, f1), getattr(cfg, f2)) == (v1, v2)
    said = [r.getMessage() for r in caplog.records if r.name == "koordcommon.annotations"]
    assert said and all(named in m and "not honoured" in m for m in said)
