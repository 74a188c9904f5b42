"""The priority and QoS model (DESIGN.md section 1, Koordinator's apis/extension).

Priority classes are bands of `spec.priority`; QoS classes come from the
`koordinator.sh/qosClass` label or, without it, from the Kubernetes QoS class.
"""

from __future__ import annotations

from enum import StrEnum

LABEL_QOS_CLASS = "koordinator.sh/qosClass"
LABEL_PRIORITY = "koordinator.sh/priority"  # integer sub-priority
LABEL_PRIORITY_CLASS = "koordinator.sh/priority-class"  # explicit class, wins over spec.priority


class PriorityClass(StrEnum):
    PROD = "koord-prod"
    MID = "koord-mid"
    BATCH = "koord-batch"
    FREE = "koord-free"
    NONE = ""


class QoSClass(StrEnum):
    SYSTEM = "SYSTEM"
    LSE = "LSE"
    LSR = "LSR"
    LS = "LS"
    BE = "BE"
    NONE = ""


class KubeQoS(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


# Inclusive value bands and the value a class gets when only its name is known.
PRIORITY_BANDS: dict[PriorityClass, tuple[int, int]] = {
    PriorityClass.PROD: (9000, 9999),
    PriorityClass.MID: (7000, 7999),
    PriorityClass.BATCH: (5000, 5999),
    PriorityClass.FREE: (3000, 3999),
}
DEFAULT_PRIORITY_VALUE: dict[PriorityClass, int] = {
    PriorityClass.PROD: 9500,
    PriorityClass.MID: 7500,
    PriorityClass.BATCH: 5500,
    PriorityClass.FREE: 3500,
    PriorityClass.NONE: 0,
}
# Value of the shipped PriorityClass objects (koord-prod 9000 ... koord-free 3000).
PRIORITY_CLASS_OBJECT_VALUE: dict[PriorityClass, int] = {
    PriorityClass.PROD: 9000,
    PriorityClass.MID: 7000,
    PriorityClass.BATCH: 5000,
    PriorityClass.FREE: 3000,
}
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


def priority_class_from_value(priority: int | None) -> PriorityClass:
    """The band a `spec.priority` falls in; NONE when unset or outside every band."""
    if priority is None:
        return PriorityClass.NONE
    for cls, (low, high) in PRIORITY_BANDS.items():
        if low <= priority <= high:
            return cls
    return PriorityClass.NONE


def parse_priority_class(name: str | None) -> PriorityClass:
    try:
        return PriorityClass(name or "")
    except ValueError:
        return PriorityClass.NONE


def parse_qos_class(value: str | None) -> QoSClass:
    """A label value; anything but the five known names reads as NONE."""
    try:
        return QoSClass(value or "")
    except ValueError:
        return QoSClass.NONE


def raw_priority_class(labels: dict[str, str] | None, priority: int | None) -> PriorityClass:
    """Koordinator's GetPodPriorityClassRaw: explicit label first, then the value band."""
    if labels and LABEL_PRIORITY_CLASS in labels:
        return parse_priority_class(labels[LABEL_PRIORITY_CLASS])
    return priority_class_from_value(priority)


def qos_from_kube(kube_qos: KubeQoS | str | None) -> QoSClass:
    return {
        KubeQoS.GUARANTEED: QoSClass.LSR,
        KubeQoS.BURSTABLE: QoSClass.LS,
        KubeQoS.BEST_EFFORT: QoSClass.BE,
    }.get(kube_qos, QoSClass.NONE)  # type: ignore[arg-type]


def qos_class(labels: dict[str, str] | None, kube_qos: KubeQoS | str | None) -> QoSClass:
    """The label when valid, else the mapping of the Kubernetes QoS class."""
    label = parse_qos_class((labels or {}).get(LABEL_QOS_CLASS))
    return label if label is not QoSClass.NONE else qos_from_kube(kube_qos)


def priority_class(labels: dict[str, str] | None, priority: int | None, qos: QoSClass) -> PriorityClass:
    """The effective class: the raw class, else derived from QoS.

    A normal Kubernetes pod (no koord priority) is prod, except a BE one, which is batch:
    this is Koordinator's GetPodPriorityClassWithDefault.
    """
    raw = raw_priority_class(labels, priority)
    if raw is not PriorityClass.NONE:
        return raw
    return PriorityClass.BATCH if qos is QoSClass.BE else PriorityClass.PROD


def is_hp(cls: PriorityClass | str) -> bool:
    """High priority: resources not taken from the batch/free tier (prod, mid, none)."""
    return cls not in (PriorityClass.BATCH, PriorityClass.FREE)


def is_prod(cls: PriorityClass | str) -> bool:
    """Prod, or no koord class at all: a normal Kubernetes pod counts as prod (DESIGN.md section 1).

    Takes the enum or its string value (NodeMetric pod entries carry the string).
    """
    return cls == PriorityClass.PROD or cls == PriorityClass.NONE


def sub_priority(labels: dict[str, str] | None) -> int | None:
    value = (labels or {}).get(LABEL_PRIORITY)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


_VALID = {
    PriorityClass.PROD: {QoSClass.LSE, QoSClass.LSR, QoSClass.LS},
    PriorityClass.MID: {QoSClass.LS, QoSClass.BE},
    PriorityClass.BATCH: {QoSClass.LS, QoSClass.BE},
    PriorityClass.FREE: {QoSClass.LS, QoSClass.BE},
}


def is_valid_combination(cls: PriorityClass, qos: QoSClass) -> bool:
    """DESIGN.md section 1: Prod+LSE/LSR/LS, Mid/Batch/Free+LS/BE, SYSTEM with any.

    A pod without a koord class is judged as prod; a pod without a QoS label is always
    valid (its QoS is derived, not declared).
    """
    if qos in (QoSClass.SYSTEM, QoSClass.NONE):
        return True
    effective = PriorityClass.PROD if cls is PriorityClass.NONE else cls
    return qos in _VALID[effective]


def combination_error(cls: PriorityClass, qos: QoSClass) -> str | None:
    if is_valid_combination(cls, qos):
        return None
    allowed = sorted(q.value for q in _VALID[PriorityClass.PROD if cls is PriorityClass.NONE else cls])
    return (
        f"priority class {cls.value or 'none (prod)'} cannot be combined with QoS class {qos.value}; "
        f"allowed: {', '.join(allowed)} or SYSTEM"
    )


# Order used when choosing victims: lower first (free, batch, mid, prod).
PRIORITY_CLASS_RANK: dict[PriorityClass, int] = {
    PriorityClass.FREE: 0,
    PriorityClass.BATCH: 1,
    PriorityClass.MID: 2,
    PriorityClass.NONE: 3,
    PriorityClass.PROD: 3,
}
QOS_RANK: dict[QoSClass, int] = {
    QoSClass.BE: 0,
    QoSClass.LS: 1,
    QoSClass.NONE: 1,
    QoSClass.LSR: 2,
    QoSClass.LSE: 3,
    QoSClass.SYSTEM: 4,
}
