"""REST view of the last round (classes, abnormal nodes, the plan and its outcomes) and of the
migration jobs."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, Request

router = APIRouter(prefix="/api/v1")


@router.get("/plan")
async def last_plan(request: Request) -> dict:
    report = getattr(request.app.state, "last_report", None)
    if report is None:
        return {"ran": False}
    plan = report.plan
    return {
        "ran": True,
        "classes": plan.classes,
        "abnormal": plan.abnormal,
        "migrations": [
            {
                "pod": m.pod.key,
                "source": m.source,
                "target": m.target,
                "reason": m.reason,
                "outcome": report.outcomes.get(m.pod.key),
            }
            for m in plan.migrations
        ],
        "skipped": [{"pod": s.pod_key, "node": s.node, "reason": s.reason} for s in plan.skipped],
        "notes": plan.notes,
    }


def _job(j) -> dict:
    return {
        "pod": j.pod_key,
        "workload": j.migration.pod.workload,
        "source": j.migration.source,
        "target": j.migration.target,
        "mode": j.mode,
        "phase": j.phase,
        "reason": j.reason,
        "reservation": j.reservation or None,
        "reservation_node": j.reservation_node or None,
        "replacement": j.replacement or None,
    }


@router.get("/jobs")
async def jobs(
    request: Request,
    offset: int = Query(0, ge=0),
    limit: int = Query(100, ge=1, le=1000),
) -> dict:
    """Migration jobs: those in flight first, then the finished ones, newest first; paginated."""
    desched = getattr(request.app.state, "descheduler", None)
    if desched is None:
        raise HTTPException(status_code=503, detail="the descheduler is starting")
    items = [_job(j) for j in desched.jobs.values()] + [_job(j) for j in reversed(desched.finished)]
    return {"total": len(items), "offset": offset, "items": items[offset : offset + limit]}


@router.get("/explain/pods/{namespace}/{name}")
async def explain_pod(request: Request, namespace: str, name: str) -> dict:
    """What the descheduler decided about one pod: the last round's migration of it (with the
    source's usage against its thresholds, the victim order and the targets' room) or why it was
    skipped, and its migration jobs."""
    key = f"{namespace}/{name}"
    report = getattr(request.app.state, "last_report", None)
    desched = getattr(request.app.state, "descheduler", None)
    decisions = []
    if report is not None:
        plan = report.plan
        decisions += [{"kind": "migration", "source": m.source, "target": m.target, "reason": m.reason,
                       "outcome": report.outcomes.get(m.pod.key), "inputs": m.inputs}
                      for m in plan.migrations if m.pod.key == key]  # fmt: skip
        decisions += [{"kind": "skipped", "node": s.node, "reason": s.reason} for s in plan.skipped if s.pod_key == key]
    if desched is not None:
        for job in [*desched.jobs.values(), *reversed(desched.finished)]:
            if job.pod_key == key:
                decisions.append({"kind": "job", **_job(job), "inputs": job.migration.inputs})
    return {"pod": key, "ran": report is not None, "decisions": decisions}
