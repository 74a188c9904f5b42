"""REST API: /api/v1/recommendations (filtered, paginated) and one workload by key.

A recommendation with less than a day of history (VPA's confidence below 1) is marked
`provisional` and left out of the workload's `estimated_savings` (its part is
`provisional_savings`), so dashboards and koordctl add up only recommendations worth acting on.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from koordcommon.quantity import format_quantity

from .core.engine import ContainerResult, RecommenderState, WorkloadResult
from .core.estimator import Estimate
from .core.profile import LEVELS, Stats
from .core.workload import WorkloadKey

router = APIRouter(prefix="/api/v1", tags=["recommendations"])

# A recommendation whose history is shorter than this many confidence intervals (one day each,
# VPA's confidence) is provisional: shown as such, and left out of the estimated savings.
PROVISIONAL_BELOW = 1.0


def provisional(confidence: float) -> bool:
    return confidence < PROVISIONAL_BELOW


def _sum(parts: list[Estimate]) -> Estimate | None:
    if not parts:
        return None
    return Estimate(sum(p.cpu_milli for p in parts), sum(p.memory_bytes for p in parts))


def _state(request: Request) -> RecommenderState:
    state = getattr(request.app.state, "recommender_state", None)
    if state is None:
        raise HTTPException(503, "recommender state is not loaded yet")
    return state


def _amount(e: Estimate | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "cpu_milli": e.cpu_milli,
        "memory_bytes": e.memory_bytes,
        "cpu": format_quantity("cpu", e.cpu_milli),
        "memory": format_quantity("memory", e.memory_bytes),
    }


def _stats(s: Stats | None, scale: float) -> dict[str, Any] | None:
    if s is None:
        return None
    return {k: round(v * scale) for k, v in s.as_dict().items()} | {"samples": s.count}


def _container(c: ContainerResult) -> dict[str, Any]:
    profile = {}
    for level in LEVELS:
        cpu, mem = c.windows.get(level.window_s, (None, None))
        profile[level.name] = {"cpu_milli": _stats(cpu, 1000.0), "memory_bytes": _stats(mem, 1.0)}
    return {
        "container": c.container,
        "recommendation": {
            "target": _amount(c.estimate.target),
            "lower_bound": _amount(c.estimate.lower_bound),
            "upper_bound": _amount(c.estimate.upper_bound),
            "confidence": round(c.estimate.confidence, 4),
        },
        "provisional": provisional(c.estimate.confidence),
        "current_requests": _amount(c.current),
        "replicas": c.replicas,
        "estimated_savings": _amount(c.savings),
        "profile": profile,
        "diurnal": {
            "cpu_milli": [None if v is None else round(v * 1000) for v in c.diurnal_cpu],
            "memory_bytes": [None if v is None else round(v) for v in c.diurnal_memory],
        },
        "samples": c.total_samples,
        "last_sample_ts": c.last_sample_ts,
        # the method behind the target and what it was made of; a workload set to another
        # method shows VPA's until that method has samples of its own
        "method": {"used": c.method, "configured": c.configured_method, "explanation": c.explanation},
    }


def workload_json(r: WorkloadResult) -> dict[str, Any]:
    return {
        "namespace": r.workload.namespace,
        "kind": r.workload.kind,
        "name": r.workload.name,
        "containers": [_container(c) for c in r.containers],
        # savings count only recommendations that are not provisional
        "estimated_savings": _amount(_sum([c.savings for c in r.containers
                                           if c.savings is not None and not provisional(c.estimate.confidence)])),
        "provisional_savings": _amount(_sum([c.savings for c in r.containers
                                             if c.savings is not None and provisional(c.estimate.confidence)])),
        "provisional": all(provisional(c.estimate.confidence) for c in r.containers),
    }  # fmt: skip


@router.get("/recommendations")
def list_recommendations(
    request: Request,
    namespace: Annotated[str | None, Query(max_length=253)] = None,
    kind: Annotated[str | None, Query(max_length=64)] = None,
    name: Annotated[str | None, Query(max_length=253)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """Workloads with their per-container recommendation, profile, requests and savings."""
    state = _state(request)
    keys = [
        k
        for k in state.workloads()
        if (namespace is None or k.namespace == namespace)
        and (kind is None or k.kind.lower() == kind.lower())
        and (name is None or k.name == name)
    ]
    page = keys[offset : offset + limit]
    items = [workload_json(r) for r in (state.recommend(k, explain=True) for k in page) if r is not None]
    return {"items": items, "total": len(keys), "limit": limit, "offset": offset}


@router.get("/recommendations/{namespace}/{kind}/{name}")
def get_recommendation(request: Request, namespace: str, kind: str, name: str) -> dict[str, Any]:
    state = _state(request)
    for k in state.workloads():
        if k.namespace == namespace and k.kind.lower() == kind.lower() and k.name == name:
            result = state.recommend(k, explain=True)
            if result is not None:
                return workload_json(result)
    raise HTTPException(404, f"no recommendation for {WorkloadKey(namespace, kind, name)}")
