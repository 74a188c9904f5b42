"""GET /api/v1/cluster/resources: batch and mid allocatable of the whole cluster over time.

The slo-controller reports a node's batch/mid allocatable when it changes (and at least
every few minutes), not on a grid, so a node's value holds from its report until the next
one. Each bucket sums, over nodes, the last value reported before the bucket ends; the
last report before the window seeds each node so the first buckets are not empty.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query

from .core.series import QueryError, bucket_of, make_range, parse_duration, parse_time
from .store import Store, node_resources

DEFAULT_WINDOW_MS = 3_600_000
# A node whose last report is older than this no longer counts (it left, or its controller did).
STALE_MS = 3_600_000
_FIELDS = ("batch_cpu_milli", "batch_memory_bytes", "mid_cpu_milli", "mid_memory_bytes")


@dataclass(frozen=True)
class Report:
    node: str
    ts: int
    values: tuple[int, int, int, int]  # batch cpu, batch memory, mid cpu, mid memory (None -> 0)


def bucket_sums(reports: Iterable[Report], start: int, end: int, step: int, stale_ms: int = STALE_MS) -> list[dict]:
    """Per bucket [t, t+step), t aligned as /cluster/summary aligns them (a multiple of step):
    node count and the values last known at the bucket's end, summed over nodes."""
    ordered = sorted(reports, key=lambda r: r.ts)
    latest: dict[str, Report] = {}
    out = []
    i = 0
    for t in range(bucket_of(start, step), end, step):
        edge = t + step
        while i < len(ordered) and ordered[i].ts < edge:
            latest[ordered[i].node] = ordered[i]
            i += 1
        live = [r for r in latest.values() if edge - r.ts <= stale_ms]
        if not live:
            continue
        sums = [sum(r.values[k] for r in live) for k in range(4)]
        out.append({
            "ts": t,
            "nodes": len(live),
            "batch_allocatable": {"cpu_milli": sums[0], "memory_bytes": sums[1]},
            "mid_allocatable": {"cpu_milli": sums[2], "memory_bytes": sums[3]},
        })  # fmt: skip
    return out


def load_reports(store: Store, start: int, end: int, stale_ms: int = STALE_MS) -> list[Report]:
    """Reports in [start - stale, end): enough to know every live node's value at `start`."""
    t = node_resources.c
    query = sa.select(t.node, t.ts, *(t[f] for f in _FIELDS)).where(t.ts >= start - stale_ms, t.ts < end)
    with store.engine.connect() as conn:
        return [Report(r.node, int(r.ts), tuple(int(v or 0) for v in r[2:])) for r in conn.execute(query)]


def make_summary_router(store: Store) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["metrics"])

    @router.get("/cluster/resources", summary="Batch and mid allocatable of the cluster over time")
    async def cluster_resources(
        from_: Annotated[str | None, Query(alias="from", description="epoch ms or RFC 3339; default to - 1h")] = None,
        to: Annotated[str | None, Query(description="epoch ms or RFC 3339 (exclusive); default now")] = None,
        step: Annotated[str, Query(description="bucket width: 30s, 5m, 1h (a bare number is seconds)")] = "5m",
    ):
        try:
            end = parse_time(to, "to") if to is not None else int(time.time() * 1000)
            begin = parse_time(from_, "from") if from_ is not None else end - DEFAULT_WINDOW_MS
            step_ms = parse_duration(step)
            rng = make_range(begin, end, step_ms)
        except QueryError as exc:
            raise HTTPException(400, str(exc)) from None
        reports = await asyncio.to_thread(load_reports, store, rng.start, rng.end)
        return {"from": rng.start, "to": rng.end, "step_s": step_ms / 1000,
                "points": bucket_sums(reports, rng.start, rng.end, step_ms)}  # fmt: skip

    return router
