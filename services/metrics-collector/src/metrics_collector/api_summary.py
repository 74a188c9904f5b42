"""Batch and mid allocatable of the whole cluster over time (GET /api/v1/cluster/resources).

The slo-controller reports a node's batch/mid allocatable when it changes (and at least
every few minutes), not on a grid, so a node's value holds from its report until the next
one. Each bucket sums, over nodes, the last value reported before the bucket ends; the
last report before the window seeds each node so the first buckets are not empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from .core.series import bucket_of
from .store import Store, node_resources

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
