"""The launcher's private NATS server: as `koordctl up` runs it (TLS, the generated identities),
and with its HTTP monitoring on a loopback port when a benchmark asks for JetStream's accounting."""

from __future__ import annotations

import httpx
import pytest
from koordctl.launcher import DemoPlan, Launcher, find_nats_server

pytestmark = pytest.mark.skipif(find_nats_server() is None, reason="no nats-server binary")


@pytest.mark.parametrize("monitor", [False, True])
def test_private_nats_serves_monitoring_only_when_asked(tmp_path, monitor):
    launcher = Launcher(DemoPlan(nodes=1, data_dir=tmp_path, private_nats=True, record_state=False,
                                 nats_monitor=monitor))  # fmt: skip
    try:
        assert launcher.start_nats().startswith("tls://")
        port = launcher.nats.monitor_port
        assert (port is not None) is monitor
        if monitor:
            jsz = httpx.get(f"http://127.0.0.1:{port}/jsz", timeout=5).json()
            assert "streams" in jsz or "config" in jsz  # JetStream is on
    finally:
        launcher.stop()
