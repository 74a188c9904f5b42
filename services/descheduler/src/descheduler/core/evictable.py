"""Which pods the descheduler may move at all (the descheduler's DefaultEvictor rules)."""

from __future__ import annotations

from koordcommon.model import SYSTEM_CRITICAL_PRIORITY
from koordcommon.records import ANNOTATION_DESCHEDULER_EVICT, PodRecord

ANNOTATION_NO_EVICT = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
ANNOTATION_KOORD_NO_EVICT = "scheduling.koordinator.sh/eviction-disabled"


def non_evictable_reason(pod: PodRecord, evict_local_storage: bool = False) -> str | None:
    """None when the pod may be evicted, else why not.

    The `descheduler.alpha.kubernetes.io/evict` annotation wins over every protection, as in
    the Kubernetes descheduler; mirror/static and terminating pods are never evicted.
    """
    if pod.deletion_ms is not None:
        return "terminating"
    if pod.is_mirror_or_static:
        return "mirror or static pod"
    if ANNOTATION_DESCHEDULER_EVICT in pod.annotations:
        return None
    if pod.annotations.get(ANNOTATION_NO_EVICT) == "true" or pod.annotations.get(ANNOTATION_KOORD_NO_EVICT) == "true":
        return "annotated not to be evicted"
    if pod.is_daemonset:
        return "DaemonSet pod"
    if (pod.priority or 0) >= SYSTEM_CRITICAL_PRIORITY or pod.priority_class_name in (
        "system-cluster-critical",
        "system-node-critical",
    ):
        return "system-critical pod"
    if pod.has_local_storage and not evict_local_storage:
        return "pod with local storage"
    if not pod.owners:
        return "bare pod (no controller would recreate it)"
    if pod.phase != "Running":
        return f"pod is {pod.phase}"
    return None
