"""Fixtures shared by the cross-service tests: headless Chromium for the dashboard."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KOORD_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps trying hosts a closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip


def require(reason: str):
    """Skip, or fail where the run must exercise everything (KOORD_REQUIRE_SERVICES=1, as in CI)."""
    if os.environ.get("KOORD_REQUIRE_SERVICES", "") not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (KOORD_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        require(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require("playwright is not installed (pip install playwright)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()
