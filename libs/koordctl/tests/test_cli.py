"""koordctl against a real collector, a real recommender API and a real NATS."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.schemas import Event
from koordcommon.testing.nats import drop_namespace
from koordctl.cli import app
from typer.testing import CliRunner

from .conftest import BATCH, NODES, PODS

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_status_every_service_ready_and_per_node_batch_capacity(collector_url, recommender_url, demo_state):
    demo_state({"metrics-collector": collector_url, "recommender": recommender_url})
    r = run("status", "-o", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {n: h["ready"] for n, h in data["services"].items()} == {"metrics-collector": True, "recommender": True}
    assert [n["node"] for n in data["nodes"]] == list(NODES)
    assert all(n["batch_allocatable"] == {"cpu_milli": 5000, "memory_bytes": 12 * 2**30} for n in data["nodes"])
    assert data["batch"]["batch_allocatable_cpu_milli"] == 2 * BATCH.cpu_milli
    assert data["batch"]["batch_allocated_cpu_milli"] == 2 * 1000  # one batch pod requesting 1 core per node
    assert data["dashboard"] == collector_url + "/dashboard/"

    table = run("status")
    assert table.exit_code == 0
    assert "node-1" in table.stdout and "5.0c/12.0Gi" in table.stdout
    assert "batch allocatable 10.0 cores" in table.stdout


def test_status_names_a_service_that_is_down_and_exits_1(collector_url, demo_state):
    dead = closed_port_url()
    demo_state({"metrics-collector": collector_url, "slo-controller": dead})
    r = run("status", "-o", "json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["services"]["slo-controller"]["ready"] is False
    assert data["services"]["slo-controller"]["detail"].startswith("unreachable")
    assert data["ready"] is False


@pytest.mark.parametrize("command", [["nodes"], ["pods"], ["events"], ["status"]])
def test_unreachable_collector_is_one_line_naming_the_url_and_exit_2(command, demo_state):
    dead = closed_port_url()
    demo_state({"metrics-collector": dead})
    r = runner.invoke(app, command)
    assert r.exit_code == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and dead in lines[0]


def test_unreachable_recommender_exit_2(demo_state):
    dead = closed_port_url()
    r = runner.invoke(app, ["recommendations", "--recommender", dead])
    assert r.exit_code == 2 and f"{dead}/api/v1/recommendations" in r.stderr


def test_no_demo_and_no_url_says_how_to_start_one(demo_state):
    r = runner.invoke(app, ["nodes"])
    assert r.exit_code == 2 and "koordctl up" in r.stderr


def test_nodes_table_and_json(collector_url):
    r = run("nodes", "--collector", collector_url, "-o", "json")
    items = json.loads(r.stdout)
    assert [(n["node"], n["pods"], n["capacity"]["cpu_milli"]) for n in items] == [
        ("node-1", 2, 8000),
        ("node-2", 2, 8000),
    ]
    r = run("nodes", "--collector", collector_url)
    assert r.exit_code == 0 and "8.0c/32.0Gi" in r.stdout


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], {("shop", "web-node-1"), ("jobs", "etl-node-1"), ("shop", "web-node-2"), ("jobs", "etl-node-2")}),
        (["--node", "node-2"], {("shop", "web-node-2"), ("jobs", "etl-node-2")}),
        (["-n", "jobs"], {("jobs", "etl-node-1"), ("jobs", "etl-node-2")}),
        (["--limit", "1"], None),
    ],
)
def test_pods_filters(collector_url, args, expected):
    r = run("pods", "--collector", collector_url, "-o", "json", *args)
    items = json.loads(r.stdout)
    if expected is None:
        assert len(items) == 1
    else:
        assert {(p["namespace"], p["name"]) for p in items} == expected
        bands = {p["name"].split("-")[0]: p["band"] for p in items}
        assert all(bands[name] == ("prod" if name == "web" else "batch") for name in bands)


def test_recommendations_with_savings(recommender_url):
    r = run("recommendations", "--recommender", recommender_url, "-o", "json")
    data = json.loads(r.stdout)
    names = {(w["namespace"], w["name"]) for w in data["items"]}
    assert names == {(ns, name) for name, ns, *_ in PODS}
    web = next(w for w in data["items"] if w["name"] == "web")
    # 2 replicas request 2 cores and use 1.2: a positive saving, but from an hour of history: the
    # recommendation is provisional and left out of the total
    assert web["provisional"] is True and web["provisional_savings"]["cpu_milli"] > 0
    assert web["estimated_savings"] is None and data["estimated_savings"] == {"cpu_milli": 0, "memory_bytes": 0}
    table = run("recommendations", "--recommender", recommender_url)
    assert "shop/Deployment/web" in table.stdout and "estimated savings 0.0 cores" in table.stdout
    assert "provisional" in table.stdout and "2 provisional recommendation(s)" in table.stdout
    assert all(c["method"]["used"] == "vpa" for w in data["items"] for c in w["containers"])
    assert "method" in table.stdout and "vpa" in table.stdout
    assert table.stdout.rstrip().endswith("what a target is made of: koordctl explain recommendation NAMESPACE/KIND/NAME")


def test_events_from_the_collector(collector_url):
    r = run("events", "--collector", collector_url, "-o", "json")
    assert [(e["kind"], e["node"], e["action"]) for e in json.loads(r.stdout)] == [
        ("deschedule", "node-2", "migrate"),
        ("qos", "node-1", "cpu_suppress"),
    ]
    r = run("events", "--collector", collector_url, "--kind", "qos", "-o", "json")
    assert [e["kind"] for e in json.loads(r.stdout)] == ["qos"]
    table = run("events", "--collector", collector_url)
    assert "jobs/etl-node-2" in table.stdout and "kubepods.slice/cpu.max" in table.stdout


def test_profiles_from_a_file():
    example = ROOT / "services/slo-controller/examples/spark-colocation-profile.yaml"
    r = run("profiles", "--file", str(example), "-o", "json")
    (p,) = json.loads(r.stdout)
    assert p["metadata"]["name"] == "colocation-profile-example"
    assert (p["spec"]["qosClass"], p["spec"]["priorityClassName"]) == ("BE", "koord-batch")
    table = run("profiles", "--file", str(example))
    assert "colocation-profile-exa" in table.stdout and "koord-batch" in table.stdout


def test_profiles_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed")
    r = runner.invoke(app, ["profiles", "--file", str(bad)])
    assert r.exit_code == 1 and "not valid YAML" in r.stderr
    r = runner.invoke(app, ["profiles", "--file", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 1 and "cannot read" in r.stderr


def test_bad_output_format_is_refused(collector_url):
    r = runner.invoke(app, ["nodes", "--collector", collector_url, "-o", "yaml"])
    assert r.exit_code == 2 and "table or json" in r.stderr


async def _publish(nats_url: str, namespace: str, events: list[Event]) -> None:
    bus = Bus(nats_url, service="koordctl-test", namespace=namespace)
    await bus.connect()
    try:
        await bus.ensure_stream(subjects.EVENTS_STREAM)
        for e in events:
            await bus.publish(subjects.event(e.kind, e.node), bus.stamp(e))
    finally:
        await bus.close()


def test_events_follow_replays_from_the_bus(nats_url, demo_state):
    ns = "kc" + uuid.uuid4().hex[:8]
    demo_state({}, nats_url=nats_url, namespace=ns)
    asyncio.run(_publish(nats_url, ns, [
        Event(kind="evict", node="node-1", action="evict", reason="memory 80% > 70%",
              target={"namespace": "jobs", "name": "etl-node-1"}),
        Event(kind="qos", node="node-2", action="cpu_burst", reason="burst"),
        Event(kind="evict", node="node-2", action="evict", reason="cpu satisfaction 0.4 < 0.6"),
    ]))  # fmt: skip
    r = run("events", "--follow", "--replay", "--kind", "evict", "--count", "2", "-o", "json")
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(e["node"], e["reason"]) for e in got] == [
        ("node-1", "memory 80% > 70%"),
        ("node-2", "cpu satisfaction 0.4 < 0.6"),
    ]
    r = run("events", "--follow", "--replay", "--node", "node-2", "--count", "2")
    lines = r.stdout.splitlines()
    asyncio.run(drop_namespace(nats_url, ns))
    assert len(lines) == 2 and " qos node-2 cpu_burst" in lines[0] and " evict node-2 evict" in lines[1]


def test_events_follow_streams_new_events(nats_url, tmp_path):
    ns = "kc" + uuid.uuid4().hex[:8]
    env = {**os.environ, "KOORD_STATE_FILE": str(tmp_path / "none.json")}
    proc = subprocess.Popen([sys.executable, "-m", "koordctl.cli", "events", "--follow", "--count", "1", "-o", "json",
                             "--nats-url", nats_url, "--namespace", ns], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        i = 0
        while proc.poll() is None and time.monotonic() < deadline:
            i += 1  # published until the follower, which only takes new events, has seen one
            asyncio.run(_publish(nats_url, ns, [Event(kind="deschedule", node="node-9", action="migrate",
                                                      reason=f"attempt {i}")]))  # fmt: skip
            time.sleep(0.3)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        asyncio.run(drop_namespace(nats_url, ns))
    assert proc.returncode == 0, err
    (line,) = out.splitlines()
    e = json.loads(line)
    assert (e["kind"], e["node"], e["action"]) == ("deschedule", "node-9", "migrate")
    assert e["reason"].startswith("attempt ")


def test_events_follow_with_nats_down_is_one_line_exit_2(demo_state):
    dead = closed_port_url().replace("http", "nats")
    demo_state({}, nats_url=dead, namespace="x")
    r = runner.invoke(app, ["events", "--follow", "--count", "1"])
    assert r.exit_code == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and dead in lines[0]


def test_compose_sim_driver_command_parses():
    import shlex

    import typer.main
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    argv = compose["services"]["sim-driver"]["command"]
    argv = shlex.split(argv) if isinstance(argv, str) else list(argv)
    assert argv[:2] == ["koordctl", "sim"]
    group = typer.main.get_command(app)
    ctx = group.commands["sim"].make_context("sim", argv[2:])
    assert ctx.params["nodes"] == 20
    assert ctx.params["extender_url"] == "http://scheduler-extender:10262"
    assert ctx.params["genesis"] is True


def test_traces_lists_the_sample_and_where_to_get_the_full_set(monkeypatch):
    monkeypatch.delenv("KOORD_TRACE_DIR", raising=False)
    r = run("traces", "-o", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["full"] is None and data["in_use"]["kind"] == "sample"
    by_name = {d["name"]: d for d in data["datasets"]}
    assert by_name["bitbrains"]["sample"]["files"] == 24 and by_name["bitbrains"]["full"] is None
    assert by_name["alibaba-2018"]["sample"]["bytes"] > 0 and "github.com" in by_name["alibaba-2018"]["origin"]
    r = run("traces")
    assert r.exit_code == 0 and "set KOORD_TRACE_DIR" in r.output


def test_traces_reports_a_koord_trace_dir_that_is_no_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("KOORD_TRACE_DIR", str(tmp_path / "absent"))
    r = runner.invoke(app, ["traces"])
    assert r.exit_code == 1 and "is not a folder" in r.output
    monkeypatch.setenv("KOORD_TRACE_DIR", str(tmp_path))  # a folder without the datasets: each is absent
    data = json.loads(run("traces", "-o", "json").output)
    assert data["in_use"]["kind"] == "full" and all(d["full"]["files"] == 0 for d in data["datasets"])


@pytest.mark.parametrize("text,owner", [("10001", (10001, 10001)), ("10001:20", (10001, 20)), ("0:0", (0, 0)),
                                        ("koord", None), ("10001:koord", None), (":20", None), ("-1", None)])
def test_secure_init_owner_is_numeric_uid_and_gid(text, owner, tmp_path):
    from koordctl.secure import parse_owner

    if owner is None:
        with pytest.raises(ValueError):
            parse_owner(text)
        result = runner.invoke(app, ["secure-init", "--out", str(tmp_path / "s"), "--owner", text])
        assert result.exit_code == 2 and "--owner" in result.output
        assert not (tmp_path / "s").exists(), "nothing written before the options are checked"
    else:
        assert parse_owner(text) == owner


def test_secure_init_hands_every_file_to_the_owner_and_keeps_the_set(tmp_path):
    out = tmp_path / "s"
    me = f"{os.getuid()}:{os.getgid()}"
    assert run("secure-init", "--out", str(out), "--owner", me).exit_code == 0
    files = sorted(p.name for p in out.iterdir())
    assert {"nats-server.conf", "ca.crt", "api-token", "metrics-collector.nk", "sim-driver.nk"} <= set(files)
    assert all((p.stat().st_uid, p.stat().st_gid) == (os.getuid(), os.getgid()) for p in [out, *out.iterdir()])
    assert all(p.stat().st_mode & 0o077 == 0 for p in out.iterdir() if p.suffix in (".nk", ".key") or p.name == "api-token")
    token = (out / "api-token").read_text()
    assert "kept" in run("secure-init", "--out", str(out), "--owner", me).output
    assert (out / "api-token").read_text() == token, "a second start keeps the credentials the clients hold"
