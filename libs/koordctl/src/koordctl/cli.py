"""koordctl: run the embedded demo and inspect a running system.

Service URLs come from options, else from the running demo's state file
(~/.koord/demo.json, or $KOORD_STATE_FILE). A service that cannot be reached ends the
command with exit code 2 and one line naming the URL. `-o json` prints machine-readable
output on stdout; progress bars go to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

from . import explain_cmd, helpfmt, history_cmd, render, whatif_cmd
from .launcher import SERVICES, DemoPlan

app = typer.Typer(help="Run and inspect the colocation system.", no_args_is_help=True)
# Piped output is not cut at 80 columns: tables stay whole for grep and logs.
console = Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "220")))
progress_console = Console(stderr=True)

EXIT_UNREACHABLE = 2
HTTP_TIMEOUT_S = 5.0
MAX_ITEMS = 100_000  # a bound on paging, far above any cluster this runs against

OutputOpt = typer.Option("table", "--output", "-o", help="table or json")


@app.callback()
def _logging(verbose: bool = typer.Option(False, "--verbose", "-v", help="show the libraries' log lines")):
    # An unreachable service is reported in one line by the command itself; the bus and HTTP
    # libraries' own log lines would only repeat it.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if verbose else logging.CRITICAL)


class Unreachable(Exception):
    """A service did not answer (or answered an error) at `url`."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


def _fail(message: str, code: int = EXIT_UNREACHABLE) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _check_output(output: str) -> str:
    if output not in ("table", "json"):
        raise _fail(f"--output must be table or json, not {output!r}", 2)
    return output


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


# ----------------------------------------------------------------------------- demo state


def _state_file() -> Path:
    return Path(os.environ.get("KOORD_STATE_FILE", Path.home() / ".koord" / "demo.json"))


def _state() -> dict[str, Any]:
    try:
        data = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _service_url(name: str, given: str | None) -> str:
    if given:
        return given.rstrip("/")
    url = (_state().get("services") or {}).get(name)
    if not url:
        raise _fail(f"no {name} URL given and no running demo in {_state_file()} (start one with `koordctl up`)")
    return str(url).rstrip("/")


# ----------------------------------------------------------------------------- credentials


def _credential_env() -> dict[str, str]:
    """NATS_NKEY_SEED_FILE / NATS_CA_FILE / KOORD_API_TOKEN_FILE: the environment's, else the
    running demo's (its state file names the files koordctl may use)."""
    state = _state().get("credentials") or {}
    keys = ("NATS_NKEY_SEED_FILE", "NATS_CA_FILE", "NATS_CERT_FILE", "NATS_KEY_FILE", "KOORD_API_TOKEN_FILE")
    return {k: os.environ.get(k) or str(state.get(k) or "") for k in keys}


def bus_credentials():
    from koordcommon.natsauth import BusCredentials

    return BusCredentials.from_env(_credential_env())


def http_client() -> httpx.Client:
    """An HTTP client that sends the API bearer token when one is configured (the services refuse
    writes, and with api_protect_reads reads, without it)."""
    headers = {}
    token_file = _credential_env()["KOORD_API_TOKEN_FILE"]
    if token_file:
        try:
            headers["Authorization"] = f"Bearer {Path(token_file).read_text().strip()}"
        except OSError as exc:
            raise _fail(f"cannot read the API token file {token_file}: {exc.strerror or exc}", 1) from None
    return httpx.Client(timeout=HTTP_TIMEOUT_S, headers=headers)


# ----------------------------------------------------------------------------- HTTP


def get_json(client: httpx.Client, url: str, params: dict[str, Any] | None = None) -> Any:
    params = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        resp = client.get(url, params=params)
    except httpx.HTTPError as exc:
        raise Unreachable(url, f"cannot connect ({exc.__class__.__name__})") from None
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", "")
        except (ValueError, AttributeError):
            detail = resp.text[:200]
        raise Unreachable(url, f"answered {resp.status_code} {detail}".strip())
    try:
        return resp.json()
    except ValueError:
        raise Unreachable(url, "answered something that is not JSON") from None


def pages(client: httpx.Client, url: str, params: dict[str, Any], limit: int | None = None) -> Iterator[dict]:
    """Items of a cursor-paginated collector list, following next_cursor."""
    cursor = None
    seen = 0
    while True:
        page = get_json(client, url, {**params, "cursor": cursor})
        for item in page.get("items", []):
            yield item
            seen += 1
            if limit is not None and seen >= limit:
                return
        cursor = page.get("next_cursor")
        if not cursor or seen >= MAX_ITEMS:
            return


def _progress(transient: bool = True) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    console=progress_console, transient=transient, disable=not progress_console.is_terminal)  # fmt: skip


def _collect(client: httpx.Client, url: str, params: dict[str, Any], what: str, limit: int | None = None) -> list:
    out = []
    with _progress() as bar:
        task = bar.add_task(f"reading {what}", total=limit)
        for item in pages(client, url, params, limit):
            out.append(item)
            bar.advance(task)
    return out


def _run(fn):
    """Run a command body; an unreachable service becomes one error line and exit code 2."""
    try:
        return fn()
    except Unreachable as exc:
        raise _fail(f"cannot use {exc.url}: {exc.reason}") from None


# ----------------------------------------------------------------------------- commands


@app.command()
def up(
    nodes: int = typer.Option(20, help="simulated nodes"),
    duration: float = typer.Option(0, help="stop after this many seconds (0 = until Ctrl-C)"),
    check: bool = typer.Option(False, help="exit non-zero unless every end-to-end check passes"),
    data_dir: Path | None = typer.Option(None, help="where SQLite files and logs go (default: a temp dir)"),
    nats_url: str | None = typer.Option(None, envvar="NATS_URL", help="use this NATS server (else start one)"),
    agent_shards: int = typer.Option(0, min=0, help="sim node-agent processes (0: one per 1,500 nodes)"),
):
    """Start NATS (if needed), the sim cluster and all six services; show a live summary."""
    from .demo import Demo

    logging.getLogger().setLevel(min(logging.getLogger().level, logging.WARNING))
    plan = DemoPlan(nodes=nodes, data_dir=data_dir, nats_url=nats_url, agent_shards=agent_shards)
    demo = Demo(plan, console)
    try:
        ok = asyncio.run(demo.run(duration or None, check))
    except KeyboardInterrupt:
        ok = True
        console.print("stopped")
    except (RuntimeError, FileNotFoundError) as exc:  # NATS, a service or the traces: say which, no traceback
        console.print(f"[red]demo failed:[/] {exc}")
        raise typer.Exit(1)
    if check and not ok:
        raise typer.Exit(1)


@app.command()
def sim(
    nodes: int = typer.Option(20, min=1, help="simulated nodes"),
    extender_url: str = typer.Option(..., envvar="KOORD_EXTENDER_URL", help="scheduler-extender URL (urlPrefix)"),
    nats_url: str = typer.Option("nats://127.0.0.1:4222", envvar="NATS_URL", help="NATS of the stack"),
    namespace: str = typer.Option("", envvar="KOORD_BUS_NAMESPACE", help="bus namespace of the stack"),
    batch_tasks_per_node_hour: float = typer.Option(60.0, min=0, help="batch tasks submitted per node and hour"),
    genesis: bool = typer.Option(True, help="publish the simulated cluster (off: join one already published)"),
):
    """Drive the simulated cluster of a deployed stack (docker-compose): genesis, kube-scheduler's
    loop through the extender, and the batch workload. Runs until SIGTERM."""
    from .simdriver_cmd import run_sim_driver

    logging.getLogger().setLevel(logging.INFO)
    asyncio.run(run_sim_driver(nats_url, extender_url, nodes, namespace, batch_tasks_per_node_hour, genesis))


@app.command("secure-init")
def secure_init(
    out: Path = typer.Option(..., "--out", help="directory for the secrets (created 0700)"),
    namespace: str = typer.Option("", envvar="KOORD_BUS_NAMESPACE", help="bus namespace of the installation"),
    host: list[str] = typer.Option(["nats"], "--host", help="name clients reach NATS by (repeatable)"),
    mounted_at: str = typer.Option("", help="where the NATS server sees the directory (compose: its mount)"),
    store_dir: str = typer.Option("", help="JetStream store directory of the server"),
    sim: bool = typer.Option(True, help="the installation runs on the simulated cluster"),
    keep: bool = typer.Option(True, help="leave an existing set of secrets as it is"),
    owner: str = typer.Option("", help="UID[:GID] the files are handed to (compose: the services' user)"),
    route: list[str] = typer.Option(
        [], "--route", help="a server of the NATS cluster, HOST[:PORT] of its route port (repeatable, each server)"
    ),
    cluster_name: str = typer.Option("koord", help="name of the NATS cluster (with --route)"),
):
    """Write an installation's credentials: an nkey seed per service, a CA and the NATS server's
    certificate, the server configuration with every service's permissions, the API token; with
    --route, the cluster's route password and certificate and the routes in the configuration."""
    from .secure import hand_over, init_secrets, parse_owner

    try:
        uid, gid = parse_owner(owner) if owner else (None, None)
    except ValueError as exc:
        raise _fail(f"--owner: {exc}", 2) from None
    if keep and (out / "nats-server.conf").exists():
        typer.echo(f"{out}: secrets exist, kept")
    else:
        secrets = init_secrets(
            out, namespace, sim, tuple(host), store_dir or None, mounted_at or None, tuple(route), cluster_name
        )
        cluster = ", nats-route.crt/.key, nats-route.password" if secrets.route_password_file else ""
        typer.echo(f"wrote {secrets.dir}: nats-server.conf, ca.crt, nats-server.crt/.key, <service>.nk, api-token{cluster}")
    if uid is not None:
        hand_over(out, uid, gid)


def trace_inventory() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(per dataset: what the sample and the full set hold; the source a run would use)."""
    from koordsim import traces as tr

    try:
        full, problem = tr.full_source(), ""
    except tr.TracesNotFound as exc:
        full, problem = None, str(exc)
    sample = tr.sample_source()
    rows = []
    for d in tr.DATASETS:
        row: dict[str, Any] = {"name": d.name, "folder": d.folder, "what": d.what, "used_by": d.used_by, "origin": d.origin}
        for where, src in (("sample", sample), ("full", full)):
            if src is None:
                row[where] = None
            else:
                files, size = tr.dataset_files(src, d)
                row[where] = {"files": files, "bytes": size}
        rows.append(row)
    in_use = full or sample
    return rows, {
        "in_use": {"kind": in_use.kind, "path": str(in_use.path), "describe": in_use.describe()},
        "sample": str(sample.path),
        "full": str(full.path) if full else None,
        "problem": problem,
    }


@app.command("traces")
def traces_cmd(output: str = typer.Option("table", "--output", "-o", help="table or json")):
    """Which trace datasets are here (the bundled sample; the full set KOORD_TRACE_DIR names),
    their size, and where to get the rest."""
    _check_output(output)
    rows, where = trace_inventory()
    if output == "json":
        _print_json({**where, "datasets": rows})
    else:
        console.print(render.traces_table(rows))
        console.print(f"runs read {where['in_use']['describe']}")
        if where["full"] is None:
            console.print(
                "the full set is not here: download the datasets from the sources above into one folder, "
                "one sub-folder per dataset as named in the sample, and set KOORD_TRACE_DIR to it"
            )
    if where["problem"]:
        raise _fail(where["problem"], 1)


def probe_services(client: httpx.Client, services: dict[str, str]) -> dict[str, dict[str, Any]]:
    """/readyz of every service: ready, and why not."""
    health: dict[str, dict[str, Any]] = {}
    with _progress() as bar:
        task = bar.add_task("checking services", total=len(services))
        for name, url in services.items():
            entry: dict[str, Any] = {"url": url, "ready": False, "detail": ""}
            try:
                resp = client.get(url.rstrip("/") + "/readyz")
                entry["ready"] = resp.status_code == 200
                if not entry["ready"]:
                    entry["detail"] = f"readyz answered {resp.status_code}"
            except httpx.HTTPError as exc:
                entry["detail"] = f"unreachable ({exc.__class__.__name__})"
            health[name] = entry
            bar.advance(task)
    return health


@app.command()
def status(
    collector: str | None = typer.Option(None, help="metrics-collector URL (default: the running demo's)"),
    output: str = OutputOpt,
):
    """Health of every service, and per-node batch capacity. Exit 1 when a service is not ready."""
    _check_output(output)
    state = _state()
    services = {name: url for name, url in (state.get("services") or {}).items()}
    collector_url = _service_url("metrics-collector", collector)
    services.setdefault("metrics-collector", collector_url)
    order = [s.name for s in SERVICES if s.name in services] + sorted(set(services) - {s.name for s in SERVICES})

    def body():
        with http_client() as client:
            health = probe_services(client, {n: services[n] for n in order})
            if collector is None and not any(h["ready"] or "readyz" in h["detail"] for h in health.values()):
                # every service the state file names is gone: it is left from a demo that stopped
                raise _fail(f"the demo is not running: none of the services {_state_file()} names answers "
                            f"({', '.join(services.values())}; the file is left from an earlier run). Start it with "
                            "`koordctl up` (or `make demo`), or give --collector URL of a running collector")  # fmt: skip
            nodes = _collect(client, collector_url + "/api/v1/nodes", {"limit": 500}, "nodes")
        return health, nodes

    health, nodes = _run(body)
    totals = render.batch_totals(nodes)
    all_ready = all(h["ready"] for h in health.values())
    if output == "json":
        _print_json({"services": health, "nodes": nodes, "batch": totals, "ready": all_ready,
                     "dashboard": collector_url + "/dashboard/"})  # fmt: skip
    else:
        console.print(render.services_table(health))
        console.print(render.nodes_table(nodes, title=f"nodes ({len(nodes)})"))
        console.print(
            f"batch allocatable {render.cores(totals['batch_allocatable_cpu_milli'])} cores / "
            f"{render.gib(totals['batch_allocatable_memory_bytes'])}, allocated "
            f"{render.cores(totals['batch_allocated_cpu_milli'])} cores / "
            f"{render.gib(totals['batch_allocated_memory_bytes'])}"
        )
        console.print(f"dashboard: {collector_url}/dashboard/")
    if not all_ready:
        raise typer.Exit(1)


@app.command()
def nodes(
    collector: str | None = typer.Option(None, help="metrics-collector URL"),
    output: str = OutputOpt,
):
    """Nodes with capacity, usage, prod usage, batch and mid resources (from the collector)."""
    _check_output(output)
    url = _service_url("metrics-collector", collector) + "/api/v1/nodes"

    def body():
        with http_client() as client:
            return _collect(client, url, {"limit": 500}, "nodes")

    items = _run(body)
    if output == "json":
        _print_json(items)
    else:
        console.print(render.nodes_table(items, title=f"nodes ({len(items)})"))


@app.command()
def pods(
    collector: str | None = typer.Option(None, help="metrics-collector URL"),
    node: str | None = typer.Option(None, help="only pods on this node"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="only pods in this namespace"),
    limit: int = typer.Option(1000, min=1, help="at most this many pods"),
    output: str = OutputOpt,
):
    """Pods seen in the last hour with their band, QoS, requests and usage."""
    _check_output(output)
    url = _service_url("metrics-collector", collector) + "/api/v1/pods"

    def body():
        with http_client() as client:
            params = {"node": node, "namespace": namespace, "limit": min(limit, 1000)}
            return _collect(client, url, params, "pods", limit)

    items = _run(body)
    if output == "json":
        _print_json(items)
    else:
        console.print(render.pods_table(items))


@app.command()
def recommendations(
    recommender: str | None = typer.Option(None, help="recommender URL (default: the running demo's)"),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="only workloads in this namespace"),
    limit: int = typer.Option(1000, min=1, max=1000, help="at most this many workloads"),
    output: str = OutputOpt,
):
    """Recommended container requests per workload, with the estimated savings."""
    _check_output(output)
    url = _service_url("recommender", recommender) + "/api/v1/recommendations"

    def body():
        with http_client() as client:
            return get_json(client, url, {"namespace": namespace, "limit": limit})

    data = _run(body)
    items = data.get("items", [])
    savings = render.total_savings(items)
    if output == "json":
        _print_json({"items": items, "total": data.get("total", len(items)), "estimated_savings": savings})
    else:
        console.print(render.recommendations_table(items))
        pending = render.provisional_count(items)
        console.print(f"{data.get('total', len(items))} workloads; estimated savings "
                      f"{render.cores(savings['cpu_milli'])} cores / {render.gib(savings['memory_bytes'])}"
                      + (f" ({pending} provisional recommendation(s), under a day of history, not counted)"
                         if pending else ""))  # fmt: skip
        if items:
            console.print("what a target is made of: koordctl explain recommendation NAMESPACE/KIND/NAME")


def _load_profile_file(path: Path) -> list[dict]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror or exc}", 1) from None
    except yaml.YAMLError as exc:
        raise _fail(f"{path} is not valid YAML: {str(exc).splitlines()[0]}", 1) from None
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "ClusterColocationProfile"]


async def _cluster_profiles(backend: str, nats_url: str, namespace: str) -> list[dict]:
    from koordcommon.bus import Bus
    from koordcommon.cluster import open_cluster

    bus = None
    options: dict[str, Any] = {}
    if backend == "sim":
        bus = Bus(nats_url, service="koordctl", namespace=namespace, credentials=bus_credentials())
        await bus.connect(timeout_s=HTTP_TIMEOUT_S)
        options["bus"] = bus
    cluster = open_cluster(backend, **options)
    try:
        await asyncio.wait_for(cluster.start(), timeout=60)
        return await cluster.list_custom("ClusterColocationProfile")
    finally:
        await cluster.close()
        if bus is not None:
            await bus.close()


@app.command()
def profiles(
    file: Annotated[Path | None, typer.Option("--file", "-f", help="read profiles from this YAML file")] = None,
    backend: str = typer.Option("sim", help="sim (the running demo's cluster) or kubernetes (kubeconfig)"),
    nats_url: str | None = typer.Option(None, help="NATS of the demo (default: from the demo state)"),
    namespace: str | None = typer.Option(None, help="bus namespace of the demo (default: from the demo state)"),
    output: str = OutputOpt,
):
    """ClusterColocationProfiles: what pods they select and what they set."""
    _check_output(output)
    if file is not None:
        objs = _load_profile_file(file)
    else:
        if backend not in ("sim", "kubernetes"):
            raise _fail(f"--backend must be sim or kubernetes, not {backend!r}", 2)
        state = _state()
        url = nats_url or state.get("nats_url") or ""
        ns = namespace if namespace is not None else state.get("namespace", "")
        if backend == "sim" and not url:
            raise _fail(f"no NATS URL given and no running demo in {_state_file()}")
        try:
            with progress_console.status("reading the cluster"):
                objs = asyncio.run(_cluster_profiles(backend, url, ns))
        except Exception as exc:  # noqa: BLE001 - any failure to reach the cluster is reported alike
            where = url if backend == "sim" else "the Kubernetes API (kubeconfig)"
            raise _fail(f"cannot read profiles from {where}: {exc.__class__.__name__}: {exc}") from None
    objs = sorted(objs, key=lambda o: (o.get("metadata") or {}).get("name") or "")
    if output == "json":
        _print_json(objs)
    else:
        console.print(render.profiles_table(objs))


def _event_kinds() -> tuple[str, ...]:
    from koordcommon import subjects

    return tuple(getattr(subjects, n) for n in sorted(dir(subjects)) if n.startswith("EVENT_") and n.isupper()
                 and isinstance(getattr(subjects, n), str))  # fmt: skip


EVENT_KINDS = _event_kinds()


def _print_events(items: list[dict], output: str) -> None:
    if output == "json":
        _print_json(items)
    else:
        console.print(render.events_table(items))


async def _follow(nats_url: str, namespace: str, kind: str | None, node: str | None, output: str,
                  count: int | None, replay: bool) -> int:  # fmt: skip
    from koordcommon import subjects
    from koordcommon.bus import Bus
    from koordcommon.schemas import Event

    bus = Bus(nats_url, service="koordctl", namespace=namespace, credentials=bus_credentials())
    await bus.connect(timeout_s=HTTP_TIMEOUT_S)
    filter_subject = (
        f"{subjects.PREFIX}.events.{subjects.validate_token(kind)}.>" if kind else f"{subjects.PREFIX}.events.>"
    )
    shown = 0
    try:
        async for d in bus.tail(subjects.EVENTS_STREAM, filter_subject, Event, deliver="all" if replay else "new"):
            e = d.msg.model_dump(mode="json", exclude={"schema_"})
            if node and e.get("node") != node:
                continue
            typer.echo(json.dumps(e) if output == "json" else render.event_line(e))
            shown += 1
            if count is not None and shown >= count:
                break
    finally:
        await bus.close()
    return shown


@app.command()
def events(
    collector: str | None = typer.Option(None, help="metrics-collector URL (without --follow)"),
    kind: str | None = typer.Option(None, help="one of " + ", ".join(_event_kinds())),
    node: str | None = typer.Option(None, help="only events about this node"),
    limit: int = typer.Option(50, min=1, max=1000, help="how many of the newest events (without --follow)"),
    follow: bool = typer.Option(False, "--follow", "-f", help="stream events from the bus as they happen"),
    replay: bool = typer.Option(False, help="with --follow: start from the oldest event kept on the bus"),
    count: int | None = typer.Option(None, min=1, help="with --follow: stop after this many events"),
    nats_url: str | None = typer.Option(None, help="NATS of the demo (default: from the demo state)"),
    namespace: str | None = typer.Option(None, help="bus namespace (default: from the demo state)"),
    output: str = OutputOpt,
):
    """QoS, eviction, descheduling, admission and scheduling events (newest first, or followed)."""
    _check_output(output)
    if kind is not None and kind not in EVENT_KINDS:
        raise _fail(f"--kind must be one of {', '.join(EVENT_KINDS)}, not {kind!r}", 2)
    if not follow:
        url = _service_url("metrics-collector", collector) + "/api/v1/events"

        def body():
            with http_client() as client:
                return get_json(client, url, {"kind": kind, "node": node, "limit": limit})["items"]

        _print_events(_run(body), output)
        return
    state = _state()
    url = nats_url or state.get("nats_url") or ""
    ns = namespace if namespace is not None else state.get("namespace", "")
    if not url:
        raise _fail(f"no NATS URL given and no running demo in {_state_file()}")
    try:
        asyncio.run(_follow(url, ns, kind, node, output, count, replay))
    except KeyboardInterrupt:
        return
    except ValueError as exc:  # a kind that is not a subject token
        raise _fail(str(exc), 2) from None
    except Exception as exc:  # noqa: BLE001 - NATS down or refusing: one line, exit 2
        raise _fail(f"cannot follow events on {url}: {exc.__class__.__name__}: {exc}") from None


history_cmd.register(app, sys.modules[__name__])
explain_cmd.register(app, sys.modules[__name__])
whatif_cmd.register(app, sys.modules[__name__])
helpfmt.tidy(app)  # last: every command is registered


if __name__ == "__main__":
    app()
