"""`koordctl explain node NODE`, `koordctl explain pod POD` and `koordctl explain recommendation
WORKLOAD`: why a node offers this much batch, why a pod was (not) placed, suppressed or evicted,
and what a workload's recommended requests were made of, from the services that decided.

A node's explanation comes from the metrics-collector, which keeps every NodeResource report of
the slo-controller with its inputs. A pod's comes from the services that decide about pods,
asked over REST and put together here: the scheduler-extender (each candidate node's verdict
per plugin and the score breakdown), the descheduler (its last round's migration of the pod
and its jobs) and, for the node agents' QoS evictions and suppression (the agents run one per
node and serve no REST of their own), the metrics-collector, which keeps their events with the
rule's inputs. A service that is not running or not reachable is named in the output; the
others still answer. A recommendation comes from the recommender, which names the method behind
each container's target and the figures it was made of.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import typer

from . import explain_recommendation, explain_render

explain_app = typer.Typer(help="Why a node offers this much batch; why a pod was filtered, placed or evicted; "
                          "what a workload's recommended requests were made of.",
                          no_args_is_help=True)  # fmt: skip
# koordctl's shared helpers (service URLs, the HTTP client with the API token, output), handed in
# by `register` so that this module does not import the cli back
cli: Any = None
# The services that decide about pods, in the order their answers are shown.
POD_DECIDERS = ("scheduler-extender", "descheduler", "metrics-collector")


def _since_ms(since: str) -> int:
    from koordcommon.durations import DurationError, parse_duration_ms

    try:
        ms = parse_duration_ms(since)
    except DurationError as exc:
        raise cli._fail(f"--since: {exc}", 2) from None
    if ms <= 0:
        raise cli._fail(f"--since must be positive, not {since!r}", 2)
    return ms


@explain_app.command("node")
def explain_node(
    node: str = typer.Argument(..., help="node name"),
    at: str | None = typer.Option(None, help="only the report in force at this time (epoch ms or RFC 3339)"),
    since: str = typer.Option("1h", help="reports published in this past window (30m, 1h, 2h30m)"),
    collector: str | None = typer.Option(None, help="metrics-collector URL (default: the running demo's)"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
):
    """The batch formula of each report with its values (capacity, safety margin, system usage,
    HP usage or request per pod, reserved, policy, degrade state, write decision), and what
    moved most since the previous report."""
    cli._check_output(output)
    url = cli._service_url("metrics-collector", collector) + f"/api/v1/nodes/{node}/explain"
    if at is not None:
        params: dict[str, Any] = {"at": at}
    else:
        now = int(time.time() * 1000)
        params = {"from": now - _since_ms(since), "to": now + 1}

    def body():
        with cli.http_client() as client:  # the API token when one is configured (reads may be protected)
            return cli.get_json(client, url, params)

    data = cli._run(body)
    if output == "json":
        cli._print_json(data)
    else:
        typer.echo(explain_render.node_report(data), nl=False)


def split_pod(pod: str, namespace: str) -> tuple[str, str]:
    """`namespace/name`, or a name in `namespace`."""
    if "/" in pod:
        ns, _, name = pod.partition("/")
        if not ns or not name or "/" in name:
            raise ValueError(f"pod {pod!r}: give namespace/name or a name with -n")
        return ns, name
    return namespace, pod


def ask_deciders(urls: dict[str, str], namespace: str, name: str, nodes: int) -> dict[str, Any]:
    """Each deciding service's explanation of the pod; unreachable ones say so."""
    out: dict[str, Any] = {}
    with cli.http_client() as client:
        for service in POD_DECIDERS:
            base = urls.get(service)
            if not base:
                out[service] = {"error": "no URL (give it as an option, or run the demo)"}
                continue
            url = f"{base}/api/v1/explain/pods/{namespace}/{name}"  # the same path on each
            try:
                out[service] = cli.get_json(client, url, {"nodes": nodes} if service == "scheduler-extender" else None)
            except cli.Unreachable as exc:
                out[service] = {"error": f"{exc.url}: {exc.reason}"}
    return out


@explain_app.command("pod")
def explain_pod(
    pod: str = typer.Argument(..., help="namespace/name, or a name with -n"),
    namespace: str = typer.Option("default", "--namespace", "-n", help="the pod's namespace"),
    nodes: int = typer.Option(10, min=1, max=5000, help="candidate nodes shown in detail (all are counted)"),
    extender: str | None = typer.Option(None, help="scheduler-extender URL (default: the running demo's)"),
    descheduler: str | None = typer.Option(None, help="descheduler URL (default: the running demo's)"),
    collector: str | None = typer.Option(None, help="metrics-collector URL, for the node agents' evictions "
                                         "(default: the running demo's)"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
):
    """Each candidate node's verdict per extender plugin with its numbers (estimated usage vs
    threshold, batch fit, reservation) and the score breakdown; the QoS and descheduler
    decisions about the pod with their inputs."""
    cli._check_output(output)
    try:
        ns, name = split_pod(pod, namespace)
    except ValueError as exc:
        raise cli._fail(str(exc), 2) from None
    known = (cli._state().get("services") or {}) if not all((extender, descheduler, collector)) else {}
    given = {"scheduler-extender": extender, "descheduler": descheduler, "metrics-collector": collector}
    urls = {s: (given[s] or known.get(s) or "").rstrip("/") for s in POD_DECIDERS}
    if not any(urls.values()):
        raise cli._fail("no service URL given and no running demo (start one with `koordctl up`, or pass --extender, "
                    "--descheduler, --collector)")  # fmt: skip
    answers = ask_deciders(urls, ns, name, nodes)
    data = {"pod": f"{ns}/{name}", "services": answers}
    if output == "json":
        cli._print_json(data)
    else:
        typer.echo(explain_render.pod_report(data), nl=False)
    if all("error" in a for a in answers.values()):
        raise typer.Exit(2)


def split_workload(workload: str, namespace: str) -> tuple[str, str, str]:
    """`namespace/kind/name`, or `kind/name` in `namespace`."""
    parts = workload.split("/")
    if len(parts) == 2:
        parts = [namespace, *parts]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"workload {workload!r}: give namespace/kind/name (shop/Deployment/web), or kind/name with -n")
    return parts[0], parts[1], parts[2]


@explain_app.command("recommendation")
def explain_recommendation_cmd(
    workload: str = typer.Argument(..., help="namespace/kind/name (shop/Deployment/web), or kind/name with -n"),
    namespace: str = typer.Option("default", "--namespace", "-n", help="the workload's namespace"),
    container: str | None = typer.Option(None, "--container", "-c", help="only this container"),
    recommender: str | None = typer.Option(None, help="recommender URL (default: the running demo's)"),
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
):
    """Each container's recommended requests with the method that gave them and the figures
    they were made of: VPA's histogram percentile and safety margin, the moving window's
    statistic, margin and rise headroom, the ML ensemble's chosen model among its models with
    their limits and decayed costs; and the per-pod minimums no target goes below."""
    cli._check_output(output)
    try:
        ns, kind, name = split_workload(workload, namespace)
    except ValueError as exc:
        raise cli._fail(str(exc), 2) from None
    path = "/".join(quote(part, safe="") for part in (ns, kind, name))
    url = cli._service_url("recommender", recommender) + f"/api/v1/recommendations/{path}"

    def body():
        with cli.http_client() as client:
            return cli.get_json(client, url)

    data = cli._run(body)
    if container is not None and not any(c.get("container") == container for c in data.get("containers") or []):
        known = ", ".join(str(c.get("container")) for c in data.get("containers") or []) or "none"
        raise cli._fail(f"{ns}/{kind}/{name} has no container {container!r} (its containers: {known})", 2)
    if output == "json":
        cli._print_json(data)
    else:
        typer.echo(explain_recommendation.recommendation_report(data, container), nl=False)


def register(app: typer.Typer, helpers) -> None:
    """Add `explain` to `app`; `helpers` is the module with koordctl's shared helpers (cli)."""
    global cli
    cli = helpers
    app.add_typer(explain_app, name="explain")
