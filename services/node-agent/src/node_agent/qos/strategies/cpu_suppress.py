"""CPU suppress (koordlet qosmanager/plugins/cpusuppress): shrink what BE pods may use.

BE may use capacity x threshold% - non-BE pod usage - non-BE host-application usage
- max(system usage, reserved), and at least capacity x cpuSuppressMinPercent% when that is
set. System usage is node usage less every pod and host application; reserved is the larger
of capacity - allocatable and the node's reservation annotation. A host application counts
with BE only when its QoS is BE and it runs under the besteffort dir.

The cpuset policy turns that into a cpuset of at least 2 CPUs growing by at most ceil(10 % of
the CPUs) a round, never with CPUs bound to LSE pods, reserved by the node annotation, held
exclusively by SYSTEM-QoS pods or pinned by the kubelet's static CPU manager; under the static
policy the besteffort and pod dirs keep the full BE cpuset and only containers are narrowed.
The cfsQuota policy turns it into the besteffort dir's quota (at least 2000 us, changes under
1 % of capacity skipped, raised by at most 10 % of capacity a round).
"""

from __future__ import annotations

import math

from koordcommon.schemas import NodeSLOSpec, ResourceThresholdStrategy

from ...cpuorch import node_cpus
from ..model import CFS_PERIOD_US, CgroupWrite, QoSState
from .cpuset import format_cpuset, parse_cpuset, pick_cpus

NAME = "cpu_suppress"
BE_MIN_QUOTA = 2000
BE_MIN_CPUS = 2


def suppress_milli(state: QoSState, threshold_percent: int, min_percent: int | None = None,
                   record: dict | None = None) -> int:
    """BE milli-cpu allowed; `record` receives the formula's terms (explanations)."""
    cap = state.capacity.cpu_milli
    reserved = max(state.capacity.cpu_milli - state.allocatable.cpu_milli, state.annotation_reserved_cpu_milli, 0)
    pods_all = sum(p.usage.cpu_milli for p in state.pods if p.usage is not None)
    non_be = sum(
        p.usage.cpu_milli for p in state.pods if p.usage is not None and not p.is_be and not p.kube_best_effort
    )
    apps = [h for h in state.host_apps if h.usage is not None]
    apps_all = sum(h.usage.cpu_milli for h in apps)
    apps_non_be = sum(h.usage.cpu_milli for h in apps if not h.counts_as_be)
    node_used = state.node_usage.cpu_milli if state.node_usage is not None else pods_all + apps_all
    system = max(node_used - pods_all - apps_all, 0, reserved)
    suppress = cap * threshold_percent // 100 - non_be - apps_non_be - system
    if min_percent is not None:
        suppress = max(suppress, cap * min_percent // 100)
    if record is not None:
        record.update({"capacity": cap, "threshold_percent": threshold_percent, "non_be_pods": non_be,
                       "non_be_host_apps": apps_non_be, "system_or_reserved": system, "min_percent": min_percent,
                       "be_allowed": suppress})  # fmt: skip
    return suppress


def never_be(state: QoSState) -> set[int]:
    """CPUs BE never gets: reserved by the node annotation, exclusive SYSTEM-QoS, kubelet-pinned."""
    return set(state.reserved_cpus) | state.system_qos_cpus | state.kubelet_pinned_cpus


def full_be_cpuset(state: QoSState) -> list[int]:
    """Every CPU minus LSE-bound ones and those BE never gets (koordlet calcBECPUSet): the node's
    BE pool (koordcommon.cpus, the rule the runtime hooks and the scheduler use too)."""
    return node_cpus(state).be_pool()


def be_dirs(state: QoSState) -> list[tuple[int, str]]:
    """(depth, dir) of the besteffort QoS dir, BE pod dirs and their container dirs, top first."""
    out = [(0, state.be_dir)]
    for p in state.pods:
        if p.kube_best_effort:
            out.append((1, p.rel))
    for p in state.pods:
        if p.kube_best_effort:
            out += [(2, rel) for rel in p.containers.values()]
    return out


def _cpuset_writes(state: QoSState, new: list[int], depths: tuple[int, ...] = (0, 1, 2),
                   inputs: dict | None = None) -> list[CgroupWrite]:
    """Union top-down first, then the new set bottom-up, so no child is ever wider than its parent."""
    union, exact = _cpuset_steps(state, new, depths, inputs)
    return union + exact


_LEVELS = ("qos", "pod", "container")


def _cpuset_steps(state: QoSState, new: list[int], depths: tuple[int, ...], inputs: dict | None = None
                  ) -> tuple[list[CgroupWrite], list[CgroupWrite]]:
    """(the union of old and new, top-down; the new set, bottom-up) for the BE dirs at `depths`
    (0 the besteffort dir, 1 pods, 2 containers); `inputs`: what the writes explain themselves by."""
    writes = []
    new_s, new_set = format_cpuset(new), set(new)
    extra = {} if inputs is None else {"inputs": inputs}
    dirs = [(d, rel) for d, rel in be_dirs(state) if d in depths]
    stale = []  # the dirs not holding the new set yet
    unions: dict[str, str | None] = {}  # old text -> the union to widen to first (None: no widening)
    for depth, rel in dirs:
        old = state.read(rel, "cpuset.cpus") or ""
        if old == new_s:
            continue  # already the new set: nothing to widen or narrow
        stale.append((depth, rel))
        if old in unions:
            union_s = unions[old]
        else:
            union_s = None
            try:
                old_set = set(parse_cpuset(old))
            except ValueError:
                old_set = None  # unreadable: the exact write below sets it
            if old_set is not None:
                union = old_set | new_set
                if union != new_set and union != old_set:
                    union_s = format_cpuset(union)
            unions[old] = union_s
        if union_s is not None:
            writes.append(CgroupWrite(rel, "cpuset.cpus", union_s, NAME, _LEVELS[depth], **extra))
    exact = [CgroupWrite(rel, "cpuset.cpus", new_s, NAME, _LEVELS[depth], **extra) for depth, rel in reversed(stale)]
    return writes, exact


def _int(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        return default


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    cfg = slo.resourceUsedThresholdWithBE
    if not cfg.enable:
        return ([CgroupWrite(state.be_dir, "cpu.cfs_quota_us", -1, NAME, "qos")]
                + _cpuset_writes(state, full_be_cpuset(state)))  # fmt: skip
    inputs: dict = {}
    suppress = suppress_milli(state, cfg.cpuSuppressThresholdPercent, cfg.cpuSuppressMinPercent, inputs)
    return _suppress_writes(state, cfg, suppress, inputs)


def _suppress_writes(state: QoSState, cfg: ResourceThresholdStrategy, suppress: int, inputs: dict
                     ) -> list[CgroupWrite]:
    """The writes of the policy, each carrying `inputs`; the full BE cpuset is derived only
    where the policy writes it (cfsQuota, the static CPU manager's parents)."""
    cap_cores = state.capacity.cpu_milli // 1000
    if cfg.cpuSuppressPolicy == "cfsQuota":
        new = max(suppress * CFS_PERIOD_US // 1000, BE_MIN_QUOTA)
        cur = _int(state.read(state.be_dir, "cpu.cfs_quota_us"), -1)
        writes: list[CgroupWrite] = []
        min_delta = cap_cores * CFS_PERIOD_US * 0.01
        if not (abs(new - cur) < min_delta and new != BE_MIN_QUOTA):
            max_inc = int(cap_cores * CFS_PERIOD_US * 0.1)
            if new - cur > max_inc and cur != -1:
                new = cur + max_inc
            writes.append(CgroupWrite(state.be_dir, "cpu.cfs_quota_us", new, NAME, "qos", inputs))
        return writes + _cpuset_writes(state, full_be_cpuset(state), inputs=inputs)
    # cpuset policy
    old = parse_cpuset(state.read(state.be_dir, "cpuset.cpus") or "")
    owner: dict[int, str] = {}
    for p in state.pods:
        if p.info.cpuset:
            for c in parse_cpuset(p.info.cpuset):
                owner[c] = p.raw_qos.value
    excluded = never_be(state)
    free = [proc for proc in state.processors if proc.cpu not in excluded] if excluded else state.processors
    lsr = [proc for proc in free if owner.get(proc.cpu) == "LSR"] if owner else []
    ls = [proc for proc in free if owner.get(proc.cpu) not in ("LSR", "LSE")] if owner else free
    n = max(math.ceil(suppress / 1000), BE_MIN_CPUS)
    max_inc = math.ceil(len(state.processors) * 0.1)
    if n - len(old) > max_inc:
        n = len(old) + max_inc
    n_lsr = n * len(lsr) // (len(lsr) + len(ls)) if (lsr or ls) else 0
    chosen = pick_cpus(n_lsr, lsr, len(state.processors)) + pick_cpus(n - n_lsr, ls, len(state.processors))
    if not chosen:
        return []
    if state.kubelet_cpu_policy == "static":
        # the kubelet owns the pod-level cpusets: they keep the full BE set, only containers are narrowed
        # (parents widened first and narrowed last, so a container never holds a CPU its pod lacks)
        widen, narrow = _cpuset_steps(state, full_be_cpuset(state), (0, 1), inputs)
        writes = widen + _cpuset_writes(state, chosen, (2,), inputs) + narrow
    else:
        writes = _cpuset_writes(state, chosen, inputs=inputs)
    return writes + [CgroupWrite(state.be_dir, "cpu.cfs_quota_us", -1, NAME, "qos", inputs)]
