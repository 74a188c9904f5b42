"""REST API for dashboards under /api/v1 (OpenAPI at /docs and /openapi.json).

Times are epoch milliseconds or RFC 3339; steps are durations (`30s`, `5m`, `1h`, a bare
number is seconds). Lists are paginated with an opaque `cursor` (`next_cursor` of the
previous page). Bad parameters answer 400 with a message naming the parameter.

`mount(app, store, settings)` serves the routes on an app: the handlers find the store and
the settings on `app.state` (FastAPI dependencies), and a `QueryError` raised while parsing
becomes that 400.
"""

import asyncio
import base64
import binascii
import time
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from . import api_history, api_summary
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

router = APIRouter(prefix="/api/v1", tags=["metrics"])
METRICS_DOC = ("comma-separated metric names, each with or without its unit (cpu or cpu_milli, memory or "
               "memory_bytes, prod_used_cpu or prod_used_cpu_milli...; a node has every column of its samples); "
               "default cpu, memory. Points are keyed by the full names")  # fmt: skip


def mount(app: FastAPI, store: Store, settings: Settings) -> None:
    """Serve the API on `app` from `store`, within the limits of `settings`."""
    app.state.store = store
    app.state.settings = settings
    app.add_exception_handler(QueryError, _bad_parameter)
    app.include_router(router)
    app.include_router(api_history.router)


async def _bad_parameter(request: Request, exc: QueryError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=400)


# ----------------------------------------------------------------------------- dependencies
# (coroutines: FastAPI would run plain functions in a worker thread)


async def _store(request: Request) -> Store:
    return request.app.state.store


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


StoreDep = Annotated[Store, Depends(_store)]
SettingsDep = Annotated[Settings, Depends(_settings)]

From = Annotated[str | None, Query(alias="from", description="epoch ms or RFC 3339; default to - 1h")]
To = Annotated[str | None, Query(description="epoch ms or RFC 3339 (exclusive); default now")]
Step = Annotated[str, Query(description="bucket width: 30s, 5m, 1h (a bare number is seconds)")]
_LIMIT_DOC = f"page size, at most api_max_page ({Settings.model_fields['api_max_page'].default} unless configured)"


def _within_max_page(request: Request, settings: Settings, limit: int) -> int:
    # The bound is a setting, so it is checked here rather than declared on the parameter;
    # the answer is the one a declared bound gives (422), and a default is not checked.
    top = settings.api_max_page
    if limit > top and "limit" in request.query_params:
        raise RequestValidationError([{
            "type": "less_than_equal", "loc": ("query", "limit"), "msg": f"Input should be less than or equal to {top}",
            "input": request.query_params["limit"], "ctx": {"le": top},
        }])  # fmt: skip
    return limit


async def _page_limit(request: Request, settings: SettingsDep,
                      limit: Annotated[int, Query(ge=1, description=_LIMIT_DOC)] = 100) -> int:  # fmt: skip
    return _within_max_page(request, settings, limit)


async def _history_limit(request: Request, settings: SettingsDep,
                         limit: Annotated[int, Query(ge=1, description=_LIMIT_DOC)] = 1000) -> int:  # fmt: skip
    return _within_max_page(request, settings, limit)


PageLimit = Annotated[int, Depends(_page_limit)]
HistoryLimit = Annotated[int, Depends(_history_limit)]


class Page(BaseModel):
    items: list[dict]
    next_cursor: str | None = None


# ----------------------------------------------------------------------------- decoding


def _now_ms() -> int:
    return int(time.time() * 1000)


def _window(from_: str | None, to: str | None) -> tuple[int, int]:
    end = parse_time(to, "to") if to is not None else _now_ms()
    start = parse_time(from_, "from") if from_ is not None else end - DEFAULT_WINDOW_MS
    return start, end


def _since(since: str | None) -> int:
    return parse_time(since, "since") if since else _now_ms() - DEFAULT_WINDOW_MS


def metric_aliases(allowed: tuple[str, ...]) -> dict[str, str]:
    """Each metric by its name and by its short name without the unit (`cpu` for `cpu_milli`,
    `prod_used_memory` for `prod_used_memory_bytes`)."""
    out = {m: m for m in allowed}
    for m in allowed:
        for unit in ("_milli", "_bytes"):
            if m.endswith(unit):
                out.setdefault(m[: -len(unit)], m)
    return out


def _metric(name: str, allowed: tuple[str, ...], param: str) -> str:
    found = metric_aliases(allowed).get(name.strip())
    if found is None:
        raise QueryError(f"{param}: unknown {name!r}; known: {', '.join(allowed)} (or without _milli / _bytes)")
    return found


def _metrics(text: str | None, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    if not text:
        return default
    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise QueryError(f"metrics: unknown (none given); known: {', '.join(allowed)}")
    return tuple(_metric(m, allowed, "metrics") for m in names)


def _encode_cursor(value) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


def _decode_cursor(text: str):
    try:
        return orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, orjson.JSONDecodeError, ValueError):
        raise QueryError("cursor: not a cursor returned by this API") from None


def _name_cursor(text: str | None) -> str | None:
    """The last name of the previous page (node name, pod uid)."""
    after = _decode_cursor(text) if text else None
    if after is not None and not isinstance(after, str):
        raise QueryError("cursor: not a cursor returned by this API")
    return after


def _event_cursor(text: str | None) -> tuple[int, str] | None:
    """The (ts, msg_id) of the last event of the previous page."""
    if not text:
        return None
    value = _decode_cursor(text)
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
            and isinstance(value[1], str)):  # fmt: skip
        raise QueryError("cursor: not a cursor returned by this API")
    return value[0], value[1]


# ----------------------------------------------------------------------------- encoding


def _res(cpu, mem) -> dict | None:
    return None if cpu is None else {"cpu_milli": int(cpu), "memory_bytes": int(mem)}


def _page(items: list[dict], more: bool, cursor_of) -> Page:
    return Page(items=items, next_cursor=_encode_cursor(cursor_of(items[-1])) if more and items else None)


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


def _event_item(r: dict) -> dict:
    return {**{k: r[k] for k in ("msg_id", "ts", "kind", "node", "action", "reason", "source")},
            "dry_run": bool(r["dry_run"]), "target": orjson.loads(r["target"]), "details": orjson.loads(r["details"])}  # fmt: skip


def _summary_point(r: dict) -> dict:
    bands = {
        b: {
            "used": {"cpu_milli": r[f"{b}_used_cpu_milli"], "memory_bytes": r[f"{b}_used_memory_bytes"]},
            "allocated": {"cpu_milli": r[f"{b}_requested_cpu_milli"], "memory_bytes": r[f"{b}_requested_memory_bytes"]},
        }
        for b in R.BANDS
    }
    return {
        "ts": r["ts"], "nodes": r["nodes"],
        "capacity": {"cpu_milli": r["capacity_cpu_milli"], "memory_bytes": r["capacity_memory_bytes"]},
        "allocatable": {"cpu_milli": r["allocatable_cpu_milli"], "memory_bytes": r["allocatable_memory_bytes"]},
        "used": {"cpu_milli": r["cpu_milli"], "memory_bytes": r["memory_bytes"]},
        "bands": bands,
    }  # fmt: skip


# ----------------------------------------------------------------------------- shared by nodes and pods


def _no_samples(family: str, key: dict) -> HTTPException:
    return HTTPException(404, f"{family} {next(iter(key.values()))!r} has no stored samples")


async def _series(store: Store, settings: Settings, family: str, key: dict, from_, to, step, metrics_text,
                  allowed: tuple[str, ...]) -> dict:  # fmt: skip
    start, end = _window(from_, to)
    step_ms = parse_duration(step)
    rng = make_range(start, end, step_ms)
    metrics = _metrics(metrics_text, allowed, ("cpu_milli", "memory_bytes"))
    policy = settings.retention()
    resolution = choose_resolution(start, step_ms, _now_ms(), policy.raw_ms, policy.minute_ms)
    buckets = await asyncio.to_thread(store.series, family, key, metrics, rng.start, rng.end, step_ms, resolution)
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


async def _percentiles(store: Store, family: str, key: dict, from_, to, metric, q, method,
                       allowed: tuple[str, ...]) -> dict:  # fmt: skip
    metric = _metric(metric, allowed, "metric")
    if method not in PERCENTILE_METHODS:
        raise QueryError(f"method: {method!r} is not one of {', '.join(PERCENTILE_METHODS)}")
    quantiles = parse_quantiles(q)
    start, end = _window(from_, to)
    make_range(start, end, end - start)
    values = await asyncio.to_thread(store.values, family, key, metric, start, end)
    return {**key, "from": start, "to": end, "metric": metric, "method": method,
            **summarize(values, quantiles, method)}  # fmt: skip


async def _node_exists(store: Store, node: str) -> dict:
    key = {"node": node}
    if not await asyncio.to_thread(store.node_exists, node):
        raise _no_samples("node", key)
    return key


async def _pod_exists(store: Store, uid: str) -> dict:
    key = {"uid": uid}
    if await asyncio.to_thread(store.pod, uid) is None:
        raise _no_samples("pod", key)
    return key


# ----------------------------------------------------------------------------- routes


@router.get("/nodes", response_model=Page, summary="Nodes with their latest capacity, usage and batch resources")
async def list_nodes(store: StoreDep, limit: PageLimit, cursor: str | None = None,
                     since: Annotated[str | None, Query(description="nodes reporting since; default: 1h ago")] = None):  # fmt: skip
    found = await asyncio.to_thread(store.nodes, _name_cursor(cursor), limit + 1, _since(since))
    return _page([_node_item(r) for r in found[:limit]], len(found) > limit, lambda item: item["node"])


@router.get("/nodes/{node}/usage", summary="Node usage time series, downsampled to `step`")
async def node_usage(store: StoreDep, settings: SettingsDep, node: str, from_: From = None, to: To = None,
                     step: Step = "60s",
                     metrics: Annotated[str | None, Query(description=METRICS_DOC)] = None):  # fmt: skip
    key = await _node_exists(store, node)
    return await _series(store, settings, "node", key, from_, to, step, metrics, NODE_METRICS)


@router.get("/nodes/{node}/percentiles", summary="Percentiles of one node metric over a window (raw samples)")
async def node_percentiles(store: StoreDep, node: str, from_: From = None, to: To = None, metric: str = "cpu_milli",
                           q: str = "0.5,0.9,0.95,0.99", method: str = "linear"):  # fmt: skip
    key = await _node_exists(store, node)
    return await _percentiles(store, "node", key, from_, to, metric, q, method, NODE_METRICS)


@router.get("/nodes/{node}/resources", summary="Batch and mid allocatable history of a node")
async def node_resources(store: StoreDep, node: str, limit: HistoryLimit, from_: From = None, to: To = None):
    start, end = _window(from_, to)
    make_range(start, end, end - start)
    found = await asyncio.to_thread(store.node_resources_history, node, start, end, limit)
    return {"node": node, "from": start, "to": end, "items": [
        {"ts": r["ts"], "batch": _res(r["batch_cpu_milli"], r["batch_memory_bytes"]),
         "mid": _res(r["mid_cpu_milli"], r["mid_memory_bytes"]), "degraded": bool(r["degraded"]),
         "reason": r["reason"], "written": bool(r["written"]), "metric_ts": r["metric_ts"]}
        for r in found]}  # fmt: skip


@router.get("/pods", response_model=Page, summary="Pods seen recently with their latest sample")
async def list_pods(store: StoreDep, limit: PageLimit, node: str | None = None, namespace: str | None = None,
                    cursor: str | None = None,
                    since: Annotated[str | None, Query(description="default: 1h ago")] = None):  # fmt: skip
    found = await asyncio.to_thread(store.pods, node, namespace, _name_cursor(cursor), limit + 1, _since(since))
    return _page([_pod_item(r) for r in found[:limit]], len(found) > limit, lambda item: item["uid"])


@router.get("/pods/{uid}/usage", summary="Pod usage time series, downsampled to `step`")
async def pod_usage(store: StoreDep, settings: SettingsDep, uid: str, from_: From = None, to: To = None,
                    step: Step = "60s",
                    metrics: Annotated[str | None, Query(description=METRICS_DOC)] = None):  # fmt: skip
    key = await _pod_exists(store, uid)
    return await _series(store, settings, "pod", key, from_, to, step, metrics, POD_METRICS)


@router.get("/pods/{uid}/percentiles", summary="Percentiles of one pod metric over a window (raw samples)")
async def pod_percentiles(store: StoreDep, uid: str, from_: From = None, to: To = None, metric: str = "cpu_milli",
                          q: str = "0.5,0.9,0.95,0.99", method: str = "linear"):  # fmt: skip
    key = await _pod_exists(store, uid)
    return await _percentiles(store, "pod", key, from_, to, metric, q, method, POD_METRICS)


@router.get("/cluster/summary", summary="Capacity, allocated and used per priority band over time")
async def cluster_summary(store: StoreDep, settings: SettingsDep, from_: From = None, to: To = None,
                          step: Step = "5m"):  # fmt: skip
    start, end = _window(from_, to)
    step_ms = parse_duration(step)
    rng = make_range(start, end, step_ms)
    policy = settings.retention()
    resolution = choose_resolution(start, step_ms, _now_ms(), policy.raw_ms, policy.minute_ms)
    found = await asyncio.to_thread(store.cluster_summary, rng.start, rng.end, step_ms, resolution, SUMMARY_METRICS)
    return {"from": rng.start, "to": rng.end, "step_s": step_ms / 1000, "resolution": resolution,
            "points": [_summary_point(r) for r in found]}  # fmt: skip


@router.get("/cluster/resources", summary="Batch and mid allocatable of the cluster over time")
async def cluster_resources(store: StoreDep, from_: From = None, to: To = None, step: Step = "5m"):
    start, end = _window(from_, to)
    step_ms = parse_duration(step)
    rng = make_range(start, end, step_ms)
    reports = await asyncio.to_thread(api_summary.load_reports, store, rng.start, rng.end)
    return {"from": rng.start, "to": rng.end, "step_s": step_ms / 1000,
            "points": api_summary.bucket_sums(reports, rng.start, rng.end, step_ms)}  # fmt: skip


@router.get("/events", response_model=Page, summary="Auditable actions, newest first")
async def list_events(store: StoreDep, limit: PageLimit, kind: str | None = None, node: str | None = None,
                      action: str | None = None, from_: Annotated[str | None, Query(alias="from")] = None,
                      to: str | None = None, cursor: str | None = None):  # fmt: skip
    start = parse_time(from_, "from") if from_ is not None else None
    end = parse_time(to, "to") if to is not None else None
    if start is not None and end is not None and end <= start:
        raise QueryError(f"to ({end}) must be after from ({start})")
    found = await asyncio.to_thread(store.events, kind=kind, node=node, action=action, start=start, end=end,
                                    before=_event_cursor(cursor), limit=limit + 1)  # fmt: skip
    return _page([_event_item(r) for r in found[:limit]], len(found) > limit, lambda item: [item["ts"], item["msg_id"]])
