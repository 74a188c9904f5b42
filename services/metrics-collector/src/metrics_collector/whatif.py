"""The last what-if report, kept for the dashboard: `PUT /api/v1/whatif/last` stores it,
`GET /api/v1/whatif/last` reads it back (its table, recommendation, assumptions and plot URLs).

The what-if replay (`koordctl whatif --publish`, through `koordctl.whatif_publish.publish`)
writes report.json, report.md and two PNGs into a folder and sends them here as one
multipart/form-data request, each part named by its file name; a plain `application/json`
body is report.json alone. The files replace the previous report in one transaction in the
collector's database, so a restart keeps them and every replica serves the same one.

Bad input gets a 4xx with a clear message. The chassis' HTTP guard (koordcommon.httpguard)
answers first, as for every write of every service: 401 without the bearer token its `api_auth`
asks for, 413 for a body over `max_body_bytes` (refused unread). Here: 415 for another content
type, 400 for a part that is not one of the files, a report.json that is not a report, a plot
that is not a PNG, a body that is not multipart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson
import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from .api import StoreDep
from .store import Store, whatif_files

router = APIRouter(prefix="/api/v1/whatif", tags=["what-if"])

REPORT, MARKDOWN = "report.json", "report.md"
PLOTS = ("reclaimed-vs-risk.png", "hourly-bands.png")
FILES = {REPORT: "application/json", MARKDOWN: "text/markdown; charset=utf-8",
         **dict.fromkeys(PLOTS, "image/png")}  # fmt: skip
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ReportError(ValueError):
    """The upload is not a what-if report (400)."""


# ----------------------------------------------------------------------------- pure checks


def check_files(files: dict[str, bytes]) -> dict[str, Any]:
    """Validate the uploaded files; returns the parsed report.json."""
    unknown = sorted(set(files) - set(FILES))
    if unknown:
        raise ReportError(f"unknown part(s) {', '.join(unknown)}; a report is {', '.join(FILES)}")
    if REPORT not in files:
        raise ReportError(f"{REPORT} is missing")
    try:
        doc = orjson.loads(files[REPORT])
    except orjson.JSONDecodeError as exc:
        raise ReportError(f"{REPORT} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{REPORT} must be a JSON object")
    for key, kind in (("scenario", dict), ("runs", list), ("assumptions", list)):
        if not isinstance(doc.get(key), kind):
            raise ReportError(f"{REPORT}: {key!r} must be a {kind.__name__} (is this a what-if report?)")
    for i, run in enumerate(doc["runs"]):
        if not (isinstance(run, dict) and isinstance(run.get("config"), dict) and isinstance(run.get("summary"), dict)):
            raise ReportError(f"{REPORT}: runs[{i}] needs a config and a summary object")
    if doc.get("recommended") is not None and not isinstance(doc["recommended"], str):
        raise ReportError(f"{REPORT}: 'recommended' must be a configuration name or null")
    for name in PLOTS:
        if name in files and not files[name].startswith(PNG_MAGIC):
            raise ReportError(f"{name} is not a PNG image")
    if MARKDOWN in files:
        try:
            files[MARKDOWN].decode("utf-8")
        except UnicodeDecodeError:
            raise ReportError(f"{MARKDOWN} is not UTF-8 text") from None
    return doc


def markdown_table(text: str) -> dict[str, list] | None:
    """The first pipe table of report.md (the replay's own rendering of its table) as
    {columns, rows}; None when there is none."""
    lines = [line.strip() for line in text.splitlines()]
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and lines[i + 1].startswith("|") and set(lines[i + 1]) <= set("|-: "):

            def cells(line: str) -> list[str]:
                return [c.strip() for c in line.strip("|").split("|")]

            columns = cells(lines[i])
            rows = []
            for line in lines[i + 2 :]:
                if not line.startswith("|"):
                    break
                rows.append(cells(line))
            return {"columns": columns, "rows": rows}
    return None


def _findings(raw: Any) -> list[dict[str, Any]]:
    """A run's check-config findings as the page shows them (a report from before they were
    written has none; a malformed one shows none rather than breaking the panel)."""
    out = []
    for f in raw if isinstance(raw, list) else []:
        if isinstance(f, dict) and isinstance(f.get("settings"), list):
            out.append({"level": str(f.get("level", "")), "settings": [str(x) for x in f["settings"]],
                        "problem": str(f.get("problem", "")), "fix": str(f.get("fix", ""))})
    return out


def view(ts: int, files: dict[str, bytes]) -> dict[str, Any]:
    """What the dashboard shows of a stored report."""
    doc = orjson.loads(files[REPORT])
    md = files.get(MARKDOWN)
    return {
        "ts": ts,
        "scenario": doc.get("scenario") or {},
        "recommended": doc.get("recommended"),
        "why": doc.get("why") or "",
        "assumptions": doc.get("assumptions") or [],
        "configs": [
            {"name": (r.get("config") or {}).get("name"), "baseline": bool((r.get("summary") or {}).get("baseline")),
             "findings": _findings(r.get("findings"))}
            for r in doc.get("runs") or []
        ],
        "table": markdown_table(md.decode("utf-8")) if md else None,
        "plots": {name: f"{router.prefix}/last/files/{name}" for name in PLOTS if name in files},
        "files": sorted(files),
    }


# ----------------------------------------------------------------------------- storage


def save(store: Store, files: dict[str, bytes], ts: int) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.delete(whatif_files))
        conn.execute(sa.insert(whatif_files), [
            {"name": name, "ts": ts, "content_type": FILES[name], "content": content} for name, content in files.items()
        ])  # fmt: skip


def load(store: Store) -> tuple[int, dict[str, bytes]] | None:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(whatif_files.c.name, whatif_files.c.ts, whatif_files.c.content)).all()
    if not rows:
        return None
    return max(r.ts for r in rows), {r.name: bytes(r.content) for r in rows}


def load_file(store: Store, name: str) -> bytes | None:
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(whatif_files.c.content).where(whatif_files.c.name == name)).first()
    return None if row is None else bytes(row.content)


# ----------------------------------------------------------------------------- HTTP


async def _parts(request: Request, body: bytes) -> dict[str, bytes]:
    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    try:
        form = await MultiPartParser(request.headers, stream(), max_files=len(FILES), max_fields=len(FILES),
                                     max_part_size=len(body) + 1).parse()  # fmt: skip
    except MultiPartException as exc:
        raise ReportError(f"not a multipart/form-data body: {exc.message}") from None
    files: dict[str, bytes] = {}
    try:
        for name, value in form.multi_items():
            if name in files:
                raise ReportError(f"part {name} is given twice")
            files[name] = await value.read() if isinstance(value, UploadFile) else value.encode()
    finally:
        await form.close()
    return files


@router.put("/last", status_code=204, summary="Store the last what-if report (report.json, report.md, the PNG plots)")
async def put_last(request: Request, store: StoreDep) -> Response:
    """multipart/form-data with one part per file, named by the file name (report.json required;
    report.md, reclaimed-vs-risk.png and hourly-bands.png optional), or application/json: the
    report.json alone. Replaces the stored report."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("multipart/form-data", "application/json"):
        raise HTTPException(415, f"send multipart/form-data (one part per file) or application/json, not {kind or 'nothing'}")
    body = await request.body()  # bounded by the guard's max_body_bytes
    try:
        files = await _parts(request, body) if kind == "multipart/form-data" else {REPORT: body}
        check_files(files)
    except ReportError as exc:
        raise HTTPException(400, str(exc)) from None
    await asyncio.to_thread(save, store, files, int(time.time() * 1000))
    return Response(status_code=204)


@router.get("/last", summary="The last what-if report: table, recommendation, assumptions, plot URLs")
async def get_last(store: StoreDep) -> dict:
    found = await asyncio.to_thread(load, store)
    if found is None:
        raise HTTPException(404, "no what-if report was published (koordctl whatif --publish URL)")
    return view(*found)


@router.get("/last/files/{name}", summary="One file of the last what-if report, as it was published")
async def get_file(store: StoreDep, name: str) -> Response:
    if name not in FILES:
        raise HTTPException(404, f"{name!r} is not a report file; they are {', '.join(FILES)}")
    content = await asyncio.to_thread(load_file, store, name)
    if content is None:
        raise HTTPException(404, f"the last what-if report has no {name}")
    return Response(content, media_type=FILES[name], headers={"Cache-Control": "no-cache"})
