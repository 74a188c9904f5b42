"""koordctl: run the embedded demo and inspect a running system."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from .launcher import DemoPlan
from .render import cores, gib

app = typer.Typer(help="Run and inspect the colocation system.", no_args_is_help=True)
console = Console()


def _state_file() -> Path:
    return Path(os.environ.get("KOORD_STATE_FILE", Path.home() / ".koord" / "demo.json"))


def _collector_url(url: str | None) -> str:
    if url:
        return url.rstrip("/")
    try:
        state = json.loads(_state_file().read_text())
        return state["services"]["metrics-collector"]
    except (OSError, KeyError, ValueError):
        console.print("[red]no collector URL given and no running demo found[/] (start one with `koordctl up`)")
        raise typer.Exit(2)


@app.command()
def up(
    nodes: int = typer.Option(20, help="simulated nodes"),
    duration: float = typer.Option(0, help="stop after this many seconds (0 = until Ctrl-C)"),
    check: bool = typer.Option(False, help="exit non-zero unless every end-to-end check passes"),
    data_dir: Path | None = typer.Option(None, help="where SQLite files and logs go (default: a temp dir)"),
    nats_url: str | None = typer.Option(None, envvar="NATS_URL", help="use this NATS server (else start one)"),
):
    """Start NATS (if needed), the sim cluster and all six services; show a live summary."""
    from .demo import Demo

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    plan = DemoPlan(nodes=nodes, data_dir=data_dir, nats_url=nats_url)
    demo = Demo(plan, console)
    try:
        ok = asyncio.run(demo.run(duration or None, check))
    except KeyboardInterrupt:
        ok = True
        console.print("stopped")
    if check and not ok:
        raise typer.Exit(1)


@app.command()
def status(
    collector: str | None = typer.Option(None, help="metrics-collector URL"),
    output: str = typer.Option("table", "-o", help="table or json"),
):
    """Health of every service of the running demo and per-node batch capacity."""
    state = {}
    try:
        state = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        pass
    services = state.get("services", {})
    health = {}
    with httpx.Client(timeout=2.0) as client:
        for name, url in services.items():
            try:
                health[name] = client.get(url + "/readyz").status_code == 200
            except httpx.HTTPError:
                health[name] = False
    nodes = _get(_collector_url(collector) + "/api/v1/nodes")
    if output == "json":
        console.print_json(json.dumps({"services": health, "nodes": nodes}))
        return
    t = Table(title="services")
    t.add_column("service")
    t.add_column("ready")
    for name, ok in health.items():
        t.add_row(name, "[green]yes[/]" if ok else "[red]no[/]")
    console.print(t)
    _print_nodes(nodes)


@app.command()
def nodes(
    collector: str | None = typer.Option(None, help="metrics-collector URL"),
    output: str = typer.Option("table", "-o", help="table or json"),
):
    """Nodes with capacity, prod usage and batch allocatable (from the collector)."""
    data = _get(_collector_url(collector) + "/api/v1/nodes")
    if output == "json":
        console.print_json(json.dumps(data))
    else:
        _print_nodes(data)


def _get(url: str):
    try:
        resp = httpx.get(url, timeout=5.0)
    except httpx.HTTPError as exc:
        console.print(f"[red]cannot reach {url}[/]: {exc}")
        raise typer.Exit(2)
    if resp.status_code >= 400:
        console.print(f"[red]{url} answered {resp.status_code}[/]: {resp.text[:300]}")
        raise typer.Exit(2)
    return resp.json()


def _print_nodes(data) -> None:
    items = data.get("items", data) if isinstance(data, dict) else data
    t = Table(title="nodes")
    for col in ("node", "cpu cap", "mem cap", "prod cpu", "prod mem", "batch cpu", "batch mem"):
        t.add_column(col)
    for n in items:
        t.add_row(
            str(n.get("node") or n.get("name")),
            cores((n.get("capacity") or {}).get("cpu_milli")),
            gib((n.get("capacity") or {}).get("memory_bytes")),
            cores((n.get("prod_usage") or {}).get("cpu_milli")),
            gib((n.get("prod_usage") or {}).get("memory_bytes")),
            cores((n.get("batch_allocatable") or {}).get("cpu_milli")),
            gib((n.get("batch_allocatable") or {}).get("memory_bytes")),
        )
    console.print(t)


if __name__ == "__main__":
    app()
