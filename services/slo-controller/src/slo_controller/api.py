"""Read-only REST for operators and dashboards: what the controller decided and why."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from .controller import SLOController


def create_router(controller: SLOController) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["slo-controller"])

    @router.get("/config")
    async def config():
        """The colocation strategy in force, the ConfigMap keys rejected (their last good config stays)
        and the warnings of the configuration in force (settings not supported, pools falling back)."""
        cfg = controller.config.current.colocation
        return {
            "cluster": cfg.cluster.to_dict(),
            "nodeConfigs": [{"name": nc.name, "strategy": nc.strategy.to_dict()} for nc in cfg.node_configs],
            "warnings": list(controller.config.warnings),
            "errors": dict(controller.config.errors),
        }

    def _view(name: str) -> dict:
        plan = controller.last_plan.get(name)
        node = controller.nodes[name]
        return {
            "node": name,
            "enabled": plan.enabled if plan else None,
            "degraded": plan.degraded if plan else None,
            "batch": plan.batch.to_list() if plan and plan.batch else None,
            "mid": plan.mid.to_list() if plan and plan.mid else None,
            "lastDecision": plan.reason if plan else None,
            "lastSyncMs": controller.last_sync.get(name),
            "metricTs": controller.metric_ts.get(name),
            "strategySource": controller.colocation_for(node).source,
        }

    @router.get("/nodes")
    async def nodes(limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0)):
        """Every node's batch/mid allocatable, sorted by name, a page at a time."""
        names = sorted(controller.nodes)
        page = names[offset : offset + limit]
        nxt = offset + limit if offset + limit < len(names) else None
        return {"items": [_view(n) for n in page], "total": len(names), "nextOffset": nxt}

    @router.get("/nodes/{name}/resources")
    async def node_resources(name: str):
        """One node's last plan with the inputs and Koordinator-style messages behind it."""
        if name not in controller.nodes:
            raise HTTPException(404, f"node {name!r} is not known to the controller")
        plan = controller.last_plan.get(name)
        view = _view(name)
        view["messages"] = plan.messages if plan else []
        view["inputs"] = plan.inputs() if plan else {}
        return view

    return router
