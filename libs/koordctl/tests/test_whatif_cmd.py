"""`koordctl check-config` and `koordctl whatif` as a user runs them: exit codes, the table, the
report files, refused input."""

from __future__ import annotations

import json

import yaml
from koordctl.cli import app
from typer.testing import CliRunner

runner = CliRunner()


def test_check_config_finds_the_fight_and_exits_1(tmp_path):
    ext = tmp_path / "extender.yaml"
    ext.write_text(yaml.safe_dump({"usage_thresholds": {"cpu": 80, "memory": 75}}))
    res = runner.invoke(app, ["check-config", "--extender", str(ext)])
    assert res.exit_code == 1, res.output
    assert "ERROR: scheduler-extender usage_thresholds.cpu=80 vs cpuSuppressThresholdPercent=65" in res.output
    assert "fix: set the load-aware CPU threshold at or below 65" in res.output
    res = runner.invoke(app, ["check-config", "--extender", str(ext), "-o", "json"])
    found = json.loads(res.output)
    assert {f["level"] for f in found} == {"error"} and len(found) == 2  # over suppress and over desched high 75


def test_check_config_of_a_clean_configuration_exits_0(tmp_path):
    ext = tmp_path / "extender.yaml"
    ext.write_text(yaml.safe_dump({"usage_thresholds": {"cpu": 65, "memory": 75}}))
    res = runner.invoke(app, ["check-config", "--extender", str(ext)])
    assert (res.exit_code, res.output.strip()) == (0, "no conflicting settings found")


def test_check_config_refuses_a_setting_the_service_refuses(tmp_path):
    ext = tmp_path / "extender.yaml"
    ext.write_text(yaml.safe_dump({"usage_thresholds": {"cpu": 180}}))
    res = runner.invoke(app, ["check-config", "--extender", str(ext)])
    assert res.exit_code == 2 and "scheduler-extender settings" in res.output


def test_a_configmap_the_slo_controller_refuses_is_refused_before_anything_runs(tmp_path):
    cm = tmp_path / "cm.yaml"
    cm.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "data": {
        "colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercnt": 50})}}))
    expected = ("slo-controller-config rejected: colocation-config: unknown field cpuReclaimThresholdPercnt "
                "(did you mean cpuReclaimThresholdPercent?)")
    res = runner.invoke(app, ["check-config", "--slo-config", str(cm)])
    assert res.exit_code == 2 and expected in res.output, res.output
    res = runner.invoke(app, ["whatif", "--slo-config", str(cm), "--days", "0.05", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and expected in res.output and "replaying" not in res.output, res.output
    res = runner.invoke(app, ["whatif", "--sweep", "cpuCalculatePolicy=bogus", "--days", "0.05",
                              "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and 'cpuCalculatePolicy must be one of usage, request, maxUsageRequest, predict, got "bogus"' \
        in res.output and "replaying" not in res.output, res.output


def test_whatif_replays_the_variations_and_writes_the_report(tmp_path):
    out = tmp_path / "report"
    res = runner.invoke(app, ["whatif", "--days", "0.05", "--vary", "cpuReclaimThresholdPercent=50,60",
                              "--workers", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "scenario: 14 nodes replaying 14 Alibaba 2018 machines" in res.output
    # the baseline, the default and 50 (60 is the default's own value: not replayed twice)
    doc = json.loads((out / "report.json").read_text())
    assert [r["config"]["name"] for r in doc["runs"]] == ["no colocation", "default", "cpuReclaimThresholdPercent=50"]
    assert doc["recommended"] in ("default", "cpuReclaimThresholdPercent=50") and doc["why"]
    assert {p.name for p in out.iterdir()} == {"report.json", "report.md", "reclaimed-vs-risk.png", "hourly-bands.png", ".runs"}
    assert "| cpuReclaimThresholdPercent=50 |" in res.output and "recommended:" in res.output
    # run again: every replay is reused from OUT/.runs, the report the same; --fresh replays again
    again = runner.invoke(app, ["whatif", "--days", "0.05", "--vary", "cpuReclaimThresholdPercent=50",
                                "--workers", "1", "--out", str(out)])
    assert again.exit_code == 0 and again.output.count("reused (kept from an earlier run)") == 3
    assert json.loads((out / "report.json").read_text())["runs"][2]["summary"] == doc["runs"][2]["summary"]
    fresh = runner.invoke(app, ["whatif", "--days", "0.05", "--workers", "1", "--out", str(out), "--fresh"])
    assert fresh.exit_code == 0 and "reused" not in fresh.output


def test_whatif_refuses_bad_input():
    res = runner.invoke(app, ["whatif", "--days", "0.05", "--vary", "cpuReclaimThresholdPrecent=50"])
    assert res.exit_code == 2 and "unknown" in res.output.lower()
    res = runner.invoke(app, ["whatif", "--days", "0.05", "--sweep", "cpuReclaimThresholdPercent=50",
                              "--vary", "cpuReclaimThresholdPercent=70"])
    assert res.exit_code == 2 and "do not mix" in res.output
    res = runner.invoke(app, ["whatif", "--days", "0.05", "--trace", "nope"])
    assert res.exit_code == 2 and "unknown trace 'nope'" in res.output


def test_whatif_replays_a_candidate_file_beside_the_default(tmp_path):
    from pathlib import Path

    candidate = Path(__file__).resolve().parents[3] / "deploy/config/whatif/quota-suppress-63.yaml"
    out = tmp_path / "report"
    res = runner.invoke(app, ["whatif", "--days", "0.05", "--candidate", str(candidate), "--workers", "1",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "report.json").read_text())
    assert [r["config"]["name"] for r in doc["runs"]] == ["no colocation", "default", "quota suppress at 63 %"]
    threshold = doc["runs"][2]["config"]["slo-controller-config"]["resource-threshold-config"]
    assert threshold["clusterStrategy"]["cpuSuppressPolicy"] == "cfsQuota"


def test_the_repositorys_candidates_have_no_fight():
    """The configurations the README replays and recommends pass check-config (warnings at most)."""
    from pathlib import Path

    candidates = sorted((Path(__file__).resolve().parents[3] / "deploy/config/whatif").glob("*.yaml"))
    assert [p.name for p in candidates] == ["quota-suppress-63-reclaim-70.yaml", "quota-suppress-63.yaml"]
    for path in candidates:
        res = runner.invoke(app, ["check-config", "--config", str(path), "-o", "json"])
        assert res.exit_code == 0, res.output
        assert "error" not in {f["level"] for f in json.loads(res.output)}


def test_publishing_to_a_demo_that_is_not_running_is_refused_before_replaying(tmp_path, monkeypatch):
    state = tmp_path / "demo.json"  # no demo has written it
    monkeypatch.setenv("KOORD_STATE_FILE", str(state))
    res = runner.invoke(app, ["whatif", "--days", "0.05", "--publish", "demo", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    assert f"no metrics-collector URL given and no running demo in {state}" in res.output
    assert "replaying" not in res.output and not (tmp_path / "r").exists()


def test_check_config_reads_a_descheduler_configuration(tmp_path):
    d = tmp_path / "descheduler.yaml"
    d.write_text(yaml.safe_dump({
        "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration", "deschedulingInterval": "10s",
        "leaderElection": {"leaderElect": True},
        "profiles": [{"name": "koord-descheduler", "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                      "pluginConfig": [{"name": "LowNodeLoad", "args": {"highThresholds": {"cpu": 60, "memory": 80},
                                                                        "lowThresholds": {"cpu": 45, "memory": 55}}}]}],
    }))  # fmt: skip
    res = runner.invoke(app, ["check-config", "--descheduler", str(d), "-o", "json"])
    assert res.exit_code == 1, res.output  # the load-aware 65 % over the pool's high 60 %: a migration loop
    found = [(f["level"], f["settings"]) for f in json.loads(res.output)]
    assert ("error", ["scheduler-extender usage_thresholds.cpu=65", "descheduler __default_node_pool__ highThresholds.cpu=60"]) in found
    assert ("warning", ["descheduler"]) in found  # leaderElection: accepted without effect
