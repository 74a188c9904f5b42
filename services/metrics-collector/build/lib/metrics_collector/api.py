"""REST API for dashboards under /api/v1 (OpenAPI at /docs and /openapi.json).

Times are epoch milliseconds or RFC 3339; steps are durations (`30s`, `5m`, `1h`, a bare
number is seconds). Lists are paginated with an opaque `cursor` (`next_cursor` of the
previous page). Bad parameters answer 400 with a message naming the parameter.
"""

import asyncio
import base64
import binascii
import functools
import time
from typing import Annotated

import orjson
from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from .core import rows as R
from .core.series import (
    PERCENTILE_METHODS,
    QueryError,
    choose_resolution,
    make_range,
    parse_duration,
    parse_quantiles,
    parse_time,
    summarize,
)
from .settings import Settings
from .store import NODE_ROLLUP_METRICS, POD_ROLLUP_METRICS, Store

DEFAULT_WINDOW_MS = 3_600_000
NODE_METRICS = NODE_ROLLUP_METRICS
POD_METRICS = POD_ROLLUP_METRICS
SUMMARY_METRICS = (
    "capacity_cpu_milli", "capacity_memory_bytes", "allocatable_cpu_milli", "allocatable_memory_bytes",
    "cpu_milli", "memory_bytes",
    *(f"{b}_{kind}_{res}" for b in R.BANDS for kind in ("used", "requested")
      for res in ("cpu_milli", "memory_bytes")),
)  # fmt: skip

From = Annotated[str | None, Query(alias="from", description="epoch ms or RFC 3339; default to - 1h")]
To = Annotated[str | None, Query(description="epoch ms or RFC 3339 (exclusive); default now")]
Step = Annotated[str, Query(description="bucket width: 30s, 5m, 1h (a bare number is seconds)")]


class Page(BaseModel):
    items: list[dict]
    next_cursor: str | None = None


def _bad(message: str) -> HTTPException:
    return HTTPException(status_code=400, detail=message)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _window(from_: str | None, to: str | None) -> tuple[int, int]:
    end = parse_time(to, "to") if to is not None else _now_ms()
    start = parse_time(from_, "from") if from_ is not None else end - DEFAULT_WINDOW_MS
    return start, end


def _metrics(text: str | None, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    if not text:
        return default
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in allowed]
    if unknown or not names:
        raise QueryError(f"metrics: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(allowed)}")
    return names


def _encode_cursor(value) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def _decode_cursor(text: str):
    try:
        return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, orjson.JSONDecodeError, ValueError):
        raise QueryError("cursor: not a cursor returned by this API") from None


def _res(cpu, mem) -> dict | None:
    return None if cpu is None else {"cpu_milli": int(cpu), "memory_bytes": int(mem)}


def _node_item(r: dict) -> dict:
    return {
        "node": r["node"],
        "ts": r["ts"],
        "pods": r["pods"],
        "capacity": _res(r["capacity_cpu_milli"], r["capacity_memory_bytes"]),
        "allocatable": _res(r["allocatable_cpu_milli"], r["allocatable_memory_bytes"]),
        "usage": _res(r["cpu_milli"], r["memory_bytes"]),
        "system_usage": _res(r["system_cpu_milli"], r["system_memory_bytes"]),
        "prod_usage": _res(r["prod_used_cpu_milli"], r["prod_used_memory_bytes"]),
        "prod_requested": _res(r["prod_requested_cpu_milli"], r["prod_requested_memory_bytes"]),
        "mid_usage": _res(r["mid_used_cpu_milli"], r["mid_used_memory_bytes"]),
        "batch_usage": _res(r["batch_used_cpu_milli"] + r["free_used_cpu_milli"],
                            r["batch_used_memory_bytes"] + r["free_used_memory_bytes"]),
        # batch and free pods both draw on koordinator.sh/batch-*
        "batch_allocated": _res(r["batch_requested_cpu_milli"] + r["free_requested_cpu_milli"],
                                r["batch_requested_memory_bytes"] + r["free_requested_memory_bytes"]),
        "batch_allocatable": _res(r["batch_allocatable_cpu_milli"], r["batch_allocatable_memory_bytes"]),
        "mid_allocatable": _res(r["mid_allocatable_cpu_milli"], r["mid_allocatable_memory_bytes"]),
        "degraded": None if r["resource_ts"] is None else bool(r["degraded"]),
        "resources_ts": r["resource_ts"],
    }  # fmt: skip


def _pod_item(r: dict) -> dict:
    return {
        "uid": r["uid"], "namespace": r["namespace"], "name": r["name"], "node": r["node"], "ts": r["ts"],
        "owner": {"kind": r["owner_kind"], "name": r["owner_name"]} if r["owner_kind"] else None,
        "qos": r["qos"], "priority_class": r["priority_class"], "band": r["band"], "priority": r["priority"],
        "requests": _res(r["requests_cpu_milli"], r["requests_memory_bytes"]),
        "limits": _res(r["limits_cpu_milli"], r["limits_memory_bytes"]),
        "batch_requests": _res(r["batch_requests_cpu_milli"], r["batch_requests_memory_bytes"]),
        "usage": _res(r["cpu_milli"], r["memory_bytes"]),
    }  # fmt: skip


def make_router(store: Store, settings: Settings) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["metrics"])
    policy = settings.retention()
    max_page = settings.api_max_page
    Limit = Annotated[int, Query(ge=1, le=max_page, description=f"page size, at most {max_page}")]

    async def run(fn, *args, **kwargs):
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except QueryError as exc:
            raise _bad(str(exc)) from None

    def guard(fn):
        """Parameter errors raised while parsing become 400 with their message."""

        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            try:
                return await fn(*args, **kwargs)
            except QueryError as exc:
                raise _bad(str(exc)) from None

        return wrapper

    async def series(family: str, key: dict, exists: bool, from_, to, step, metrics_text, allowed, default):
        if not exists:
            what = "node" if family == "node" else "pod"
            raise HTTPException(404, f"{what} {next(iter(key.values()))!r} has no stored samples")
        start, end = _window(from_, to)
        step_ms = parse_duration(step)
        rng = make_range(start, end, step_ms)
        metrics = _metrics(metrics_text, allowed, default)
        resolution = choose_resolution(start, step_ms, _now_ms(), policy.raw_ms, policy.minute_ms)
        buckets = await run(store.series, family, key, metrics, rng.start, rng.end, step_ms, resolution)
        return {
            **key,
            "from": rng.start,
            "to": rng.end,
            "step_s": step_ms / 1000,
            "resolution": resolution,
            "metrics": list(metrics),
            "points": [
                {
                    "ts": b.ts,
                    "samples": b.samples,
                    "avg": {m: b.avg(i) for i, m in enumerate(metrics)},
                    "max": {m: b.maxes[i] for i, m in enumerate(metrics)},
                }
                for b in buckets
            ],
        }

    async def percentiles(family, key, exists, from_, to, metric, q, method, allowed):
        if not exists:
            raise HTTPException(404, f"{family} {next(iter(key.values()))!r} has no stored samples")
        if metric not in allowed:
            raise QueryError(f"metric: unknown {metric!r}; known: {', '.join(allowed)}")
        if method not in PERCENTILE_METHODS:
            raise QueryError(f"method: {method!r} is not one of {', '.join(PERCENTILE_METHODS)}")
        quantiles = parse_quantiles(q)
        start, end = _window(from_, to)
        make_range(start, end, end - start)
        values = await run(store.values, family, key, metric, start, end)
        return {**key, "from": start, "to": end, "metric": metric, "method": method,
                **summarize(values, quantiles, method)}  # fmt: skip

    @router.get("/nodes", response_model=Page, summary="Nodes with their latest capacity, usage and batch resources")
    @guard
    async def list_nodes(limit: Limit = 100, cursor: str | None = None,
                         since: Annotated[str | None, Query(description="nodes reporting since; default: 1h ago")] = None):  # fmt: skip
        after = _decode_cursor(cursor) if cursor else None
        if after is not None and not isinstance(after, str):
            raise QueryError("cursor: not a cursor returned by this API")
        since_ms = parse_time(since, "since") if since else _now_ms() - DEFAULT_WINDOW_MS
        found = await run(store.nodes, after, limit + 1, since_ms)
        items = [_node_item(r) for r in found[:limit]]
        return Page(items=items, next_cursor=_encode_cursor(items[-1]["node"]) if len(found) > limit else None)

    @router.get("/nodes/{node}/usage", summary="Node usage time series, downsampled to `step`")
    @guard
    async def node_usage(node: str, from_: From = None, to: To = None, step: Step = "60s",
                         metrics: Annotated[str | None, Query(description="comma-separated; default cpu, memory")] = None):  # fmt: skip
        exists = await run(store.node_exists, node)
        return await series("node", {"node": node}, exists, from_, to, step, metrics, NODE_METRICS,
                            ("cpu_milli", "memory_bytes"))  # fmt: skip

    @router.get("/nodes/{node}/percentiles", summary="Percentiles of one node metric over a window (raw samples)")
    @guard
    async def node_percentiles(node: str, from_: From = None, to: To = None, metric: str = "cpu_milli",
                               q: str = "0.5,0.9,0.95,0.99", method: str = "linear"):  # fmt: skip
        exists = await run(store.node_exists, node)
        return await percentiles("node", {"node": node}, exists, from_, to, metric, q, method, NODE_METRICS)

    @router.get("/nodes/{node}/resources", summary="Batch and mid allocatable history of a node")
    @guard
    async def node_resources(node: str, from_: From = None, to: To = None, limit: Limit = 1000):
        start, end = _window(from_, to)
        make_range(start, end, end - start)
        found = await run(store.node_resources_history, node, start, end, limit)
        return {"node": node, "from": start, "to": end, "items": [
            {"ts": r["ts"], "batch": _res(r["batch_cpu_milli"], r["batch_memory_bytes"]),
             "mid": _res(r["mid_cpu_milli"], r["mid_memory_bytes"]), "degraded": bool(r["degraded"]),
             "reason": r["reason"], "written": bool(r["written"]), "metric_ts": r["metric_ts"]}
            for r in found]}  # fmt: skip

    @router.get("/pods", response_model=Page, summary="Pods seen recently with their latest sample")
    @guard
    async def list_pods(node: str | None = None, namespace: str | None = None, limit: Limit = 100,
                        cursor: str | None = None,
                        since: Annotated[str | None, Query(description="default: 1h ago")] = None):  # fmt: skip
        after = _decode_cursor(cursor) if cursor else None
        if after is not None and not isinstance(after, str):
            raise QueryError("cursor: not a cursor returned by this API")
        since_ms = parse_time(since, "since") if since else _now_ms() - DEFAULT_WINDOW_MS
        found = await run(store.pods, node, namespace, after, limit + 1, since_ms)
        items = [_pod_item(r) for r in found[:limit]]
        return Page(items=items, next_cursor=_encode_cursor(items[-1]["uid"]) if len(found) > limit else None)

    @router.get("/pods/{uid}/usage", summary="Pod usage time series, downsampled to `step`")
    @guard
    async def pod_usage(uid: str, from_: From = None, to: To = None, step: Step = "60s",
                        metrics: str | None = None):  # fmt: skip
        exists = await run(store.pod, uid) is not None
        return await series("pod", {"uid": uid}, exists, from_, to, step, metrics, POD_METRICS,
                            ("cpu_milli", "memory_bytes"))  # fmt: skip

    @router.get("/pods/{uid}/percentiles", summary="Percentiles of one pod metric over a window (raw samples)")
    @guard
    async def pod_percentiles(uid: str, from_: From = None, to: To = None, metric: str = "cpu_milli",
                              q: str = "0.5,0.9,0.95,0.99", method: str = "linear"):  # fmt: skip
        exists = await run(store.pod, uid) is not None
        return await percentiles("pod", {"uid": uid}, exists, from_, to, metric, q, method, POD_METRICS)

    @router.get("/cluster/summary", summary="Capacity, allocated and used per priority band over time")
    @guard
    async def cluster_summary(from_: From = None, to: To = None, step: Step = "5m"):
        start, end = _window(from_, to)
        step_ms = parse_duration(step)
        rng = make_range(start, end, step_ms)
        resolution = choose_resolution(start, step_ms, _now_ms(), policy.raw_ms, policy.minute_ms)
        found = await run(store.cluster_summary, rng.start, rng.end, step_ms, resolution, SUMMARY_METRICS)
        points = []
        for r in found:
            bands = {}
            for b in R.BANDS:
                bands[b] = {
                    "used": {"cpu_milli": r[f"{b}_used_cpu_milli"], "memory_bytes": r[f"{b}_used_memory_bytes"]},
                    "allocated": {"cpu_milli": r[f"{b}_requested_cpu_milli"],
                                  "memory_bytes": r[f"{b}_requested_memory_bytes"]},
                }  # fmt: skip
            points.append({
                "ts": r["ts"], "nodes": r["nodes"],
                "capacity": {"cpu_milli": r["capacity_cpu_milli"], "memory_bytes": r["capacity_memory_bytes"]},
                "allocatable": {"cpu_milli": r["allocatable_cpu_milli"], "memory_bytes": r["allocatable_memory_bytes"]},
                "used": {"cpu_milli": r["cpu_milli"], "memory_bytes": r["memory_bytes"]},
                "bands": bands,
            })  # fmt: skip
        return {"from": rng.start, "to": rng.end, "step_s": step_ms / 1000, "resolution": resolution,
                "points": points}  # fmt: skip

    @router.get("/events", response_model=Page, summary="Auditable actions, newest first")
    @guard
    async def list_events(kind: str | None = None, node: str | None = None, action: str | None = None,
                          from_: Annotated[str | None, Query(alias="from")] = None, to: str | None = None,
                          limit: Limit = 100, cursor: str | None = None):  # fmt: skip
        start = parse_time(from_, "from") if from_ is not None else None
        end = parse_time(to, "to") if to is not None else None
        if start is not None and end is not None and end <= start:
            raise QueryError(f"to ({end}) must be after from ({start})")
        before = None
        if cursor:
            value = _decode_cursor(cursor)
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
                    and isinstance(value[1], str)):  # fmt: skip
                raise QueryError("cursor: not a cursor returned by this API")
            before = (value[0], value[1])
        found = await run(store.events, kind=kind, node=node, action=action, start=start, end=end,
                          before=before, limit=limit + 1)  # fmt: skip
        items = [
            {**{k: r[k] for k in ("msg_id", "ts", "kind", "node", "action", "reason", "source")},
             "dry_run": bool(r["dry_run"]), "target": orjson.loads(r["target"]), "details": orjson.loads(r["details"])}
            for r in found[:limit]
        ]  # fmt: skip
        last = items[-1] if items else None
        nxt = _encode_cursor([last["ts"], last["msg_id"]]) if last and len(found) > limit else None
        return Page(items=items, next_cursor=nxt)

    return router
