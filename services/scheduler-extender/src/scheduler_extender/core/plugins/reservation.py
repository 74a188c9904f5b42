"""Koordinator Reservations as a plugin: room held on a node for the pods of chosen owners.

Filter: on a node holding active reservations, a pod that owns none of them sees their
remaining room as used; an owner may use it (see `reservation.judge`). A pod with reservation
affinity may only go where a matching reservation holds room for it, and every other node is
unresolvable for it (evicting pods there cannot help).
Score: a reservation owner belongs on its reservation. The nodes where it fits a reservation
it owns score 100 and every other node 0, with Koordinator's weight for the plugin (5000), so
the sum is decided by it; for a pod that owns no reservation among the candidates the plugin
has no opinion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from koordcommon.resources import Resources, sum_resources

from .. import reservation as rsv
from ..framework import NodeView, PodInfo, Verdict, amounts

NAME = "Reservation"
NO_AFFINITY_MATCH = "node(s) didn't match the pod's reservation affinity"


@dataclass(slots=True)
class NodeReservations:
    """What the reservation rules read of one node that some Reservation names."""

    allocatable: Resources
    requested: Resources  # sum of the requests of the pods counted on the node
    reservations: list[rsv.Reservation]

    def judge(self, pod: PodInfo, now_ms: int) -> rsv.ReservationVerdict:
        return rsv.judge(rsv.NodeRoom(self.allocatable, self.requested), self.reservations, pod.record, pod.request, now_ms)


def _of(view: NodeView) -> NodeReservations | None:
    if not view.reservations:
        return None
    return NodeReservations(view.allocatable, sum_resources(p.requests for p in view.pods), list(view.reservations))


class Reservation:
    name = NAME
    weight = 5000  # Koordinator's weight for its reservation plugin

    def __init__(self) -> None:
        self.nodes: dict[int, NodeReservations] = {}  # only the rows of nodes some Reservation names

    def refresh(self, row: int, view: NodeView) -> None:
        held = _of(view)
        if held is None:
            self.nodes.pop(row, None)
        else:
            self.nodes[row] = held

    def scratch(self, views: list[NodeView]) -> dict[int, NodeReservations]:
        return {i: held for i, v in enumerate(views) if (held := _of(v)) is not None}

    def explain(self, pod: PodInfo, view: NodeView, now_ms: int) -> dict[str, Any]:
        """The reservations held on the node, which the pod may use, and the room it is judged in."""
        held = _of(view)
        out: dict[str, Any] = {"affinity_required": pod.reservation_affinity}
        if held is None:
            out["reservations"] = []
            return out
        verdict = held.judge(pod, now_ms)
        out.update({
            "allocatable": amounts(held.allocatable), "requested": amounts(held.requested),
            "pod_request": amounts(pod.request), "fits": verdict.fits, "reason": verdict.reason or None,
            "matched": [r.name for r in verdict.matched],
            "reservations": [{"name": r.name, "active": r.active(now_ms), "owner_match": r.matches(pod.record),
                              "allocatable": amounts(r.allocatable), "allocated": amounts(r.allocated)}
                             for r in held.reservations],
        })  # fmt: skip
        return out

    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        nodes: dict[int, NodeReservations] = self.nodes if store is None else store
        required = pod.reservation_affinity
        if not nodes and not required:
            return Verdict.passing(len(rows))
        reasons: list[str | None] = [None] * len(rows)
        hard: set[str] = set()
        for i, row in enumerate(rows.tolist()):
            held = nodes.get(row)
            if held is None:
                if required:
                    reasons[i] = NO_AFFINITY_MATCH
                    hard.add(NO_AFFINITY_MATCH)
                continue
            verdict = held.judge(pod, now_ms)
            if not verdict.fits:
                reasons[i] = verdict.reason
                if required and not verdict.matched:
                    hard.add(verdict.reason)
        return Verdict.from_reasons(reasons, hard)

    def score(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> np.ndarray | None:
        nodes: dict[int, NodeReservations] = self.nodes if store is None else store
        if not nodes:
            return None
        steer = [
            i
            for i, row in enumerate(rows.tolist())
            if (held := nodes.get(row)) is not None and (v := held.judge(pod, now_ms)).fits and v.matched
        ]
        if not steer:
            return None
        out = np.zeros(len(rows), dtype=np.int64)
        out[steer] = 100
        return out
