"""GET /api/v1/history/{table}.csv: the cluster's history for a what-if replay, streamed as CSV.

The three tables of docs/history-format.md (`nodes`, `node_usage`, `pod_usage`) for one time
range and node selection, each at one resolution (`raw`, `1m`, `1h`; by default the finest that
still holds the range's start). `koordctl export-history` fetches all three into a directory
that `koordctl whatif --trace history --history DIR` replays. The rows are those of
history_rows.py; the response says the resolution in `X-Koord-History-Resolution`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from koordcommon.clusterhistory import csv_text

from .core.series import MINUTE_MS, QueryError, choose_resolution, parse_time
from .history_rows import CHUNK, RESOLUTIONS, ROWS, HistoryRows, Selection

router = APIRouter(prefix="/api/v1", tags=["history"])
DEFAULT_WINDOW_MS = 24 * 3_600_000


MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: past it a time is no sample's (nor a BIGINT)


def selection(settings, start: int, end: int, nodes: list[str], resolution: str) -> Selection:
    for name, value in (("from", start), ("to", end)):
        if not 0 <= value <= MAX_TIME_MS:
            raise QueryError(f"{name}: {value} is outside epoch milliseconds 0 .. {MAX_TIME_MS} (year 9999)")
    if end <= start:
        raise QueryError(f"to ({end}) must be after from ({start})")
    bad = [n for n in nodes if len(n) > 253 or any(ord(ch) < 32 for ch in n)]
    if bad:
        raise QueryError(f"node: {bad[0][:60]!r} is not a node name")
    if resolution == "auto":
        policy = settings.retention()
        resolution = choose_resolution(start, MINUTE_MS, int(time.time() * 1000), policy.raw_ms, policy.minute_ms)
    elif resolution not in RESOLUTIONS:
        raise QueryError(f"resolution: {resolution!r} is not one of auto, {', '.join(RESOLUTIONS)}")
    return Selection(start, end, tuple(sorted({n for n in nodes if n})), resolution)


def _chunks(columns: tuple[str, ...], rows: Iterator[tuple]) -> Iterator[str]:
    yield csv_text([columns])
    batch: list[tuple] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= CHUNK:
            yield csv_text(batch)
            batch = []
    if batch:
        yield csv_text(batch)


@router.get("/history/{table}.csv", response_class=StreamingResponse,
            responses={200: {"content": {"text/csv": {}}, "description": "the table as CSV (docs/history-format.md)"}})  # fmt: skip
async def history_table(
    request: Request,
    table: str,
    from_: Annotated[str | None, Query(alias="from", description="epoch ms or RFC 3339; default to - 24h")] = None,
    to: Annotated[str | None, Query(description="epoch ms or RFC 3339 (exclusive); default now")] = None,
    node: Annotated[list[str] | None, Query(description="only these nodes (repeat the parameter); default all")] = None,
    resolution: Annotated[str, Query(description="auto, raw, 1m or 1h")] = "auto",
) -> StreamingResponse:
    """One table of the cluster's history (nodes, node_usage, pod_usage) for a what-if replay."""
    store, settings = request.app.state.store, request.app.state.settings  # api.mount put them there
    if table not in ROWS:
        raise HTTPException(404, f"no history table {table!r}: {', '.join(t + '.csv' for t in ROWS)}")
    end = parse_time(to, "to") if to is not None else int(time.time() * 1000)
    start = parse_time(from_, "from") if from_ is not None else end - DEFAULT_WINDOW_MS
    sel = selection(settings, start, end, node or [], resolution)
    columns, rows_of = ROWS[table]
    # a sync generator: Starlette runs each step in a worker thread, so the queries never block the loop
    body = _chunks(columns, rows_of(HistoryRows(store, sel)))
    headers = {"Content-Disposition": f'attachment; filename="{table}.csv"', "X-Koord-History-Resolution": sel.resolution}
    return StreamingResponse(body, media_type="text/csv; charset=utf-8", headers=headers)
