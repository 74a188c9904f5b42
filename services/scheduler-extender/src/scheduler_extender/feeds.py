"""Adapters that keep `ClusterState` current: the bus (NodeMetric, NodeResource, the node agents'
CPU topologies, usage profiles) and the cluster port's watch (nodes, pods, Reservations).

The bus feeds start from the latest message of every node (`last_per_subject`) and then follow
live; only the newest state matters, so nothing is acknowledged or stored. The cluster feed
registers its watch before listing, so no change between the list and the watch is lost (the
state's updates are idempotent).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.cluster.port import ClusterEvent, ClusterPort
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.schemas import NodeMetric, NodeResource, NodeTopology, Recommendation

from .core.estimator import profile_from_recommendation
from .core.state import ClusterState

log = logging.getLogger(__name__)


class FeedStatus:
    """What readiness needs to know: the cluster was listed once."""

    def __init__(self) -> None:
        self.cluster_listed = asyncio.Event()
        self.metrics_seen = 0
        self.node_resources_seen = 0
        self.topologies_seen = 0
        self.profiles_seen = 0


async def follow_metrics(bus: Bus, state: ClusterState, status: FeedStatus) -> None:
    async for d in bus.tail(subjects.NODEMETRIC_STREAM, "koord.nodemetric.>", NodeMetric, deliver="last_per_subject"):
        state.apply_metric(d.msg)
        status.metrics_seen += 1


async def follow_node_resources(bus: Bus, state: ClusterState, status: FeedStatus) -> None:
    async for d in bus.tail(
        subjects.NODERESOURCE_STREAM, "koord.noderesource.>", NodeResource, deliver="last_per_subject"
    ):
        state.apply_node_resource(d.msg)
        status.node_resources_seen += 1


async def follow_topologies(bus: Bus, state: ClusterState, status: FeedStatus) -> None:
    async for d in bus.tail(
        subjects.NODETOPOLOGY_STREAM, "koord.nodetopology.>", NodeTopology, deliver="last_per_subject"
    ):
        state.apply_topology(d.msg)
        status.topologies_seen += 1


async def follow_profiles(bus: Bus, state: ClusterState, status: FeedStatus, percentile: str, window_s: int) -> None:
    async for d in bus.tail(
        subjects.RECOMMENDATION_STREAM, "koord.recommendation.>", Recommendation, deliver="last_per_subject"
    ):
        rec = d.msg
        key = (rec.namespace, rec.owner_kind, rec.owner_name)
        state.apply_profile(key, profile_from_recommendation(rec.containers, percentile, window_s))
        status.profiles_seen += 1


def apply_event(state: ClusterState, e: ClusterEvent) -> None:
    if e.kind == "Node" and isinstance(e.obj, NodeRecord):
        if e.type == "DELETED":
            state.remove_node(e.obj.name)
        else:
            state.apply_node(e.obj)
    elif e.kind == "Pod" and isinstance(e.obj, PodRecord):
        if e.type == "DELETED":
            state.remove_pod(e.obj.key)
            state.forget_pod(e.obj.uid)
        else:
            state.apply_pod(e.obj)
    elif e.kind == "Custom" and e.custom_kind == "Reservation" and isinstance(e.obj, dict):
        if e.type == "DELETED":
            name = (e.obj.get("metadata") or {}).get("name")
            if name:
                state.remove_reservation(name)
        else:
            _apply_reservation(state, e.obj)


def _apply_reservation(state: ClusterState, obj: dict[str, Any]) -> None:
    try:
        state.apply_reservation(obj)
    except (TypeError, ValueError) as exc:
        log.warning("reservation ignored", extra={"error": str(exc)})


async def follow_cluster(cluster: ClusterPort, state: ClusterState, status: FeedStatus) -> None:
    events = cluster.watch()
    nodes = await cluster.list_nodes()
    pods = await cluster.list_pods()
    state.apply_many(nodes=nodes, pods=pods, initial=True)
    try:
        reservations = await cluster.list_custom("Reservation")
    except Exception as exc:  # noqa: BLE001 - any backend error here means: no Reservation CRD, reservations off
        log.warning("cannot list reservations", extra={"error": repr(exc)})
        reservations = []
    for obj in reservations:
        _apply_reservation(state, obj)
    status.cluster_listed.set()
    log.info("cluster listed", extra=state.summary())
    async for e in events:
        try:
            apply_event(state, e)
        except Exception:
            log.exception("cluster event not applied", extra={"kind": e.kind, "type": e.type})


async def prune_periodically(state: ClusterState, period_s: float = 5.0) -> None:
    while True:
        await asyncio.sleep(period_s)
        state.prune()
