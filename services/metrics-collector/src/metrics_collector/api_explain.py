"""REST: why a node offers this much batch (`GET /api/v1/nodes/{node}/explain`).

The slo-controller's NodeResource reports are stored with their inputs (`node_resources.inputs`);
`core.explain_node` turns them into the batch formula's terms and what moved between reports.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query

from .api import DEFAULT_WINDOW_MS, From, StoreDep, To, _now_ms, _res
from .core import explain_node
from .core.series import QueryError, parse_time
from .store import Store, node_resources

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
