"""ClusterColocationProfile: which pods a profile matches and how it mutates them.

Koordinator's pkg/webhook/pod/mutating/cluster_colocation_profile.go: matching profiles apply
in name order (labels, annotations, key mappings, label suffixes, schedulerName, qosClass,
priorityClassName, koordinatorPriority, patch); then a batch or mid pod's cpu/memory requests
and limits are rewritten to the tier's extended resources. The result is a JSON Patch.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordcommon import resources as rn
from koordcommon.kube_codec import pod_from_k8s
from koordcommon.model import LABEL_PRIORITY, LABEL_QOS_CLASS, PriorityClass, QoSClass
from koordcommon.quantity import QuantityError, format_quantity, parse_json_quantity
from koordcommon.selectors import LabelSelector, SelectorError, parse_selector
from koordcommon.suggest import closest

from .patching import json_patch, strategic_merge

ANNOTATION_SKIP_UPDATE_RESOURCES = "config.koordinator.sh/skip-update-resources"
# Koordinator's profile controller also applies a profile so labelled to pods already created;
# here profiles apply when a pod is admitted only, so the label is reported as not supported.
LABEL_CONTROLLER_MANAGED = "config.koordinator.sh/controller-managed"
ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"
QOS_NAMES = tuple(q.value for q in QoSClass if q is not QoSClass.NONE)
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
# Every field of Koordinator's ClusterColocationProfileSpec; a spec field outside it refuses the profile.
SPEC_FIELDS = ("namespaceSelector", "selector", "probability", "qosClass", "priorityClassName", "koordinatorPriority",
               "labels", "annotations", "labelKeysMapping", "annotationKeysMapping", "labelSuffixes", "schedulerName",
               "patch")


class ProfileError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class PriorityClassInfo:
    name: str
    value: int
    preemption_policy: str = PREEMPT_LOWER_PRIORITY


# Koordinator's shipped PriorityClasses (config/manager/koord-*.yaml after the kustomize prefix).
BUILTIN_PRIORITY_CLASSES: dict[str, PriorityClassInfo] = {
    "koord-prod": PriorityClassInfo("koord-prod", 9000),
    "koord-mid": PriorityClassInfo("koord-mid", 7000),
    "koord-batch": PriorityClassInfo("koord-batch", 5000),
    "koord-free": PriorityClassInfo("koord-free", 3000),
}


def parse_priority_class(obj: Any) -> PriorityClassInfo:
    """A scheduling.k8s.io/v1 PriorityClass object (or {name, value, preemptionPolicy})."""
    if not isinstance(obj, Mapping):
        raise ProfileError("priority class must be an object")
    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), Mapping) else obj.get("name")
    value = obj.get("value")
    if not isinstance(name, str) or not name:
        raise ProfileError("priority class needs a name")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError(f"priority class {name}: value must be an integer")
    policy = obj.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    if policy not in (PREEMPT_LOWER_PRIORITY, "Never"):
        raise ProfileError(f"priority class {name}: preemptionPolicy must be PreemptLowerPriority or Never")
    return PriorityClassInfo(name, value, policy)


def _str_map(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, Mapping) or not all(isinstance(x, str) for x in v.values()):
        raise ProfileError(f"{where}: must be a map of strings")
    return {str(k): x for k, x in v.items()}


def parse_probability(v: Any, where: str) -> int:
    """IntOrString: 50 or "50%"; default 100."""
    if v is None:
        return 100
    if isinstance(v, bool):
        raise ProfileError(f"{where}: must be an integer or a percent string")
    if isinstance(v, int):
        pct = v
    elif isinstance(v, str) and v.endswith("%") and v[:-1].strip().isdigit():
        pct = int(v[:-1])
    elif isinstance(v, str) and v.strip().isdigit():
        pct = int(v)
    else:
        raise ProfileError(f"{where}: {v!r} is not an integer or a percent like \"50%\"")
    if not 0 <= pct <= 100:
        raise ProfileError(f"{where}: must be within 0..100, got {pct}")
    return pct


@dataclass(frozen=True)
class ColocationProfile:
    name: str
    namespace_selector: LabelSelector | None = None
    selector: LabelSelector | None = None
    probability: int = 100
    qos_class: str | None = None
    priority_class_name: str | None = None
    koordinator_priority: int | None = None
    scheduler_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    label_keys_mapping: dict[str, str] = field(default_factory=dict)
    annotation_keys_mapping: dict[str, str] = field(default_factory=dict)
    label_suffixes: dict[str, str] = field(default_factory=dict)
    patch: dict[str, Any] | None = None
    skip_update_resources: bool = False

    @classmethod
    def from_object(cls, obj: Any) -> ColocationProfile:
        """From a `config.koordinator.sh/v1alpha1` ClusterColocationProfile object."""
        if not isinstance(obj, Mapping):
            raise ProfileError("profile must be an object")
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ProfileError("profile needs metadata.name")
        where = f"ClusterColocationProfile {name}"
        spec = obj.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise ProfileError(f"{where}: spec must be an object")
        unknown = [k for k in spec if k not in SPEC_FIELDS]
        if unknown:
            named = []
            for k in unknown:
                close = closest(k, SPEC_FIELDS)
                named.append(f"spec.{k}" + (f" (did you mean {close}?)" if close else ""))
            raise ProfileError(f"{where}: unknown field {', '.join(named)}")
        try:
            ns_sel = parse_selector(spec.get("namespaceSelector"), f"{where}: spec.namespaceSelector")
            sel = parse_selector(spec.get("selector"), f"{where}: spec.selector")
        except SelectorError as e:
            raise ProfileError(str(e)) from None
        qos = spec.get("qosClass")
        if qos is not None and qos not in QOS_NAMES:
            raise ProfileError(f"{where}: spec.qosClass must be one of {', '.join(QOS_NAMES)}, got {qos!r}")
        prio = spec.get("koordinatorPriority")
        if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
            raise ProfileError(f"{where}: spec.koordinatorPriority must be an integer")
        for key in ("priorityClassName", "schedulerName"):
            if spec.get(key) is not None and not isinstance(spec.get(key), str):
                raise ProfileError(f"{where}: spec.{key} must be a string")
        patch = spec.get("patch")
        if patch is not None and not isinstance(patch, Mapping):
            raise ProfileError(f"{where}: spec.patch must be an object (a strategic merge patch of the Pod)")
        ann = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        return cls(
            name=name,
            namespace_selector=ns_sel,
            selector=sel,
            probability=parse_probability(spec.get("probability"), f"{where}: spec.probability"),
            qos_class=qos,
            priority_class_name=spec.get("priorityClassName") or None,
            koordinator_priority=prio,
            scheduler_name=spec.get("schedulerName") or None,
            labels=_str_map(spec.get("labels"), f"{where}: spec.labels"),
            annotations=_str_map(spec.get("annotations"), f"{where}: spec.annotations"),
            label_keys_mapping=_str_map(spec.get("labelKeysMapping"), f"{where}: spec.labelKeysMapping"),
            annotation_keys_mapping=_str_map(spec.get("annotationKeysMapping"), f"{where}: spec.annotationKeysMapping"),
            label_suffixes=_str_map(spec.get("labelSuffixes"), f"{where}: spec.labelSuffixes"),
            patch=dict(patch) if patch is not None else None,
            skip_update_resources=ANNOTATION_SKIP_UPDATE_RESOURCES in ann,
        )

    def matches(self, namespace_labels: Mapping[str, str] | None, pod_labels: Mapping[str, str] | None) -> bool:
        if self.namespace_selector is not None and not self.namespace_selector.matches(namespace_labels or {}):
            return False
        return self.selector is None or self.selector.matches(pod_labels or {})


def parse_profiles(objs: list[Any]) -> tuple[list[ColocationProfile], list[str]]:
    """Valid profiles sorted by name (the order they apply in), and one error per bad one."""
    profiles, errors = [], []
    for obj in objs:
        try:
            p = ColocationProfile.from_object(obj)
        except ProfileError as e:
            errors.append(str(e))
            continue
        profiles.append(p)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if isinstance(labels, Mapping) and str(labels.get(LABEL_CONTROLLER_MANAGED, "")).lower() == "true":
            errors.append(f"ClusterColocationProfile {p.name}: label {LABEL_CONTROLLER_MANAGED} is not supported: "
                          "the profile applies to pods when they are admitted, not to pods already created")
    profiles.sort(key=lambda p: p.name)
    return profiles, errors


def skipped_by_probability(percent: int, draw: int) -> bool:
    # QUIRK kept from Koordinator: `rand.Intn(100) > p` skips, so a draw equal to p applies.
    return percent == 0 or (percent != 100 and draw > percent)


@dataclass
class MutationResult:
    pod: dict[str, Any]
    patch: list[dict[str, Any]]
    applied: list[str]  # names of the profiles applied
    error: str | None = None  # the pod cannot be admitted (e.g. unknown PriorityClass)


def _meta_map(pod: dict[str, Any], key: str) -> dict[str, str]:
    meta = pod.setdefault("metadata", {})
    if not isinstance(meta.get(key), dict):
        meta[key] = {}
    return meta[key]


def _apply_profile(pod: dict[str, Any], p: ColocationProfile, classes: Mapping[str, PriorityClassInfo]) -> str | None:
    labels = _meta_map(pod, "labels")
    annotations = _meta_map(pod, "annotations")
    labels.update(p.labels)
    annotations.update(p.annotations)
    for old, new in p.label_keys_mapping.items():
        labels[new] = labels.get(old, "")
    for old, new in p.annotation_keys_mapping.items():
        annotations[new] = annotations.get(old, "")
    for key, suffix in p.label_suffixes.items():
        if key in labels:
            labels[key] += suffix
    spec = pod.setdefault("spec", {})
    if p.scheduler_name:
        spec["schedulerName"] = p.scheduler_name
    if p.qos_class:
        labels[LABEL_QOS_CLASS] = p.qos_class
    if p.priority_class_name:
        pc = classes.get(p.priority_class_name)
        if pc is None:
            return f"no PriorityClass with name {p.priority_class_name} was found (profile {p.name})"
        # The Priority admission plugin refuses a pod whose priority or preemptionPolicy
        # disagrees with its class, so all three are set together.
        spec["priorityClassName"] = pc.name
        spec["priority"] = pc.value
        spec["preemptionPolicy"] = pc.preemption_policy
    if p.koordinator_priority is not None:
        labels[LABEL_PRIORITY] = str(p.koordinator_priority)
    if p.patch:
        merged = strategic_merge(pod, p.patch)
        pod.clear()
        pod.update(merged)
    return None


def tier_names(cls: PriorityClass, prefix: str) -> tuple[str, str] | None:
    """Koordinator's ResourceNameMap: the (cpu, memory) names a class's pods must request."""
    if cls is PriorityClass.BATCH:
        return rn.batch_cpu(prefix), rn.batch_memory(prefix)
    if cls is PriorityClass.MID:
        return rn.mid_cpu(prefix), rn.mid_memory(prefix)
    return None  # prod and none use native resources; free has no entry: never rewritten


def _rewrite_list(res: dict[str, Any], cpu_name: str, mem_name: str) -> None:
    if rn.CPU in res:
        milli = parse_json_quantity(res.pop(rn.CPU)).milli_value()
        res[cpu_name] = format_quantity(cpu_name, milli)  # 500m -> "500", 2 -> "2k"
    if rn.MEMORY in res:
        res[mem_name] = res.pop(rn.MEMORY)  # the same quantity: bytes either way


def rewrite_resources(pod: dict[str, Any], cpu_name: str, mem_name: str) -> None:
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict) or not isinstance(c.get("resources"), dict):
                continue
            r = c["resources"]
            for part in ("requests", "limits"):
                if isinstance(r.get(part), dict):
                    _rewrite_list(r[part], cpu_name, mem_name)
            limits = r.get("limits") if isinstance(r.get("limits"), dict) else {}
            for name in (cpu_name, mem_name):
                if name in limits and name not in (r.get("requests") or {}):
                    r.setdefault("requests", {})[name] = limits[name]
    if isinstance(spec.get("overhead"), dict):
        _rewrite_list(spec["overhead"], cpu_name, mem_name)


def extended_resource_spec(pod: dict[str, Any], names: tuple[str, str]) -> dict[str, Any] | None:
    """Koordinator's ExtendedResourceSpec annotation: the batch resources of each regular container."""
    containers: dict[str, Any] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        r = c.get("resources") if isinstance(c, dict) else None
        if not isinstance(r, dict):
            continue
        entry = {}
        for part in ("requests", "limits"):
            sel = {n: v for n, v in (r.get(part) or {}).items() if n in names}
            if sel:
                entry[part] = sel
        if entry:
            containers[c.get("name", "")] = entry
    return {"containers": containers} if containers else None


def mutate_pod(
    pod: dict[str, Any],
    namespace_labels: Mapping[str, str] | None,
    profiles: list[ColocationProfile],
    priority_classes: Mapping[str, PriorityClassInfo] | None = None,
    prefix: str | None = None,
    rand_intn: Callable[[int], int] | None = None,
) -> MutationResult:
    """Apply every matching profile to a Pod CREATE; `pod` itself is not modified."""
    classes = BUILTIN_PRIORITY_CLASSES if priority_classes is None else priority_classes
    prefix = prefix or rn.published_prefix()
    out = copy.deepcopy(pod)
    pod_labels = ((pod.get("metadata") or {}).get("labels")) or {}
    applied: list[str] = []
    matched = False
    skip_resources = False
    for p in profiles:
        if not p.matches(namespace_labels, pod_labels):
            continue
        matched = True
        if p.skip_update_resources:
            skip_resources = True
        if p.probability != 100 and skipped_by_probability(p.probability, (rand_intn or _rand)(100)):
            continue
        err = _apply_profile(out, p, classes)
        if err:
            return MutationResult(pod, [], applied, err)
        applied.append(p.name)
    if not matched:
        return MutationResult(pod, [], [])
    if not skip_resources:
        try:
            # Decided on the mutated pod: the rewrite also runs for a pod that is already batch/mid.
            cls = pod_from_k8s(out).priority_class
            names = tier_names(cls, prefix)
            if names is not None:
                rewrite_resources(out, *names)
                if cls is PriorityClass.BATCH:
                    ers = extended_resource_spec(out, names)
                    if ers is not None:
                        _meta_map(out, "annotations")[ANNOTATION_EXTENDED_RESOURCE_SPEC] = json.dumps(
                            ers, sort_keys=True, separators=(",", ":")
                        )
        except (QuantityError, ValueError) as e:
            return MutationResult(pod, [], applied, f"invalid pod resources: {e}")
    # Only maps the profiles filled get added; keep the original shape otherwise.
    _drop_added_empty_maps(pod, out)
    return MutationResult(out, json_patch(pod, out), applied)


def _drop_added_empty_maps(orig: dict[str, Any], out: dict[str, Any]) -> None:
    meta = out.get("metadata") or {}
    orig_meta = orig.get("metadata") or {}
    for key in ("labels", "annotations"):
        if meta.get(key) == {} and key not in orig_meta:
            del meta[key]


def _rand(n: int) -> int:
    return random.randrange(n)
