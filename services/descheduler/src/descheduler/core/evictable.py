"""Which pods the descheduler may move at all: the descheduler's DefaultEvictor rules and the
MigrationController's filter (namespaces, labelSelector, priorityThreshold, schedulerNames)."""

from __future__ import annotations

from dataclasses import dataclass

from koordcommon.model import SYSTEM_CRITICAL_PRIORITY
from koordcommon.records import ANNOTATION_DESCHEDULER_EVICT, PodRecord
from koordcommon.selectors import LabelSelector

ANNOTATION_NO_EVICT = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
ANNOTATION_KOORD_NO_EVICT = "scheduling.koordinator.sh/eviction-disabled"


@dataclass(frozen=True)
class EvictorRules:
    """The filter's switches (LowNodeLoadArgs.evictor_rules builds them from the arguments)."""

    evict_local_storage: bool = False
    evict_system_critical: bool = False  # also lifts priority_threshold, as in Koordinator
    ignore_pvc: bool = False  # pods with a PersistentVolumeClaim stay
    priority_threshold: int | None = None  # only pods of a lower priority may go
    include_namespaces: frozenset[str] = frozenset()
    exclude_namespaces: frozenset[str] = frozenset()
    label_selector: LabelSelector | None = None
    scheduler_names: frozenset[str] | None = None  # ReservationFirst: pods these schedulers placed


def non_evictable_reason(pod: PodRecord, rules: EvictorRules = EvictorRules()) -> str | None:
    """None when the pod may be evicted, else why not.

    The `descheduler.alpha.kubernetes.io/evict` annotation wins over every protection, as in
    the Kubernetes descheduler and Koordinator's MigrationController; mirror/static and
    terminating pods are never evicted, and a reservation needs a scheduler that honours it.
    """
    if pod.deletion_ms is not None:
        return "terminating"
    if pod.is_mirror_or_static:
        return "mirror or static pod"
    if rules.scheduler_names is not None and pod.scheduler_name not in rules.scheduler_names:
        return f"scheduled by {pod.scheduler_name}, not by schedulerNames"
    if ANNOTATION_DESCHEDULER_EVICT in pod.annotations:
        return None
    if pod.annotations.get(ANNOTATION_NO_EVICT) == "true" or pod.annotations.get(ANNOTATION_KOORD_NO_EVICT) == "true":
        return "annotated not to be evicted"
    if pod.is_daemonset:
        return "DaemonSet pod"
    if not rules.evict_system_critical:
        if (pod.priority or 0) >= SYSTEM_CRITICAL_PRIORITY or pod.priority_class_name in (
            "system-cluster-critical",
            "system-node-critical",
        ):
            return "system-critical pod"
        # Kubernetes: a pod without a priority is under any threshold.
        if rules.priority_threshold is not None and pod.priority is not None and pod.priority >= rules.priority_threshold:
            return f"priority {pod.priority} is not under priorityThreshold {rules.priority_threshold}"
    if pod.has_local_storage and not rules.evict_local_storage:
        return "pod with local storage"
    if rules.ignore_pvc and "persistentVolumeClaim" in pod.volume_kinds:
        return "pod with a PersistentVolumeClaim (ignorePvcPods)"
    if not pod.owners:
        return "bare pod (no controller would recreate it)"
    if pod.phase != "Running":
        return f"pod is {pod.phase}"
    if rules.include_namespaces and pod.namespace not in rules.include_namespaces or (
        pod.namespace in rules.exclude_namespaces
    ):
        return f"namespace {pod.namespace} is not in the MigrationController's namespaces"
    if rules.label_selector is not None and not rules.label_selector.matches(pod.labels):
        return "labels not matched by the MigrationController's labelSelector"
    return None
