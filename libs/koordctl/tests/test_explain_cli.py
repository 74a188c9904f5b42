"""koordctl explain, whatif publishing and the fixes found by trying the CLI, against the real
collector of conftest."""

from __future__ import annotations

import json
import re
import struct
import zlib

import httpx
import pytest
from koordctl.cli import app
from koordctl.whatif_publish import PublishError, publish
from typer.testing import CliRunner

from .test_cli import closed_port_url

runner = CliRunner()


def png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00")) + chunk(b"IEND", b""))  # fmt: skip


def report_dir(tmp_path, with_plots=True):
    doc = {"scenario": {"title": "2 nodes"}, "assumptions": ["a"], "recommended": "x", "why": "because",
           "runs": [{"config": {"name": "x"}, "summary": {"baseline": False}, "hourly": {}, "wall_s": 1, "loops": 0}]}  # fmt: skip
    (tmp_path / "report.json").write_text(json.dumps(doc))
    (tmp_path / "report.md").write_text("| config | reclaimed |\n|---|---|\n| x | 12.0 |\n")
    if with_plots:
        (tmp_path / "reclaimed-vs-risk.png").write_bytes(png())
        (tmp_path / "hourly-bands.png").write_bytes(png())
    return tmp_path


def test_publish_sends_every_file_and_the_collector_serves_them(collector_url, tmp_path):
    publish(collector_url, report_dir(tmp_path), None)
    view = httpx.get(collector_url + "/api/v1/whatif/last").json()
    assert view["recommended"] == "x" and view["table"] == {"columns": ["config", "reclaimed"], "rows": [["x", "12.0"]]}
    assert sorted(view["plots"]) == ["hourly-bands.png", "reclaimed-vs-risk.png"]
    assert httpx.get(collector_url + view["plots"]["hourly-bands.png"]).content == png()


def test_publish_errors_are_clear(tmp_path):
    with pytest.raises(PublishError, match="report.json does not exist"):
        publish("http://127.0.0.1:1", tmp_path, None)
    dead = closed_port_url()
    with pytest.raises(PublishError, match=f"cannot reach {re.escape(dead)}/api/v1/whatif/last"):
        publish(dead, report_dir(tmp_path), "t")


def test_explain_node_without_stored_inputs_says_so(collector_url):
    r = runner.invoke(app, ["explain", "node", "node-1", "--collector", collector_url, "--since", "2h"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("node node-1: 1 batch allocatable report(s)")
    assert "no inputs stored with this report" in r.stdout
    bad = runner.invoke(app, ["explain", "node", "node-1", "--collector", collector_url, "--since", "soon"])
    assert bad.exit_code == 2 and "--since" in bad.stderr
    missing = runner.invoke(app, ["explain", "node", "nowhere", "--collector", collector_url])
    assert missing.exit_code == 2 and "no stored NodeResource report" in missing.stderr


def test_explain_pod_names_services_that_do_not_answer(collector_url, demo_state):
    dead = closed_port_url()
    demo_state({"metrics-collector": collector_url, "scheduler-extender": dead})
    r = runner.invoke(app, ["explain", "pod", "jobs/etl-node-1", "-o", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["services"]["scheduler-extender"]["error"].startswith(dead)
    assert "no URL" in data["services"]["descheduler"]["error"]
    # etl is a BE pod: its node's CPU suppress events explain what held it back
    assert [(d["kind"], d["action"], d["node"]) for d in data["services"]["metrics-collector"]["decisions"]] == [
        ("qos", "cpu_suppress", "node-1")]


def test_status_with_a_stale_state_file_says_the_demo_is_not_running(demo_state):
    demo_state({"metrics-collector": closed_port_url(), "scheduler-extender": closed_port_url()})
    r = runner.invoke(app, ["status"])
    assert r.exit_code == 2
    assert "the demo is not running" in r.stderr and "koordctl up" in r.stderr


def test_events_kind_is_validated(collector_url):
    r = runner.invoke(app, ["events", "--collector", collector_url, "--kind", "evictions"])
    assert r.exit_code == 2 and "--kind must be one of deschedule, evict, mutate, qos, schedule" in r.stderr
    ok = runner.invoke(app, ["events", "--collector", collector_url, "--kind", "qos", "-o", "json"])
    assert ok.exit_code == 0 and [e["kind"] for e in json.loads(ok.stdout)] == ["qos"]


@pytest.mark.parametrize("command", [["up"], ["events"], ["explain", "pod"], ["status"], ["--help"][:0]])
def test_options_and_flags_have_no_python_type_labels(command):
    r = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "160"})
    assert r.exit_code == 0
    options = [line for line in r.stdout.splitlines() if re.match(r"\W*--", line)]
    assert options and not any(re.search(r"<(bool|str|int|float|path)>", line) for line in options), r.stdout


def test_explain_recommendation_from_the_recommender(recommender_url):
    api = httpx.get(recommender_url + "/api/v1/recommendations/shop/Deployment/web").json()
    r = runner.invoke(app, ["explain", "recommendation", "shop/Deployment/web", "--recommender", recommender_url])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "workload shop/Deployment/web: 1 container(s)"
    (c,) = api["containers"]
    x, tgt = c["method"]["explanation"], c["recommendation"]["target"]
    assert lines[2] == "container main: method vpa"
    # the histogram's p90 and the target the recommender gave, as the API holds them
    cpu = next(line for line in lines if line.startswith("  cpu: "))
    at = f"{x['cpu_at_percentile']:.3f}".rstrip("0").rstrip(".")
    assert cpu == (f"  cpu: p90 of the CPU usage histogram (weights halve every 24 h) = {at} cores; "
                   f"+ safety margin 15 %: target {tgt['cpu_milli'] / 1000:g} cores")  # fmt: skip
    assert lines[-1].startswith("  minimums: no target below this container's share of the per-pod minimums")
    # -o json is the recommender's answer; -n names the namespace of kind/name
    same = runner.invoke(app, ["explain", "recommendation", "Deployment/web", "-n", "shop", "-o", "json",
                               "--recommender", recommender_url])  # fmt: skip
    assert same.exit_code == 0 and json.loads(same.stdout) == api


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["shop/Deployment/nowhere"], "answered 404 no recommendation for shop/Deployment/nowhere"),
        (["shop/Deployment/web", "-c", "sidecar"], "shop/Deployment/web has no container 'sidecar' (its containers: main)"),
        (["web"], "give namespace/kind/name"),
    ],
)
def test_explain_recommendation_errors(recommender_url, args, error):
    r = runner.invoke(app, ["explain", "recommendation", *args, "--recommender", recommender_url])
    assert r.exit_code == 2 and error in r.stderr, r.output
