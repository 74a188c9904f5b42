"""The README's demo command, end to end: six services as processes on the sim cluster.

While the demo runs, its dashboard is opened in headless Chromium and must draw the capacity
chart with data in every band; `koordctl status` must show every service healthy and the
per-node batch capacity. Ctrl-C (SIGINT) then stops everything, leaving no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ("services healthy", "batch pod placed", "collector serves usage", "batch allocatable published")
BANDS = ("capacity", "prod used", "prod allocated", "mid allocatable", "mid allocated", "batch allocatable",
         "batch allocated", "batch used")  # fmt: skip


def wait(predicate, timeout_s: float, what: str, proc: subprocess.Popen, out: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the demo exited ({proc.returncode}) while waiting for {what}:\n{out.read_text()[-3000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(1)
    pytest.fail(f"{what} not seen within {timeout_s} s:\n{out.read_text()[-3000:]}")


def batch_placed(state: dict) -> bool:
    try:
        nodes = httpx.get(state["services"]["metrics-collector"] + "/api/v1/nodes", timeout=5).json()["items"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return any((n.get("batch_allocatable") or {}).get("cpu_milli", 0) > 0 for n in nodes)


@pytest.mark.e2e
def test_demo_runs_shows_the_dashboard_and_stops_cleanly(tmp_path, nats_url, browser):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # the demo is embedded: SQLite
    state_file = tmp_path / "demo.json"
    env.update(NATS_URL=nats_url, KOORD_STATE_FILE=str(state_file), COLUMNS="160", PYTHONUNBUFFERED="1")
    out = tmp_path / "demo.out"
    data_dir = tmp_path / "demo"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "koordctl.cli", "up", "--duration", "400", "--check", "--data-dir", str(data_dir)],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait(lambda: state_file.exists(), 60, "the demo's state file", proc, out)
        state = json.loads(state_file.read_text())
        # the summary shows capacity, and the collector knows batch allocatable for some node
        wait(lambda: batch_placed(state), 120, "batch allocatable on a node", proc, out)
        wait(lambda: "/dashboard/" in out.read_text(), 30, "the dashboard URL in the demo's output", proc, out)

        status = subprocess.run(
            [sys.executable, "-m", "koordctl.cli", "status", "-o", "json"], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["services"] and all(report["services"].values()), report["services"]
        nodes = report["nodes"]["items"] if isinstance(report["nodes"], dict) else report["nodes"]
        assert len(nodes) == 20

        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.goto(state["services"]["metrics-collector"] + "/dashboard/?refresh=2")

        def every_band_has_data():
            page.wait_for_function("window.koord && window.koord.refreshes >= 1", timeout=20_000)
            series = page.evaluate("window.koord.series.cluster")
            filled = {label: any(v for v in values if v) for label, values in zip(series["labels"], series["data"][1:])}
            return filled if all(filled.get(b) for b in BANDS) else None

        filled = wait(every_band_has_data, 120, "every band of the capacity chart", proc, out)
        assert set(BANDS) <= set(filled)
        assert page.evaluate("window.koord.errors") == []
        page.screenshot(path=str(tmp_path / "demo-dashboard.png"), full_page=True)
        page.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = out.read_text()
    assert proc.returncode == 0, text[-4000:]
    for check in CHECKS:
        assert f"PASS {check}" in text, text[-4000:]
    assert "FAIL" not in text
    leftover = subprocess.run(["pgrep", "-f", str(data_dir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", f"processes left behind: {leftover.stdout}"
