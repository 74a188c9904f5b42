"""The README's demo command, end to end: six services as processes on the sim cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_demo_brings_everything_up_and_places_a_batch_pod(tmp_path, nats_url):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["NATS_URL"] = nats_url
    env["KOORD_STATE_FILE"] = str(tmp_path / "demo.json")
    proc = subprocess.run(
        [sys.executable, "-m", "koordctl.cli", "up", "--duration", "90", "--check", "--data-dir", str(tmp_path / "demo")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for check in ("services healthy", "batch pod placed", "collector serves usage", "batch allocatable published"):
        assert f"PASS {check}" in out, out[-4000:]
    assert "FAIL" not in out
    # every service stopped: nothing is left listening from the demo's processes
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "demo")], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", f"processes left behind: {leftover.stdout}"
