"""The dashboard: a static page under /dashboard that reads the collector's REST API.

Everything it needs ships in `static/` (uPlot is vendored; no CDN), so it works offline.
The page also shows the recommender's recommendations; the browser cannot call another
origin that sends no CORS headers, so the collector forwards that one read-only call
(/dashboard/recommender/api/v1/recommendations) to the URL it is configured with
(KOORD_COLLECTOR_RECOMMENDER_URL). A `?recommender=` query parameter on the page makes it
call that URL directly instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import httpx
from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
RECOMMENDER_ENV = "KOORD_COLLECTOR_RECOMMENDER_URL"
REFRESH_ENV = "KOORD_COLLECTOR_DASHBOARD_REFRESH_S"
RECOMMENDATIONS_PATH = "/api/v1/recommendations"
# The recommender's list parameters the page may pass on; anything else is dropped.
_FORWARDED = ("namespace", "kind", "name", "limit", "offset")


def recommender_url(settings: Any) -> str:
    url = getattr(settings, "recommender_url", "") or os.environ.get(RECOMMENDER_ENV, "")
    return url.rstrip("/")


def refresh_seconds(settings: Any) -> float:
    raw = getattr(settings, "dashboard_refresh_s", None) or os.environ.get(REFRESH_ENV, "") or 15
    try:
        value = float(raw)
    except ValueError:
        return 15.0
    return min(max(value, 2.0), 3600.0)  # a refresh faster than 2 s only loads the database


def mount_dashboard(app: FastAPI, settings: Any) -> None:
    """Serve the page, its assets and config (the data comes from the API, `api.mount`)."""
    upstream = recommender_url(settings)
    refresh = refresh_seconds(settings)

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard_redirect():
        return RedirectResponse("/dashboard/")

    @app.get("/dashboard/", include_in_schema=False)
    async def dashboard_index():
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/dashboard/config.json", tags=["dashboard"], summary="What the dashboard page needs to know")
    async def dashboard_config():
        return {
            "api": "/api/v1",
            "recommender_url": upstream,
            "recommendations_path": "/dashboard/recommender" + RECOMMENDATIONS_PATH if upstream else "",
            "refresh_s": refresh,
        }

    @app.get("/dashboard/recommender" + RECOMMENDATIONS_PATH, tags=["dashboard"],
             summary="The recommender's GET /api/v1/recommendations, forwarded")  # fmt: skip
    async def recommendations(
        namespace: Annotated[str | None, Query(max_length=253)] = None,
        kind: Annotated[str | None, Query(max_length=64)] = None,
        name: Annotated[str | None, Query(max_length=253)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ):
        if not upstream:
            raise HTTPException(404, f"no recommender configured (set {RECOMMENDER_ENV})")
        params = {k: v for k, v in zip(_FORWARDED, (namespace, kind, name, limit, offset)) if v is not None}
        target = upstream + RECOMMENDATIONS_PATH
        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                resp = await client.get(target, params=params)
        except httpx.HTTPError as exc:
            raise HTTPException(502, f"recommender at {target} is unreachable: {exc.__class__.__name__}") from None
        try:
            body = resp.json()
        except ValueError:
            raise HTTPException(502, f"recommender at {target} answered {resp.status_code} without JSON") from None
        return JSONResponse(body, status_code=resp.status_code)

    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")
