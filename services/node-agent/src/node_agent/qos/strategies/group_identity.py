"""Group identity (koordlet runtimehooks/hooks/groupidentity): cpu.bvt_warp_ns per QoS.

LSE/LSR/LS 2 and BE -1 when their class is enabled, 0 otherwise; written on the three
kube-QoS dirs (the Guaranteed root always 0), on every pod dir and on every host
application's dir (by its QoS; none or SYSTEM: 0), never per container.
"""

from __future__ import annotations

import json

from koordcommon.model import KubeQoS, QoSClass
from koordcommon.schemas import NodeSLOSpec

from ..model import CgroupWrite, PodState, QoSState

NAME = "group_identity"
RESOURCE = "cpu.bvt_warp_ns"
ANNOTATION = "koordinator.sh/cpuQOS"


def rule(slo: NodeSLOSpec) -> tuple[bool, dict[QoSClass, int], dict[KubeQoS, int], dict[KubeQoS, int]]:
    s = slo.resourceQOSStrategy
    policy = s.policies.get("cpuPolicy") or "groupIdentity"
    if policy != "groupIdentity":
        return False, {}, {}, {}

    def value(cls) -> int:
        q = cls.cpuQOS
        return (q.groupIdentity or 0) if q.enable else 0

    lsr, ls, be = value(s.lsrClass), value(s.lsClass), value(s.beClass)
    enabled = s.lsrClass.cpuQOS.enable or s.lsClass.cpuQOS.enable or s.beClass.cpuQOS.enable
    pod_params = {QoSClass.LSE: lsr, QoSClass.LSR: lsr, QoSClass.LS: ls, QoSClass.BE: be}
    dirs = {KubeQoS.GUARANTEED: 0, KubeQoS.BURSTABLE: ls, KubeQoS.BEST_EFFORT: be}
    guaranteed_pod = lsr if s.lsrClass.cpuQOS.enable else (ls if s.lsClass.cpuQOS.enable else 0)
    kube_pod = {KubeQoS.GUARANTEED: guaranteed_pod, KubeQoS.BURSTABLE: ls, KubeQoS.BEST_EFFORT: be}
    return enabled, pod_params, dirs, kube_pod


def pod_value(p: PodState, pod_params, kube_pod) -> int:
    q = p.raw_qos
    value = pod_params.get(q) if q in pod_params else kube_pod.get(p.info.kube_qos, 0)
    if q is QoSClass.LS:
        raw = p.info.annotation(ANNOTATION)
        if raw:
            try:
                cfg = json.loads(raw)
                value = int(cfg.get("groupIdentity", 0)) if cfg.get("enable") else 0
            except (ValueError, TypeError, AttributeError):
                pass
            value = max(-1, min(2, value))
    return value


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    enabled, pod_params, dirs, kube_pod = rule(slo)
    if not enabled:
        return []
    writes = [CgroupWrite(state.qos_dirs[k], RESOURCE, v, NAME, "qos") for k, v in dirs.items()]
    writes += [CgroupWrite(p.rel, RESOURCE, pod_value(p, pod_params, kube_pod), NAME, "pod") for p in state.pods]
    writes += [CgroupWrite(h.rel, RESOURCE, pod_params.get(h.qos, 0), NAME, "host") for h in state.host_apps]
    return writes
