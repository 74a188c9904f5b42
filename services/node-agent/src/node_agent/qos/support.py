"""Which NodeSLO settings this agent cannot honour: each named, so none is silently ignored.

Every field of Koordinator's NodeSLO spec parses (koordcommon.schemas). The agent honours
resourceUsedThresholdWithBE, cpuBurstStrategy, the cpuQOS / memoryQOS of each class under
resourceQOSStrategy and hostApplications. `not_supported(spec)` names, for one NodeSLO, each
setting that asks for something the agent does not do (a QoS it does not implement, a sysctl,
an unknown policy) and each configuration a rule refuses (the rule is then off), as koordlet
would have refused it. A setting at its "off" value is not reported.
"""

from __future__ import annotations

from koordcommon.model import QoSClass, parse_qos_class
from koordcommon.schemas import NodeSLOSpec

from .nodeinfo import BASES, host_app_dir
from .strategies import cpu_burst, cpu_evict, memory_evict

CLASSES = ("lsrClass", "lsClass", "beClass", "systemClass")
CPU_POLICIES = ("groupIdentity", "coreSched")
SUPPRESS_POLICIES = ("cpuset", "cfsQuota")
EVICT_POLICIES = ("evictByRealLimit", "evictByAllocatable")


def _enabled(section) -> bool:
    return isinstance(section, dict) and section.get("enable") is True


def not_supported(spec: NodeSLOSpec) -> list[str]:
    out: list[str] = []
    t = spec.resourceUsedThresholdWithBE
    if t.cpuSuppressPolicy not in SUPPRESS_POLICIES:
        out.append(f"resourceUsedThresholdWithBE.cpuSuppressPolicy {t.cpuSuppressPolicy!r} is not a known policy: "
                   "cpuset is used")
    if t.cpuEvictPolicy not in EVICT_POLICIES:
        out.append(f"resourceUsedThresholdWithBE.cpuEvictPolicy {t.cpuEvictPolicy!r} is not a known policy: "
                   "evictByRealLimit is used")
    refused = [("BECPUEvict", cpu_evict.satisfaction_problem(t)), ("CPUEvict", cpu_evict.usage_problem(t)),
               ("CPUAllocatableEvict", cpu_evict.cpu_allocatable_problem(t)),
               ("BEMemoryEvict", memory_evict.threshold_problem(t)),
               ("MemoryAllocatableEvict", memory_evict.memory_allocatable_problem(t))]
    out += [f"resourceUsedThresholdWithBE: {rule} is off: {why}" for rule, why in refused if why]

    b = spec.cpuBurstStrategy
    if b.policy not in cpu_burst.POLICIES:
        out.append(f"cpuBurstStrategy.policy {b.policy!r} is not a known policy: treated as none")

    q = spec.resourceQOSStrategy
    cpu_policy = q.policies.get("cpuPolicy") or "groupIdentity"
    if cpu_policy == "coreSched":
        out.append("resourceQOSStrategy.policies.cpuPolicy coreSched (core scheduling, cpu.idle) is not supported: "
                   "no CPU QoS is applied")
    elif cpu_policy not in CPU_POLICIES:
        out.append(f"resourceQOSStrategy.policies.cpuPolicy {cpu_policy!r} is not a known policy: no CPU QoS is applied")
    for name in CLASSES:
        section = getattr(q, name)
        for field, what in (("blkioQOS", "block IO QoS"), ("resctrlQOS", "LLC / memory bandwidth (resctrl) QoS"),
                            ("networkQOS", "network QoS")):
            if _enabled(getattr(section, field)):
                out.append(f"resourceQOSStrategy.{name}.{field} ({what}) is not supported")
    if q.cgroupRoot is not None and any(_enabled(getattr(q.cgroupRoot, f)) for f in ("blkioQOS", "resctrlQOS",
                                                                                     "networkQOS")):
        out.append("resourceQOSStrategy.cgroupRoot (root cgroup block IO / resctrl / network QoS) is not supported")

    if spec.systemStrategy is not None:
        for field, value in spec.systemStrategy.model_dump().items():
            unset = not value if field in ("schedFeatures", "totalNetworkBandwidth") else value is None
            if not unset and value != "0":
                out.append(f"systemStrategy.{field} (a node-wide kernel setting) is not supported")

    for i, app in enumerate(spec.hostApplications):
        where = f"hostApplications[{i}]"
        if not app.name:
            out.append(f"{where}: no name: not collected nor counted")
        if app.qos and parse_qos_class(app.qos) is QoSClass.NONE:
            out.append(f"{where}.qos {app.qos!r} is not a QoS class: counted as none")
        if app.cgroupPath is not None and app.cgroupPath.base not in BASES:
            out.append(f"{where}.cgroupPath.base {app.cgroupPath.base!r} is not a known base: not collected")
        elif app.name and host_app_dir(app, lambda kube_qos: "kubepods") is None:
            out.append(f"{where}: its cgroup dir leaves its base: not collected")
        if app.strategy:
            out.append(f"{where}.strategy is not supported")
    if spec.extensions:
        out.append("extensions (" + ", ".join(sorted(spec.extensions)) + ") are not supported")
    return out
