"""Memory QoS (koordlet qosmanager/plugins/cgreconcile): memory.min/low/high, watermarks, OOM priority.

Per class (LSE/LSR -> lsrClass, LS -> lsClass, BE -> beClass, SYSTEM -> systemClass, no label ->
from the k8s QoS); a disabled LSR/LS/BE class counts as "none" (all 0, wmarkScalePermill 50),
systemClass is used as it is. The pod annotation `koordinator.sh/memoryQOS`
(`{"policy": "auto" | "none" | "default", <any memoryQOS field>}`) then applies: `none` turns
memory QoS off for the pod, `auto` starts from Koordinator's default template of its class
(even on a node that disables it), and the fields it names override the result.

Container: min = request x minLimitPercent%, low = request x lowLimitPercent% (at least min),
high = floor((request + (limit - request) x throttlingPercent%) / 4096) x 4096 (the node's
allocatable stands in for a missing limit; unlimited when throttlingPercent is 0; at least
min). Pod: min and low of its request, the page cache limit (pageCacheLimitSize, capped by the
limit, or pageCacheLimitPercent of the limit; pageCacheEnable overrides the switch), no high.
Container and pod: wmark_ratio, wmark_scale_factor, wmark_min_adj, memory.priority,
memory.use_priority_oom, memory.oom.group as configured. QoS dirs: the sums of their pods'
min and low (the Guaranteed root the sum of all), and priority, use_priority_oom and
oom.group of lsrClass / lsClass / beClass for the Guaranteed / Burstable / BestEffort dir.
Files the kernel lacks are skipped by the executor.

Nothing is written unless a class is enabled or a pod carries the annotation (then only
such pods and the QoS dirs are written).
"""

from __future__ import annotations

from typing import Any

from koordcommon.cpus import json_annotation
from koordcommon.model import KubeQoS, QoSClass
from koordcommon.schemas import MemoryQOS, NodeSLOSpec, ResourceQOS

from ..model import MAX_INT64, CgroupWrite, PodState, QoSState

NAME = "memory_qos"
ANNOTATION = "koordinator.sh/memoryQOS"
PAGE = 4096
NONE = MemoryQOS(wmarkScalePermill=50)
# Koordinator's default template per class (what policy "auto" starts from)
_TEMPLATE = {"wmarkRatio": 95, "wmarkScalePermill": 20}
AUTO = {
    QoSClass.LSR: MemoryQOS(enable=True, wmarkMinAdj=-25, **_TEMPLATE),
    QoSClass.LS: MemoryQOS(enable=True, wmarkMinAdj=-25, **_TEMPLATE),
    QoSClass.BE: MemoryQOS(enable=True, wmarkMinAdj=50, **_TEMPLATE),
    QoSClass.SYSTEM: MemoryQOS(enable=True, wmarkScalePermill=50),
}
_KUBE_CLASS = {KubeQoS.GUARANTEED: QoSClass.LSR, KubeQoS.BURSTABLE: QoSClass.LS, KubeQoS.BEST_EFFORT: QoSClass.BE}


def pod_class(p: PodState) -> QoSClass:
    """LSE counts as LSR; a pod without a label takes the class of its k8s QoS."""
    q = p.info.qos if p.info.qos is not QoSClass.NONE else _KUBE_CLASS[p.info.kube_qos]
    return QoSClass.LSR if q is QoSClass.LSE else q


def _section(slo: NodeSLOSpec, cls: QoSClass) -> ResourceQOS:
    s = slo.resourceQOSStrategy
    return {QoSClass.LSR: s.lsrClass, QoSClass.LS: s.lsClass, QoSClass.BE: s.beClass,
            QoSClass.SYSTEM: s.systemClass}[cls]


def node_config(slo: NodeSLOSpec, cls: QoSClass) -> MemoryQOS:
    cfg = _section(slo, cls).memoryQOS
    if cls is not QoSClass.SYSTEM and not cfg.enable:
        return NONE
    return cfg


# Koordinator's PodMemoryQOSConfig: the policy and the memoryQOS fields (not `enable`: the policy says
# that); any other field is named in a warning.
POD_FIELDS = {"policy": None, **{k: None for k in MemoryQOS.model_fields if k != "enable"}}


def annotation(p: PodState) -> dict[str, Any] | None:
    """The pod's annotation as a JSON object; ignored when it does not parse."""
    raw = p.info.annotation(ANNOTATION)
    return json_annotation({ANNOTATION: raw}, ANNOTATION, POD_FIELDS) if raw else None


def class_config(p: PodState, slo: NodeSLOSpec) -> MemoryQOS:
    """The pod's memory QoS: its class's node config, then its annotation."""
    cls = pod_class(p)
    cfg = node_config(slo, cls)
    pod = annotation(p)
    if pod is None:
        return cfg
    policy = pod.get("policy") or "default"
    if policy == "none":
        return NONE
    if policy == "auto":
        cfg = AUTO[cls]
    fields = {k: v for k, v in pod.items() if k in MemoryQOS.model_fields and k != "enable"}
    try:
        return MemoryQOS.model_validate({**cfg.model_dump(), **fields})
    except ValueError:
        return cfg


def values(req: int, limit: int, cfg: MemoryQOS, node_allocatable: int) -> dict[str, int]:
    req = max(req, 0)
    mn = req * cfg.minLimitPercent // 100
    low = req * cfg.lowLimitPercent // 100
    if 0 < low < mn:
        low = mn
    if cfg.throttlingPercent == 0:
        high = MAX_INT64
    else:
        top = limit if limit > 0 else node_allocatable
        high = (req + (top - req) * cfg.throttlingPercent // 100) // PAGE * PAGE
        if 0 < high < mn:
            high = mn
    return {"memory.min": mn, "memory.low": low, "memory.high": high}


def oom(cfg: MemoryQOS) -> dict[str, int]:
    return {"memory.priority": cfg.priority, "memory.use_priority_oom": cfg.priorityEnable,
            "memory.oom.group": cfg.oomKillGroup}


def static(cfg: MemoryQOS) -> dict[str, int]:
    return {"memory.wmark_ratio": cfg.wmarkRatio, "memory.wmark_scale_factor": cfg.wmarkScalePermill,
            "memory.wmark_min_adj": cfg.wmarkMinAdj, **oom(cfg)}


def page_cache(limit: int, cfg: MemoryQOS) -> dict[str, int]:
    """memory.pagecache_limit.{enable,size,sync} of a pod whose memory limit is `limit` (-1: none)."""
    out: dict[str, int] = {}
    size = None
    if cfg.pageCacheLimitSize is not None:
        size = min(cfg.pageCacheLimitSize, limit) if limit > 0 else cfg.pageCacheLimitSize
    elif cfg.pageCacheLimitPercent is not None and limit > 0:
        size = limit * cfg.pageCacheLimitPercent // 100
    if size is not None:
        if size > 0:
            out = {"memory.pagecache_limit.enable": 1, "memory.pagecache_limit.size": size,
                   "memory.pagecache_limit.sync": 1 if cfg.pageCacheReclaimSync else 0}
        else:
            out = {"memory.pagecache_limit.enable": 0, "memory.pagecache_limit.size": 0}
    if cfg.pageCacheEnable is not None:
        out["memory.pagecache_limit.enable"] = 1 if cfg.pageCacheEnable else 0
    return out


def _request(p: PodState, c) -> tuple[int, int]:
    if p.raw_qos is QoSClass.BE:
        return c.batch_requests.memory_bytes, c.batch_limits.memory_bytes
    return c.requests.memory_bytes, c.limits.memory_bytes


def _pod_request(p: PodState) -> int:
    if p.raw_qos is QoSClass.BE:
        return sum(max(c.batch_requests.memory_bytes, 0) for c in p.info.containers)
    return p.info.requests.memory_bytes


def _pod_limit(p: PodState) -> int:
    """The pod's memory limit, -1 for none: a BE pod's batch-memory limits (none when a container has
    none), else the pod's memory limit (the sum of the limits that are set)."""
    if p.raw_qos is QoSClass.BE:
        limits = [c.batch_limits.memory_bytes for c in p.info.containers]
        return sum(limits) if limits and all(v > 0 for v in limits) else -1
    return p.info.limits.memory_bytes if p.info.limits.memory_bytes > 0 else -1


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    s = slo.resourceQOSStrategy
    node_on = any(c.memoryQOS.enable for c in (s.lsrClass, s.lsClass, s.beClass, s.systemClass))
    pods = [p for p in state.pods if p.info.phase in ("Pending", "Running")]
    if not node_on:
        pods = [p for p in pods if annotation(p) is not None]
        if not pods:
            return []
    exact: list[CgroupWrite] = []  # bottom-up order: containers, pods, qos dirs
    sums = {k: {"memory.min": 0, "memory.low": 0} for k in KubeQoS}
    alloc = state.node_allocatable_memory or state.allocatable.memory_bytes
    pod_writes = []
    for p in pods:
        cfg = class_config(p, slo)
        for c in p.info.containers:
            rel = p.containers.get(c.name)
            if rel is None:
                continue
            req, limit = _request(p, c)
            for res, v in {**values(req, limit, cfg, alloc), **static(cfg)}.items():
                exact.append(CgroupWrite(rel, res, v, NAME, "container"))
        pv = values(_pod_request(p), 0, cfg, alloc)
        for res, v in {"memory.min": pv["memory.min"], "memory.low": pv["memory.low"], **static(cfg),
                       **page_cache(_pod_limit(p), cfg)}.items():
            pod_writes.append(CgroupWrite(p.rel, res, v, NAME, "pod"))
        for r in ("memory.min", "memory.low"):
            sums[p.info.kube_qos][r] += pv[r]
    exact += pod_writes
    for kq in (KubeQoS.BURSTABLE, KubeQoS.BEST_EFFORT):
        cfg = node_config(slo, _KUBE_CLASS[kq])
        exact += [CgroupWrite(state.qos_dirs[kq], r, v, NAME, "qos") for r, v in {**sums[kq], **oom(cfg)}.items()]
    root = {r: sum(sums[k][r] for k in KubeQoS) for r in ("memory.min", "memory.low")}
    root |= oom(node_config(slo, QoSClass.LSR))
    exact += [CgroupWrite(state.qos_dirs[KubeQoS.GUARANTEED], r, v, NAME, "qos") for r, v in root.items()]
    # leveled update: first raise every protection top-down (a child may not exceed its parent),
    # then write the exact values bottom-up
    raise_first = []
    for w in reversed(exact):
        if w.resource in ("memory.min", "memory.low", "memory.high"):
            cur = _int(state.read(w.rel, w.resource))
            if cur is not None and int(w.value) > cur:
                raise_first.append(w)
    return raise_first + exact


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return MAX_INT64
    try:
        return int(text)
    except ValueError:
        return None
