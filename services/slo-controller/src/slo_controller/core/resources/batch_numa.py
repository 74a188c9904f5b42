"""BatchResource per NUMA zone: the node's batch formula run once per zone of its topology.

Koordinator's BatchResource plugin (calculateOnNUMALevel) treats each zone of the node's
NodeResourceTopology as a node of its own; there are no per-zone metrics, so the node-wide
terms are shared out:

* capacity = the zone's allocatable; safety margin from it, as the node's;
* nodeReserved and systemUsed (system usage + host applications above batch): ceil(x / zones);
* a pod's request and usage go to the NUMA nodes its `scheduling.koordinator.sh/resource-status`
  annotation lists (`numaNodeResources[].node`), ceil(x / k) to each of its k valid ones; a pod
  that lists none (or only ids the node has not) is spread over every zone;
* a HP pod without a metric counts by its request in podHPUsed and, unlike the node-level
  rule, in podHPMaxUsedRequest too; LSE pods count their cpu request, as at node level;
* a HP metric of no listed pod is spread over every zone;
* then `batch = max(capacity - margin - max(systemUsed, nodeReserved) - HP, 0)` by the node's
  policies and batch*ThresholdPercent caps (of the zone's capacity).

Divisions round up per term as Koordinator's DivideResourceList does (cpu in milli-cores;
memory in milli-bytes, so a share may hold a fraction of a byte); a zone's batch memory is
published in whole bytes, rounded up as Quantity.Value() rounds.
"""

from __future__ import annotations

from koordcommon import resources as rn

from ..config import ColocationStrategy
from ..snapshot import NodeSnapshot, PodLoad
from . import trunc_percent

SUFFIXES = (rn.BATCH_CPU_SUFFIX, rn.BATCH_MEMORY_SUFFIX)
Zone = tuple[str, int, int]  # (name, batch milli-cores, batch bytes)


def _ceil_div(x: int, n: int) -> int:
    return -((-x) // n)


def pod_zones(p: PodLoad, zones: int) -> tuple[int, ...]:
    """The zones a pod's request and usage go to (Koordinator's GetPodNUMARequestAndUsage)."""
    valid = [n for n in p.numa_nodes if 0 <= n < zones]
    return tuple(n for n in range(zones) if n in p.numa_nodes) if valid else tuple(range(zones))


def _share_count(p: PodLoad, zones: int) -> int:
    # each valid entry counts, a NUMA node listed twice included, as Koordinator counts them
    valid = sum(1 for n in p.numa_nodes if 0 <= n < zones)
    return valid or zones


def calculate_zones(snapshot: NodeSnapshot, strategy: ColocationStrategy) -> tuple[Zone, ...]:
    """Batch cpu / memory of each NUMA zone the node's NodeMetric reports; () without zones."""
    metric = snapshot.metric
    if metric is None or not metric.zones:
        return ()
    n = len(metric.zones)
    res_c, res_m = snapshot.node_reserved()
    sys_c = metric.system_usage[0] + metric.host_hp_usage[0]
    sys_m = metric.system_usage[1] + metric.host_hp_usage[1]
    # per zone, cpu in milli-cores and memory in milli-bytes
    req = [[0, 0] for _ in range(n)]
    used = [[0, 0] for _ in range(n)]
    mur = [[0, 0] for _ in range(n)]
    usage = metric.pods or {}
    listed = set()
    for p in snapshot.pods:
        listed.add(p.key)
        if not p.active or not p.hp:
            continue
        k = _share_count(p, n)
        rc, rm = _ceil_div(p.cpu_request, k), _ceil_div(p.memory_request * 1000, k)
        m = usage.get(p.key)
        if m is None:
            uc, um = rc, rm
        else:
            uc, um = _ceil_div(m[0], k), _ceil_div(m[1] * 1000, k)
        for z in pod_zones(p, n):
            req[z][0] += rc
            req[z][1] += rm
            # LSE pods do not lend CPU: their cpu counts by request
            used[z][0] += rc if (m is None or p.lse) else uc
            used[z][1] += um
            mur[z][0] += max(rc, uc)
            mur[z][1] += max(rm, um)
    for key, (uc, um, hp) in usage.items():
        if key in listed or not hp:
            continue
        uc, um = _ceil_div(uc, n), _ceil_div(um * 1000, n)
        for z in range(n):
            used[z][0] += uc
            used[z][1] += um
            mur[z][0] += uc
            mur[z][1] += um
    zone_res = (_ceil_div(res_c, n), _ceil_div(res_m * 1000, n))
    zone_sys = (_ceil_div(sys_c, n), _ceil_div(sys_m * 1000, n))
    out = []
    for z, (name, cap_c, cap_m) in enumerate(metric.zones):
        cpu = _batch(cap_c, strategy.cpuReclaimThresholdPercent, zone_res[0], zone_sys[0], req[z][0], used[z][0],
                     mur[z][0], _zone_policy(strategy.cpuCalculatePolicy, cpu=True),
                     strategy.batchCPUThresholdPercent, 1)
        mem = _batch(cap_m, strategy.memoryReclaimThresholdPercent, zone_res[1], zone_sys[1], req[z][1], used[z][1],
                     mur[z][1], _zone_policy(strategy.memoryCalculatePolicy, cpu=False), strategy.batchMemoryThresholdPercent,
                     1000)
        out.append((name, cpu, _ceil_div(mem, 1000)))
    return tuple(out)


def _zone_policy(policy: str, cpu: bool) -> str:
    """The policy a zone computes by. `predict` has no per-zone prediction (its N-sigma and the
    node agent's prod peak are per node): a zone takes max(usage, request), which is at least
    the node's prediction wherever the requests cover it, so zones lend no more than the node."""
    if policy in ("maxUsageRequest", "predict"):
        return "maxUsageRequest"
    return "usage" if cpu else policy


def _batch(cap: int, reclaim_pct: int, reserved: int, system: int, req: int, used: int, mur: int, policy: str,
           cap_pct: int | None, scale: int) -> int:
    """The node formula on one zone; `cap` in whole units, the other terms already x `scale`."""
    margin = trunc_percent(cap, 100 - reclaim_pct) * scale
    capacity = cap * scale
    if policy == "request":
        value = max(capacity - margin - reserved - req, 0)
    elif policy == "maxUsageRequest":
        value = max(capacity - margin - max(system, reserved) - mur, 0)
    else:
        value = max(capacity - margin - max(system, reserved) - used, 0)
    if cap_pct is not None:
        value = min(value, trunc_percent(cap, cap_pct) * scale)
    return value
