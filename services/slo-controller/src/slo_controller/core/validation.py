"""Pod validation of the colocation webhook (Koordinator's validating/cluster_colocation_profile.go,
with DESIGN.md section 1's combination table from `koordcommon.model`)."""

from __future__ import annotations

from typing import Any

from koordcommon import resources as rn
from koordcommon.kube_codec import pod_from_k8s
from koordcommon.model import (
    LABEL_PRIORITY,
    LABEL_QOS_CLASS,
    QoSClass,
    combination_error,
    parse_qos_class,
    raw_priority_class,
)
from koordcommon.quantity import format_quantity
from koordcommon.records import PodRecord

_QOS_FIELD = f"labels.{LABEL_QOS_CLASS}"


def _raw(pod: PodRecord) -> tuple[QoSClass, Any]:
    return parse_qos_class(pod.labels.get(LABEL_QOS_CLASS)), raw_priority_class(pod.labels, pod.priority)


def validate_pod(obj: dict[str, Any], old_obj: dict[str, Any] | None = None, operation: str = "CREATE") -> list[str]:
    """Every reason the pod must be refused; empty when it is admitted."""
    try:
        pod = pod_from_k8s(obj)
        old = pod_from_k8s(old_obj) if (operation == "UPDATE" and isinstance(old_obj, dict)) else None
    except ValueError as e:
        return [f"Pod: Invalid value: {e}"]
    qos, pc = _raw(pod)
    errors: list[str] = []
    if old is not None:
        old_qos, old_pc = _raw(old)
        if qos != old_qos:
            errors.append(f'{_QOS_FIELD}: Invalid value: "{qos.value}": field is immutable')
        if pc != old_pc:
            errors.append(f'spec.priority: Invalid value: "{pc.value}": field is immutable')
        if pod.labels.get(LABEL_PRIORITY) != old.labels.get(LABEL_PRIORITY):
            errors.append(
                f'labels.{LABEL_PRIORITY}: Invalid value: "{pod.labels.get(LABEL_PRIORITY, "")}": field is immutable'
            )
    if not pod.batch_requests().is_zero() and qos is not QoSClass.BE:
        errors.append(
            f"{_QOS_FIELD}: Required value: must specify koordinator QoS BE with koordinator colocation resources"
        )
    detail = combination_error(pc, qos)
    if detail is not None:
        errors.append(
            f"Pod: Forbidden: {LABEL_QOS_CLASS}={qos.value} and priorityClass={pc.value or 'none'} "
            f"cannot be used in combination ({detail})"
        )
    if qos in (QoSClass.LSR, QoSClass.LSE):
        cpu = pod.requests().get(rn.CPU, 0)
        where = "pod.spec.containers.resources.requests"
        if cpu == 0:
            errors.append(f"{where}: Required value: {qos.value} Pod must declare the requested CPUs")
        elif cpu % 1000:
            errors.append(
                f'{where}: Invalid value: "{format_quantity(rn.CPU, cpu)}": '
                f"the requested CPUs of {qos.value} Pod must be integer"
            )
    return errors
