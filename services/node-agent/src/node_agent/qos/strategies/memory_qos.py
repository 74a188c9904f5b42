"""Memory QoS (koordlet qosmanager/plugins/cgreconcile): memory.min/low/high and watermarks.

Per class (LSE/LSR -> lsrClass, LS -> lsClass, BE -> beClass, no label -> from the k8s QoS):
min = request x minLimitPercent%, low = request x lowLimitPercent% (at least min),
high = floor((request + (limit - request) x throttlingPercent%) / 4096) x 4096, unlimited
when throttlingPercent is 0. QoS dirs hold the sums of their pods' min/low. Untouched unless
a class is enabled.
"""

from __future__ import annotations

from koordcommon.model import KubeQoS, QoSClass
from koordcommon.schemas import MemoryQOS, NodeSLOSpec

from ..model import MAX_INT64, CgroupWrite, PodState, QoSState

NAME = "memory_qos"
PAGE = 4096
NONE = MemoryQOS(wmarkScalePermill=50)


def class_config(p: PodState, slo: NodeSLOSpec) -> MemoryQOS:
    s = slo.resourceQOSStrategy
    q = p.info.qos if p.info.qos is not QoSClass.NONE else None
    by_qos = {QoSClass.LSE: s.lsrClass, QoSClass.LSR: s.lsrClass, QoSClass.LS: s.lsClass, QoSClass.BE: s.beClass,
              QoSClass.SYSTEM: s.systemClass}
    by_kube = {KubeQoS.GUARANTEED: s.lsrClass, KubeQoS.BURSTABLE: s.lsClass, KubeQoS.BEST_EFFORT: s.beClass}
    cls = by_qos.get(q) if q is not None else by_kube[p.info.kube_qos]
    cfg = cls.memoryQOS
    return cfg if cfg.enable else NONE


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


def _request(p: PodState, c) -> tuple[int, int]:
    if p.raw_qos is QoSClass.BE:
        return c.batch_requests.memory_bytes, c.batch_limits.memory_bytes
    return c.requests.memory_bytes, c.limits.memory_bytes


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    s = slo.resourceQOSStrategy
    if not any(c.memoryQOS.enable for c in (s.lsrClass, s.lsClass, s.beClass, s.systemClass)):
        return []
    exact: list[CgroupWrite] = []  # bottom-up order: containers, pods, qos dirs
    sums = {k: {"memory.min": 0, "memory.low": 0} for k in KubeQoS}
    alloc = state.node_allocatable_memory or state.allocatable.memory_bytes
    pod_writes = []
    for p in state.pods:
        cfg = class_config(p, slo)
        pod_req = 0
        for c in p.info.containers:
            req, limit = _request(p, c)
            pod_req += max(req, 0)
            rel = p.containers.get(c.name)
            if rel is None:
                continue
            for res, v in values(req, limit, cfg, alloc).items():
                exact.append(CgroupWrite(rel, res, v, NAME, "container"))
            exact += _wmark(rel, cfg, "container")
        pv = values(pod_req, 0, cfg, alloc)
        pod_writes += [CgroupWrite(p.rel, r, pv[r], NAME, "pod") for r in ("memory.min", "memory.low")]
        pod_writes += _wmark(p.rel, cfg, "pod")
        for r in ("memory.min", "memory.low"):
            sums[p.info.kube_qos][r] += pv[r]
    exact += pod_writes
    for kq in (KubeQoS.BURSTABLE, KubeQoS.BEST_EFFORT):
        exact += [CgroupWrite(state.qos_dirs[kq], r, v, NAME, "qos") for r, v in sums[kq].items()]
    root = {r: sum(sums[k][r] for k in KubeQoS) for r in ("memory.min", "memory.low")}
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


def _wmark(rel: str, cfg: MemoryQOS, level: str) -> list[CgroupWrite]:
    return [
        CgroupWrite(rel, "memory.wmark_ratio", cfg.wmarkRatio, NAME, level),
        CgroupWrite(rel, "memory.wmark_scale_factor", cfg.wmarkScalePermill, NAME, level),
        CgroupWrite(rel, "memory.wmark_min_adj", cfg.wmarkMinAdj, NAME, level),
    ]


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
