"""`koordctl export-history`: a cluster's history from the metrics-collector, as a directory that
`koordctl whatif --trace history --history DIR` replays (docs/history-format.md).

The collector streams each table (`GET /api/v1/history/{table}.csv`); this writes them to DIR,
adds node labels from `kubectl get nodes -o json` when given (the collector does not record
labels), converts to Parquet when asked, then reads the result back with the replay's own
reader, so what was written is known to replay.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import httpx
import typer
from koordcommon import clusterhistory as ch

EXPORT_TIMEOUT_S = 600.0  # a table of days of samples streams for a while
_AGO = re.compile(r"^(\d+)(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_when(text: str, now_ms: int, option: str) -> int:
    """Epoch ms from `24h` / `90m` / `7d` (that long before now), epoch ms, or an RFC 3339 time."""
    m = _AGO.match(text.strip())
    if m:
        return now_ms - int(m.group(1)) * _UNIT_S[m.group(2)] * 1000
    try:
        return ch.parse_ts(text.strip())
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}; or a duration before now such as 24h, 90m, 7d", param_hint=option) from None


def node_labels(path: Path) -> dict[str, dict[str, str]]:
    """Node name -> labels from `kubectl get nodes -o json` (a List) or one Node."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--node-labels") from None
    items = doc.get("items", [doc]) if isinstance(doc, dict) else []
    out = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        meta = item.get("metadata") or {}
        if item.get("kind", "Node") == "Node" and meta.get("name"):
            out[meta["name"]] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    if not out:
        raise typer.BadParameter(f"{path} holds no Node (expected the output of kubectl get nodes -o json)",
                                 param_hint="--node-labels")  # fmt: skip
    return out


def _add_labels(path: Path, labels: dict[str, dict[str, str]]) -> int:
    """Fill the labels column of nodes.csv; returns how many nodes got labels."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    col, node = rows[0].index("labels"), rows[0].index("node")
    found = 0
    for row in rows[1:]:
        if row[node] in labels:
            row[col] = ch.labels_text(labels[row[node]])
            found += 1
    path.write_text(ch.csv_text(rows))
    return found


_INT_COLUMNS = {"ts", "priority", *(c for cols in ch.COLUMNS.values() for c in cols if c.endswith(("_milli", "_bytes")))}


def to_parquet(csv_path: Path) -> Path:
    """The CSV table as Parquet beside it (the CSV removed): integer columns int64, the rest text."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq
    except ImportError:
        raise typer.BadParameter("Parquet needs pyarrow: pip install 'koordcommon[parquet]'", param_hint="--format") from None
    with csv_path.open(newline="") as f:
        header = next(csv.reader(f))
    types = {c: pa.int64() if c in _INT_COLUMNS else pa.string() for c in header}
    options = pcsv.ConvertOptions(column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False)
    table = pcsv.read_csv(csv_path, convert_options=options)
    out = csv_path.with_suffix(".parquet")
    pq.write_table(table, out)
    csv_path.unlink()
    return out


def export(client: httpx.Client, collector: str, start: int, end: int, out: Path, nodes: list[str], resolution: str,
           progress) -> str:  # fmt: skip
    """Stream the three tables into `out`; returns the resolution the collector read them at."""
    out.mkdir(parents=True, exist_ok=True)
    params: dict = {"from": start, "to": end, "resolution": resolution}
    if nodes:
        params["node"] = nodes
    client.timeout = httpx.Timeout(EXPORT_TIMEOUT_S, connect=10.0)
    with client:
        for table in ch.TABLES:
            url = f"{collector}/api/v1/history/{table}.csv"
            task = progress(f"{table}.csv")
            try:
                with client.stream("GET", url, params=params) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        try:
                            detail = resp.json().get("detail", "")
                        except ValueError:
                            detail = resp.text[:200]
                        raise RuntimeError(f"{url} answered {resp.status_code} {detail}")
                    # every table at the resolution the first was read at, whatever `auto` would say later
                    params["resolution"] = resp.headers.get("x-koord-history-resolution", params["resolution"])
                    with (out / f"{table}.csv").open("wb") as f:
                        for chunk in resp.iter_bytes():
                            f.write(chunk)
                            task(len(chunk))
            except httpx.HTTPError as exc:
                raise RuntimeError(f"{url}: cannot read ({exc.__class__.__name__}: {exc})") from None
    return params["resolution"]


def register(app: typer.Typer, cli) -> None:
    """Add the command to `app`; `cli` is the module with koordctl's shared helpers (the collector's
    URL, the HTTP client carrying the API token, one-line failures), handed in, not imported back."""

    @app.command("export-history")
    def export_history(
        since: str = typer.Option(..., help="start: a duration before now (24h, 7d), epoch ms or RFC 3339"),
        until: str | None = typer.Option(None, help="end (exclusive), as --since; default now"),
        out: Path = typer.Option(..., help="the directory the history is written to"),
        node: list[str] = typer.Option([], help="only this node (repeatable); default all"),
        resolution: str = typer.Option("auto", help="auto (the finest still kept), raw, 1m or 1h"),
        fmt: str = typer.Option("csv", "--format", help="csv or parquet (needs pyarrow)"),
        node_labels_file: Path | None = typer.Option(None, "--node-labels",
                                                     help="kubectl get nodes -o json output: the nodes' labels"),
        collector: str | None = typer.Option(None, help="metrics-collector URL (default: the running demo's)"),
    ):
        """Export the cluster's history (nodes, node usage, pod usage) from the metrics-collector for a
        what-if replay: koordctl whatif --trace history --history DIR."""
        from rich.progress import DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        fail, progress_console = cli._fail, cli.progress_console
        if fmt not in ("csv", "parquet"):
            raise fail(f"--format must be csv or parquet, not {fmt!r}", 2)
        url = cli._service_url("metrics-collector", collector)
        now = int(time.time() * 1000)
        start = parse_when(since, now, "--since")
        end = parse_when(until, now, "--until") if until else now
        if end <= start:
            raise fail(f"--until ({end}) must be after --since ({start})", 2)
        labels = node_labels(node_labels_file) if node_labels_file else None
        columns = (TextColumn("{task.description}"), DownloadColumn(), TransferSpeedColumn())
        with Progress(*columns, console=progress_console, disable=not progress_console.is_terminal) as bar:

            def progress(name: str):
                task = bar.add_task(name, total=None)
                return lambda n: bar.advance(task, n)

            try:
                used = export(cli.http_client(), url, start, end, out, node, resolution, progress)
            except RuntimeError as exc:
                raise fail(str(exc)) from None
        if labels is not None:
            typer.echo(f"labels of {_add_labels(out / 'nodes.csv', labels)} node(s) from {node_labels_file}")
        if fmt == "parquet":
            for table in ch.TABLES:
                to_parquet(out / f"{table}.csv")
        try:
            history = ch.read_history(out)
        except ch.HistoryError as exc:
            typer.echo(f"error: the export in {out} cannot be replayed:\n{exc}", err=True)
            raise typer.Exit(1) from None
        online = sum(1 for p in history.pods if ch.is_online(p.record()))
        samples = sum(len(s.ts) for s in history.pod_usage)
        typer.echo(f"{out}: {len(history.nodes)} nodes, {len(history.pods)} pods ({online} online, "
                   f"{len(history.pods) - online} batch/free), {samples} pod samples at {used} resolution, "
                   f"{history.start_ms} .. {history.end_ms}")  # fmt: skip
        typer.echo(f"replay it: koordctl whatif --trace history --history {out}")
