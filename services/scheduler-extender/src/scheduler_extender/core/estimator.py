"""How much a pod will use once it runs: Koordinator's defaultEstimator, plus a profile-aware one.

Default: per resource, `min(round(max(limit, request) x factor / 100), limit)` with
estimatedScalingFactors cpu 85 %, memory 70 %; a pod that asks nothing counts as 250m / 200Mi.
The resource looked at follows the pod's priority class (batch pods ask `batch-cpu`, mid pods
`mid-cpu`), so a batch pod with `koordinator.sh/batch-cpu: 4000` estimates 3400 milli-cores.

Per pod (Koordinator's `allowCustomizeEstimation`): the annotation
`scheduling.koordinator.sh/load-estimated-scaling-factors` (JSON `{"cpu": 100}`) overrides the
factors it names; the others come from the arguments. Without the setting it is ignored.

Profile-aware: when the recommender published a usage profile for the pod's workload and it
covers every container, the estimate is the profile's percentile (capped at the limit);
otherwise it falls back to the default per resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from koordcommon import resources as rn
from koordcommon.cpus import json_annotation
from koordcommon.model import PriorityClass
from koordcommon.records import PodRecord, ResourceList
from koordcommon.resources import Resources

DEFAULT_CPU_MILLI = 250
DEFAULT_MEMORY_BYTES = 200 * 1024 * 1024


ANNOTATION_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"


@dataclass(frozen=True, slots=True)
class EstimatorArgs:
    cpu_factor: int = 85  # percent
    memory_factor: int = 70
    allow_customize: bool = False  # allowCustomizeEstimation: pod annotations may override


def _annotation_json(pod: PodRecord, key: str) -> dict | None:
    # factors of resources other than cpu and memory are named in a warning
    return json_annotation(pod.annotations, key, {"cpu": None, "memory": None})


def pod_args(pod: PodRecord, args: EstimatorArgs) -> EstimatorArgs:
    """The factors for `pod`: its scaling-factors annotation over the arguments, when allowed."""
    if not args.allow_customize:
        return args
    custom = _annotation_json(pod, ANNOTATION_SCALING_FACTORS)
    if not custom:
        return args

    def factor(key: str, default: int) -> int:
        v = custom.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else default

    return replace(args, cpu_factor=factor("cpu", args.cpu_factor), memory_factor=factor("memory", args.memory_factor))


def _round_percent(value: int, percent: int) -> int:
    """round(value x percent / 100), halves away from zero (Go's math.Round), in exact integers."""
    return (value * percent * 2 + 100) // 200


def _tier_value(lst: ResourceList, suffix: str) -> int:
    """A batch/mid resource under whichever accepted prefix the pod uses."""
    for prefix in rn.ACCEPTED_PREFIXES:
        v = lst.get(prefix + suffix)
        if v:
            return v
    return 0


def _estimate_one(requests: ResourceList, limits: ResourceList, kind: str, cls: PriorityClass, factor: int) -> int:
    """One resource (kind `cpu` or `memory`) of Koordinator's EstimatePod."""
    if cls is PriorityClass.BATCH:
        suffix = rn.BATCH_CPU_SUFFIX if kind == rn.CPU else rn.BATCH_MEMORY_SUFFIX
        request, limit = _tier_value(requests, suffix), _tier_value(limits, suffix)
        default = DEFAULT_CPU_MILLI if kind == rn.CPU else DEFAULT_MEMORY_BYTES
    elif cls is PriorityClass.MID:
        suffix = rn.MID_CPU_SUFFIX if kind == rn.CPU else rn.MID_MEMORY_SUFFIX
        request, limit = _tier_value(requests, suffix), _tier_value(limits, suffix)
        default = 0  # Koordinator quirk kept: mid pods without mid resources estimate 0
    else:
        request, limit = requests.get(kind, 0), limits.get(kind, 0)
        default = DEFAULT_CPU_MILLI if kind == rn.CPU else DEFAULT_MEMORY_BYTES
    q = max(limit, request)
    if q == 0:
        return default
    est = _round_percent(q, factor)
    return min(est, limit) if limit > 0 else est


def estimate_pod(pod: PodRecord, args: EstimatorArgs = EstimatorArgs()) -> Resources:
    return estimate_requests(pod.requests(), pod.limits(), pod.priority_class, pod_args(pod, args))


def estimate_requests(
    requests: ResourceList, limits: ResourceList, cls: PriorityClass, args: EstimatorArgs = EstimatorArgs()
) -> Resources:
    """EstimatePod on a pod's summed requests and limits and its priority class."""
    return Resources(
        _estimate_one(requests, limits, rn.CPU, cls, args.cpu_factor),
        _estimate_one(requests, limits, rn.MEMORY, cls, args.memory_factor),
    )


# --------------------------------------------------------------------------- profile-aware


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """Per-container usage of one workload at the percentile the scheduler plans for."""

    containers: dict[str, Resources] = field(default_factory=dict)


def estimate_pod_with_profile(
    pod: PodRecord, profile: WorkloadProfile | None, args: EstimatorArgs = EstimatorArgs()
) -> Resources:
    """The profile's usage capped at the pod's limit; the default estimate where it has no data.

    A profile that does not cover every container of the pod (a new sidecar, a renamed
    container) is not trusted for that pod at all.
    """
    default = estimate_pod(pod, args)
    if profile is None or not pod.containers:
        return default
    parts = [profile.containers.get(c.name) for c in pod.containers]
    if any(p is None for p in parts):
        return default
    cpu = sum(p.cpu_milli for p in parts)
    mem = sum(p.memory_bytes for p in parts)
    limits = pod.limits()
    cls = pod.priority_class
    if cls is PriorityClass.BATCH:
        cpu_limit, mem_limit = _tier_value(limits, rn.BATCH_CPU_SUFFIX), _tier_value(limits, rn.BATCH_MEMORY_SUFFIX)
    elif cls is PriorityClass.MID:
        cpu_limit, mem_limit = _tier_value(limits, rn.MID_CPU_SUFFIX), _tier_value(limits, rn.MID_MEMORY_SUFFIX)
    else:
        cpu_limit, mem_limit = limits.get(rn.CPU, 0), limits.get(rn.MEMORY, 0)
    cpu = default.cpu_milli if cpu <= 0 else (min(cpu, cpu_limit) if cpu_limit > 0 else cpu)
    mem = default.memory_bytes if mem <= 0 else (min(mem, mem_limit) if mem_limit > 0 else mem)
    return Resources(cpu, mem)


def profile_from_recommendation(
    containers: list, percentile: str = "p95", window_s: int = 86400
) -> WorkloadProfile | None:
    """Pick one percentile of each container's usage profile (schemas.ContainerRecommendation).

    The window closest to `window_s` that has the percentile wins; a container without any
    usable window makes the whole profile unusable (None).
    """
    out: dict[str, Resources] = {}
    for c in containers:
        best = None
        for prof in sorted(c.profiles, key=lambda p: abs(p.window_s - window_s)):
            value = getattr(prof, percentile, None)
            if value is not None:
                best = value
                break
        if best is None:
            return None
        out[c.container] = best
    return WorkloadProfile(out) if out else None
