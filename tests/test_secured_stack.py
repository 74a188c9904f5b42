"""The whole system as `koordctl up` runs it by default on a fresh machine, over real processes:
a private NATS server with TLS and one nkey identity per service (each held to its role's
permissions), the API token, the six services on the simulated cluster. Then the faults of the
README's "Failure modes", one after the other, bounded in time:

* kill -9 and restart of each service: it comes back ready and rebuilds its state from the bus,
  the KV bucket and its checkpoints (the extender knows every node again, the slo-controller
  publishes NodeResources, the collector keeps storing samples, the recommender its profiles);
* kill -9 of the NATS server mid-stream and its restart on the same store: every service
  reconnects and is ready again, consumers resume, no sample is stored twice;

and at the end, the logs of the whole run hold no secret (nkey seeds, private keys, the token)
and no permission was refused to a service doing its job.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path

import httpx
import pytest
from koordcommon.bus import Bus
from koordcommon.resources import Resources
from koordctl.launcher import DemoPlan, Launcher
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec

NODES = 4
STEP_TIMEOUT_S = 60


async def _eventually(check, timeout_s: float = STEP_TIMEOUT_S, what: str = ""):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = await check()
            if last:
                return last
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            last = exc
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what or check.__name__} not within {timeout_s} s (last: {last!r})")


@pytest.fixture
def launcher(tmp_path, monkeypatch):
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("KOORD_STATE_FILE", str(tmp_path / "state.json"))
    plan = DemoPlan(nodes=NODES, data_dir=tmp_path / "run", private_nats=True, extra_env={
        "KOORD_AGENT_NODEMETRIC_INTERVAL_S": "5", "KOORD_AGENT_REPORT_INTERVAL_S": "2",
    })
    la = Launcher(plan)
    yield la
    la.stop()


async def test_secured_stack_survives_crashes_and_a_bus_restart_and_logs_no_secret(launcher):
    url = launcher.start_nats()
    assert url.startswith("tls://") and launcher.secrets is not None
    bus = Bus(url, service="koordctl", namespace=launcher.namespace, credentials=launcher.bus_credentials("koordctl"))
    await bus.connect(timeout_s=10)
    cluster = SimCluster(SimSpec(nodes=NODES, seed=5, speed=1.0), bus=bus, genesis=True)
    await cluster.start()
    launcher.start_services()
    try:
        ready = await launcher.wait_ready(90)
        assert all(ready.values()), ready
        urls = {r.spec.name: r.url for r in launcher.running}
        token = launcher.secrets.api_token_file.read_text().strip()
        async with httpx.AsyncClient(timeout=5) as http:

            async def samples_stored() -> int:
                nodes = (await http.get(urls["metrics-collector"] + "/api/v1/nodes")).json()["items"]
                return len(nodes) == NODES and sum(1 for n in nodes if n.get("usage"))

            async def batch_published() -> bool:
                nodes = await cluster.list_nodes()
                return all((n.batch_allocatable() or Resources()).cpu_milli > 0 for n in nodes)

            async def extender_knows_every_node() -> bool:
                s = (await http.get(urls["scheduler-extender"] + "/api/v1/summary")).json()
                return s.get("nodes") == NODES and s.get("metrics") == NODES

            await _eventually(samples_stored, what="samples stored by the collector")
            await _eventually(batch_published, what="batch allocatable on every node")
            await _eventually(extender_knows_every_node, what="extender state")

            # writes need the token; the static token the launcher generated is accepted
            probe = urls["metrics-collector"] + "/api/v1/whatif/last"
            assert (await http.put(probe, content=b"{}")).status_code == 401
            authorised = await http.put(probe, content=b"{}", headers={"Authorization": f"Bearer {token}"})
            assert authorised.status_code != 401

            # ---- kill -9 and restart of each service
            for name in [r.spec.name for r in launcher.running]:
                restarted = launcher.restart(name)
                ready = await launcher.wait_ready(60)
                assert all(ready.values()), (name, ready)
                assert restarted.process.poll() is None
            await _eventually(extender_knows_every_node, what="extender state after its restart")
            marker = time.time() * 1000
            await _eventually(lambda: _latest_sample_after(http, urls, marker), what="samples after the restarts")
            await _eventually(batch_published, what="batch allocatable after the restarts")

            # ---- kill -9 of the NATS server mid-stream, restart on the same port and store
            launcher.nats.process.kill()
            launcher.nats.process.wait()
            await asyncio.sleep(2)
            launcher.nats.start()

            async def all_ready() -> bool:
                ready = await launcher.wait_ready(1)
                return all(ready.values())

            await _eventually(all_ready, what="every service ready after the bus restart")
            marker = time.time() * 1000
            await _eventually(lambda: _latest_sample_after(http, urls, marker), what="samples after the bus restart")
            node = (await cluster.list_nodes())[0].name
            series = (await http.get(urls["metrics-collector"] + f"/api/v1/nodes/{node}/usage",
                                     params={"step": "1s"})).json()
            # one sample every 2 s: a 1 s bucket holding two would be a sample stored twice
            assert series["points"] and all(p["samples"] == 1 for p in series["points"]), series["points"]
    finally:
        with contextlib.suppress(Exception):
            await cluster.close()
        with contextlib.suppress(Exception):
            await bus.close()
        launcher.stop_services()

    # ---- the logs of the whole run: no secret, no refused permission
    secrets = launcher.secrets
    needles = [secrets.api_token_file.read_text().strip()]
    needles += [p.read_text().strip() for p in secrets.dir.glob("*.nk")]
    needles += [re.sub(r"-----.*?-----|\s", "", p.read_text())[:40] for p in secrets.dir.glob("*.key")]
    logs = {p.name: p.read_text(errors="replace") for p in Path(launcher.data_dir).glob("*.log")}
    assert set(logs) >= {f"{r.spec.name}.log" for r in launcher.running}
    for name, text in logs.items():
        for secret in needles:
            assert secret not in text, f"a secret is in {name}"
        assert "Permissions Violation" not in text, f"{name}: a service was refused something its role needs"


async def _latest_sample_after(http: httpx.AsyncClient, urls: dict[str, str], after_ms: float) -> bool:
    nodes = (await http.get(urls["metrics-collector"] + "/api/v1/nodes")).json()["items"]
    return len(nodes) == NODES and all(n["ts"] > after_ms for n in nodes)
