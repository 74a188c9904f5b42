"""Koordinator Reservations (scheduling.koordinator.sh/v1alpha1): resources held on a node for
the pods of chosen owners.

A reservation on a node holds `allocatable - allocated`. Pods that match one of its owners may
use that room (they are steered to it and consume it when bound); every other pod sees it as
used. A reservation stops holding anything when it expires (ttl, default 24h, or `expires`),
when it is Failed or Succeeded, or, with allocateOnce (the default), once its first owner is bound.

The extender places pods, not reservations: a reservation takes part once it names its node
(`status.nodeName`, or `spec.template.spec.nodeName` for a pinned one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from koordcommon.durations import DurationError, parse_duration_ms
from koordcommon.kube_codec import parse_time_ms, pod_from_k8s
from koordcommon.quantity import QuantityError, parse_resource_list
from koordcommon.records import PodRecord
from koordcommon.reservations import AVAILABLE, ENDED, SUCCEEDED
from koordcommon.resources import ZERO, Resources
from koordcommon.selectors import LabelSelector, parse_selector

DEFAULT_TTL_MS = 24 * 3600 * 1000
LABEL_RESERVATION_IGNORED = "scheduling.koordinator.sh/reservation-ignored"
LABEL_RESERVATION_ORDER = "scheduling.koordinator.sh/reservation-order"
ANNOTATION_RESERVATION_AFFINITY = "scheduling.koordinator.sh/reservation-affinity"


@dataclass(slots=True)
class Owner:
    """One owners item; its non-empty parts are ANDed, the items of a reservation ORed."""

    object: dict[str, str] | None = None  # uid, name, namespace (of a pod)
    controller: dict[str, Any] | None = None  # uid, name, kind, apiVersion, namespace, controller
    selector: LabelSelector | None = None

    def matches(self, pod: PodRecord) -> bool:
        if self.object is not None:
            for key, got in (("uid", pod.uid), ("name", pod.name), ("namespace", pod.namespace)):
                want = self.object.get(key)
                if want and want != got:
                    return False
        if self.controller is not None:
            c = self.controller
            ns = c.get("namespace")
            if ns and ns != pod.namespace:
                return False
            if not any(_controller_matches(c, o) for o in pod.owners):
                return False
        return self.selector is None or self.selector.matches(pod.labels)


def _controller_matches(c: dict[str, Any], o) -> bool:
    for key, got in (("uid", o.uid), ("name", o.name), ("kind", o.kind), ("apiVersion", o.api_version)):
        want = c.get(key)
        if want and want != got:
            return False
    return not (c.get("controller") is True and not o.controller)


@dataclass(slots=True)
class Reservation:
    name: str
    uid: str = ""
    node: str | None = None
    allocatable: Resources = ZERO
    allocated: Resources = ZERO
    owners: list[Owner] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0
    ttl_ms: int | None = DEFAULT_TTL_MS  # None or 0: never expires by age
    expires_ms: int | None = None
    allocate_once: bool = True
    restricted: bool = False  # allocatePolicy Restricted: a pod must fit inside the reservation
    unschedulable: bool = False
    phase: str = AVAILABLE
    current_owners: list[str] = field(default_factory=list)  # pod keys that consumed it

    def expired(self, now_ms: int) -> bool:
        if self.phase in ENDED:
            return False
        if self.expires_ms is not None:
            return now_ms > self.expires_ms
        if not self.ttl_ms:
            return False
        return now_ms - self.created_ms > self.ttl_ms

    def active(self, now_ms: int) -> bool:
        """Holds resources on its node right now."""
        if not self.node or self.phase in ENDED or self.expired(now_ms):
            return False
        return not (self.allocate_once and self.current_owners)

    def remaining(self) -> Resources:
        return (self.allocatable - self.allocated).clamp0()

    def matches(self, pod: PodRecord) -> bool:
        """Koordinator's MatchReservationOwners, plus the pod's opt-out label and affinity by name."""
        if pod.labels.get(LABEL_RESERVATION_IGNORED) == "true" or self.unschedulable:
            return False
        wanted = required_reservation(pod)
        if wanted is not None and wanted.get("name") and wanted["name"] != self.name:
            return False
        if wanted is not None:
            sel = wanted.get("selector")
            if sel and not all(self.labels.get(k) == v for k, v in sel.items()):
                return False
        return any(o.matches(pod) for o in self.owners)

    @property
    def order(self) -> int:
        try:
            return int(self.labels.get(LABEL_RESERVATION_ORDER, "0")) or 1 << 62
        except ValueError:
            return 1 << 62


def required_reservation(pod: PodRecord) -> dict[str, Any] | None:
    """The pod's reservation affinity: {"name": ..., "selector": {...}} or None.

    With an affinity the pod may only run where a matching reservation holds room for it.
    """
    raw = pod.annotations.get(ANNOTATION_RESERVATION_AFFINITY)
    if not raw:
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    selector = obj.get("reservationSelector") if isinstance(obj.get("reservationSelector"), dict) else {}
    return {"name": obj.get("name") or "", "selector": {str(k): str(v) for k, v in selector.items()}}


def _duration_ms(v: Any) -> int | None:
    """A Go duration string (`24h`, `30m`, `1h30m`, `90s`, `0`), or a number of seconds, in ms."""
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v * 1000)
    if not isinstance(v, str):
        raise TypeError(f"ttl {v!r} is not a duration")
    if not v.strip():
        return 0
    try:
        return parse_duration_ms(v)
    except DurationError as exc:
        raise ValueError(f"ttl: {exc}") from None


def _resources(lst: dict[str, int]) -> Resources:
    return Resources.from_list(lst)


def parse_reservation(obj: dict[str, Any]) -> Reservation:
    """A Reservation custom object (Kubernetes JSON) to the plain record.

    Raises ValueError (TypeError for a value of the wrong JSON type) when it cannot be used.
    """
    if not isinstance(obj, dict):
        raise TypeError("reservation must be a JSON object")
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    name = meta.get("name")
    if not name:
        raise ValueError("reservation without metadata.name")
    template = spec.get("template") or {}
    tpod = pod_from_k8s({"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}})
    try:
        alloc = (
            _resources(parse_resource_list(status.get("allocatable")))
            if status.get("allocatable")
            else tpod.request_resources()
        )
        allocated = _resources(parse_resource_list(status.get("allocated"))) if status.get("allocated") else ZERO
    except QuantityError as exc:
        raise ValueError(f"reservation {name}: {exc}") from None
    owners = []
    for item in spec.get("owners") or []:
        if not isinstance(item, dict):
            continue
        owners.append(
            Owner(
                object=item.get("object") if isinstance(item.get("object"), dict) else None,
                controller=item.get("controller") if isinstance(item.get("controller"), dict) else None,
                selector=parse_selector(item.get("labelSelector")),
            )
        )
    ttl = _duration_ms(spec.get("ttl")) if "ttl" in spec else DEFAULT_TTL_MS
    expires = parse_time_ms(spec.get("expires"), f"reservation {name}: spec.expires")
    current = [
        f"{o.get('namespace', '')}/{o.get('name', '')}"
        for o in status.get("currentOwners") or []
        if isinstance(o, dict)
    ]
    return Reservation(
        name=name,
        uid=str(meta.get("uid", "")),
        node=status.get("nodeName") or tpod.node_name,
        allocatable=alloc,
        allocated=allocated,
        owners=owners,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        created_ms=parse_time_ms(meta.get("creationTimestamp"), f"reservation {name}: creationTimestamp") or 0,
        ttl_ms=ttl,
        expires_ms=expires,
        allocate_once=spec.get("allocateOnce", True) is not False,
        restricted=spec.get("allocatePolicy") == "Restricted",
        unschedulable=spec.get("unschedulable") is True,
        phase=status.get("phase") or AVAILABLE,  # one that names its node takes part (see above)
        current_owners=current,
    )


# --------------------------------------------------------------------------- per-node judgement


@dataclass(slots=True)
class NodeRoom:
    """Request-based accounting of one node: what kube-scheduler's fit sees, plus reservations."""

    allocatable: Resources
    requested: Resources  # sum of the requests of pods bound to the node


@dataclass(slots=True)
class ReservationVerdict:
    fits: bool
    matched: list[Reservation]
    reason: str = ""


def _short(need: Resources, room: Resources) -> str | None:
    if need.cpu_milli > room.cpu_milli:
        return "cpu"
    if need.memory_bytes > room.memory_bytes:
        return "memory"
    return None


def judge(
    room: NodeRoom, reservations: list[Reservation], pod: PodRecord, request: Resources, now_ms: int
) -> ReservationVerdict:
    """Can `pod` (asking `request`) go on this node, given the reservations held there?

    Non-owners see every active reservation's remaining room as used. An owner may also use
    the room of the reservations it matches (Aligned: node room and reservation together;
    Restricted: the pod must fit inside the reservation alone).
    """
    active = [r for r in reservations if r.active(now_ms)]
    matched = [r for r in active if r.matches(pod)]
    held_for_others = ZERO
    for r in active:
        if r not in matched:
            held_for_others = held_for_others + r.remaining()
    free = (room.allocatable - room.requested - held_for_others).clamp0()
    if matched:
        usable = [r for r in matched if not r.restricted or _short(request, r.remaining()) is None]
        if not usable:
            res = _short(request, matched[0].remaining())
            return ReservationVerdict(False, matched, f"Reservation(s) Insufficient {res}")
        # The matched reservations' own room is inside `free` only for the one the pod takes.
        for r in sorted(usable, key=lambda r: (r.order, r.name)):
            others = sum((m.remaining() for m in matched if m is not r), ZERO)
            if _short(request, (free - others).clamp0()) is None:
                return ReservationVerdict(True, [r])
        res = _short(request, free)
        return ReservationVerdict(False, matched, f"node(s) Insufficient {res or 'cpu'} (reservation room)")
    if required_reservation(pod) is not None:
        return ReservationVerdict(False, [], "node(s) didn't match the pod's reservation affinity")
    res = _short(request, free)
    if res is not None:
        plain = _short(request, (room.allocatable - room.requested).clamp0())
        if plain is not None:  # would not fit without any reservation either
            return ReservationVerdict(False, [], f"node(s) Insufficient {plain}")
        return ReservationVerdict(False, [], f"node(s) Insufficient {res} (held by reservations)")
    return ReservationVerdict(True, [])


def consume(reservation: Reservation, pod_key: str, request: Resources) -> None:
    """A matching pod was bound on the reservation's node: it now uses that room."""
    if pod_key in reservation.current_owners:
        return
    reservation.current_owners.append(pod_key)
    reservation.allocated = reservation.allocated + request
    if reservation.allocate_once:
        reservation.phase = SUCCEEDED


def release(reservation: Reservation, pod_key: str, request: Resources) -> None:
    """An owner pod went away: its part of the reservation is free again (not for allocateOnce)."""
    if pod_key not in reservation.current_owners or reservation.allocate_once:
        return
    reservation.current_owners.remove(pod_key)
    reservation.allocated = (reservation.allocated - request).clamp0()
