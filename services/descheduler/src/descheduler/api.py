"""REST view of the last round: classes, abnormal nodes, the plan and its outcomes."""

from __future__ import annotations

from fastapi import APIRouter, Request

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
