"""REST: why a node offers this much batch (`GET /api/v1/nodes/{node}/explain`), and the QoS and
descheduler decisions recorded about a pod (`GET /api/v1/explain/pods/{namespace}/{name}`).

The slo-controller's NodeResource reports are stored with their inputs (`node_resources.inputs`);
`core.explain_node` turns them into the batch formula's terms and what moved between reports.
The node agent and the descheduler put the inputs of each eviction into its event's details.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query

from . import api as _api
from .api import DEFAULT_WINDOW_MS, From, StoreDep, To, _now_ms, _res
from .core import explain_node
from .core.series import QueryError, parse_time
from .store import Store, events, node_resources, pod_samples

router = APIRouter(prefix="/api/v1", tags=["explain"])
MAX_REPORTS = 2000


def _report(r: dict) -> dict:
    def loads(text, default):
        try:
            return orjson.loads(text) if text else default
        except orjson.JSONDecodeError:
            return default

    return {"ts": r["ts"], "batch": _res(r["batch_cpu_milli"], r["batch_memory_bytes"]),
            "mid": _res(r["mid_cpu_milli"], r["mid_memory_bytes"]), "degraded": bool(r["degraded"]),
            "reason": r["reason"], "written": bool(r["written"]), "metric_ts": r["metric_ts"],
            "inputs": loads(r["inputs"], {}), "messages": loads(r["messages"], [])}  # fmt: skip


def reports(store: Store, node: str, start: int | None, end: int, limit: int) -> list[dict]:
    """The node's reports in [start, end) oldest first, plus the one before `start` (what the
    first of them changed from); with start None, the last report before `end` and its previous."""
    t = node_resources.c
    with store.engine.connect() as conn:
        before = conn.execute(
            sa.select(node_resources).where(t.node == node, t.ts < (end if start is None else start))
            .order_by(t.ts.desc()).limit(2 if start is None else 1)
        ).all()  # fmt: skip
        rows = list(reversed(before))
        if start is not None:
            rows += conn.execute(
                sa.select(node_resources).where(t.node == node, t.ts >= start, t.ts < end).order_by(t.ts).limit(limit)
            ).all()
    return [_report(dict(r._mapping)) for r in rows]


@router.get("/nodes/{node}/explain", summary="The batch formula with its values, for each report of a node")
async def explain_node_route(
    store: StoreDep,
    node: str,
    from_: From = None,
    to: To = None,
    at: Annotated[str | None, Query(description="epoch ms or RFC 3339: only the report in force then")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_REPORTS, description="at most this many reports")] = 200,
):
    """Each NodeResource the slo-controller published for the node: capacity, safety margin,
    system usage or node reserved, the HP term by policy and each HP pod's part, the write
    decision (previous values, resourceDiffThreshold), and which term moved most since the
    previous report. With `at`, only the report in force at that time (and what it changed)."""
    if at is not None:
        if from_ is not None or to is not None:
            raise QueryError("at: give either at or from/to, not both")
        found = await asyncio.to_thread(reports, store, node, None, parse_time(at, "at") + 1, 2)
        drop = len(found) - 1
    else:
        end = parse_time(to, "to") if to is not None else _now_ms()
        start = parse_time(from_, "from") if from_ is not None else end - DEFAULT_WINDOW_MS
        if end <= start:
            raise QueryError(f"to ({end}) must be after from ({start})")
        found = await asyncio.to_thread(reports, store, node, start, end, limit)
        # the report before the window is only what the first one changed from, unless it is
        # the one still in force (nothing changed in the window)
        drop = 1 if len(found) > 1 and found[0]["ts"] < start else 0
    if not found:
        raise HTTPException(404, f"node {node!r} has no stored NodeResource report up to then")
    items = explain_node.changes(found)[drop:]
    return {"node": node, "items": items, "bands": list(explain_node.BANDS)}


POD_EVENT_KINDS = ("evict", "deschedule")


def pod_events(store: Store, namespace: str, name: str, start: int, limit: int) -> list[dict]:
    """Evict and deschedule events about one pod since `start`, newest first, then, for a BE pod
    (or one whose class is not known), the CPU suppress events of the nodes it was on: a BE pod
    is suppressed with its node's BE group, not by name."""
    t, p = events.c, pod_samples.c
    like = f'%"name":"{name}"%'
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(events).where(t.ts >= start, t.kind.in_(POD_EVENT_KINDS), t.target.like(like))
            .order_by(t.ts.desc()).limit(limit)
        ).all()  # fmt: skip
        found = [_api._event_item(dict(r._mapping)) for r in rows]
        found = [e for e in found if e["target"].get("name") == name and e["target"].get("namespace") == namespace]
        sample = conn.execute(
            sa.select(p.node, p.qos).where(p.namespace == namespace, p.name == name, p.ts >= start)
            .order_by(p.ts.desc()).limit(1)
        ).first()  # fmt: skip
        nodes = sorted({e["node"] for e in found} | ({sample.node} if sample else set()))
        if sample is not None and sample.qos != "BE":
            nodes = []
        suppress = []
        for node in nodes:
            suppress += [_api._event_item(dict(r._mapping)) for r in conn.execute(
                sa.select(events).where(t.ts >= start, t.node == node, t.kind == "qos", t.action == "cpu_suppress")
                .order_by(t.ts.desc()).limit(5))]  # fmt: skip
    return found + suppress


@router.get("/explain/pods/{namespace}/{name}", summary="The QoS and descheduler decisions about a pod")
async def explain_pod_route(
    store: StoreDep,
    namespace: str,
    name: str,
    since: Annotated[str | None, Query(description="epoch ms or RFC 3339; default 24 h ago")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
):
    """The node agent's evictions (with the rule's inputs: satisfaction, usage, thresholds, the
    victim order) and the descheduler's migrations (the source's usage against its threshold,
    the victim order, the targets' room) of the pod, as their events recorded them, newest first;
    and the CPU suppress events of the nodes it was on."""
    start = parse_time(since, "since") if since else _now_ms() - 24 * 3_600_000
    found = await asyncio.to_thread(pod_events, store, namespace, name, start, limit)
    return {"pod": f"{namespace}/{name}", "since": start, "decisions": found}
