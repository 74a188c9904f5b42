"""Explanations end to end, with processes: the node agent (sim mode) reports trace-driven usage,
the slo-controller turns it into batch allocatable, the metrics-collector stores its reports with
their inputs, the scheduler-extender judges pods; `koordctl explain` asks them over REST.

* A node whose prod usage rises: `koordctl explain node` shows the HP term growing between the
  reports before and after, and naming it as what moved most.
* A pod filtered for load: `koordctl explain pod` shows, per node, the estimate against the
  threshold that rejected it.

The simulated clock runs 30x: a NodeMetric report interval of 60 simulated seconds is 2 wall
seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import orjson
import pytest
from koordcommon import subjects
from koordcommon.testing.net import free_port, wait_http_ready
from koordcommon.testing.processes import poll, start, stop
from koordctl.cli import app
from koordsim.cluster import SimCluster, SimSpec
from typer.testing import CliRunner

pytestmark = pytest.mark.e2e

SPEED = 30.0
REPORT_S = 60
BATCH_CPU = "koordinator.sh/batch-cpu"
DAY_MS = 86_400_000
runner = CliRunner()


def noon_yesterday_ms() -> int:
    """The cluster starts at noon (UTC) of the day before: the pods' usage follows the trace's
    time of day, and with it how much batch room the nodes have, so every run sees the same
    hour; and a day back, not a fixed date, because the metrics-collector refuses measurements
    more than 8 days older than its own clock."""
    return (int(time.time() * 1000) // DAY_MS - 1) * DAY_MS + DAY_MS // 2


def explain(*args: str):
    r = runner.invoke(app, ["explain", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


async def test_explain_node_and_pod_from_the_running_services(bus, bus_namespace, nats_url, tmp_path):
    pytest.importorskip("node_agent")
    sim = SimCluster(SimSpec(nodes=3, online_pods_per_node=6, seed=11, speed=SPEED, start_ms=noon_yesterday_ms()), bus=bus, genesis=True)
    await sim.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM)
    base = dict(os.environ, NATS_URL=nats_url, KOORD_RESOURCE_PREFIX="koordinator.sh/")
    base.pop("DATABASE_URL", None)
    ports = {name: free_port() for name in ("agent", "slo", "collector", "extender")}
    envs = {
        "node_agent": dict(base, KOORD_AGENT_MODE="sim", KOORD_AGENT_BUS_NAMESPACE=bus_namespace,
                           KOORD_AGENT_HTTP_HOST="127.0.0.1", KOORD_AGENT_HTTP_PORT=str(ports["agent"]),
                           KOORD_AGENT_NODEMETRIC_INTERVAL_S=str(REPORT_S), KOORD_AGENT_AGGREGATE_WINDOW_S="60",
                           KOORD_AGENT_QOS_ENABLED="false"),
        "slo_controller": dict(base, KOORD_SLO_BUS_NAMESPACE=bus_namespace, KOORD_SLO_HTTP_HOST="127.0.0.1",
                               KOORD_SLO_HTTP_PORT=str(ports["slo"]), KOORD_SLO_RESYNC_S="0.5",
                               KOORD_SLO_METRICS_CATCHUP_S="0.5", KOORD_SLO_WEBHOOK_ENABLED="false"),
        "metrics_collector": dict(base, DATABASE_URL=f"sqlite:///{tmp_path / 'collector.db'}",
                                  KOORD_COLLECTOR_BUS_NAMESPACE=bus_namespace, KOORD_COLLECTOR_HTTP_HOST="127.0.0.1",
                                  KOORD_COLLECTOR_HTTP_PORT=str(ports["collector"]),
                                  KOORD_COLLECTOR_DATA_DIR=str(tmp_path / "collector"),
                                  KOORD_COLLECTOR_FLUSH_INTERVAL_S="0.2"),
        "scheduler_extender": dict(base, KOORD_EXTENDER_BUS_NAMESPACE=bus_namespace,
                                   KOORD_EXTENDER_HTTP_HOST="127.0.0.1", KOORD_EXTENDER_HTTP_PORT=str(ports["extender"]),
                                   KOORD_EXTENDER_CLUSTER_BACKEND="sim"),
    }  # fmt: skip
    procs = {m: start(m, env, tmp_path / f"{m}.log") for m, env in envs.items()}
    collector = f"http://127.0.0.1:{ports['collector']}"
    extender = f"http://127.0.0.1:{ports['extender']}"

    def alive():
        for m, p in procs.items():
            assert p.poll() is None, (tmp_path / f"{m}.log").read_text()[-3000:]

    try:
        await asyncio.to_thread(wait_http_ready, collector + "/readyz", 60)
        await asyncio.to_thread(wait_http_ready, extender + "/readyz", 60)

        async def batch_values():
            alive()
            values = {n.name: n.allocatable.get(BATCH_CPU) for n in await sim.list_nodes()}
            return values if all(v is not None for v in values.values()) else None

        before = await poll(batch_values, 40)
        node = max(before, key=before.get)
        snap = sim.usage_snapshot(node)
        pods_cpu = max(sum(u.cpu_milli for u in snap.pods.values()), 1)
        await sim.set_usage_override(node=node, cpu_factor=1 + 0.5 * before[node] / pods_cpu, from_ms=sim.now_ms())

        async def explained_rise():
            alive()
            async with httpx.AsyncClient(timeout=5) as c:
                r = await c.get(f"{collector}/api/v1/nodes/{node}/explain", params={"from": 0})
            if r.status_code != 200:
                return None
            items = [i for i in r.json()["items"] if i["explained"]]
            first = items[0]["resources"]["cpu"]["terms"]["podHPUsed"] if items else None
            grown = [i for i in items[1:] if i["resources"]["cpu"]["terms"]["podHPUsed"] > first * 1.2]
            return grown[0] if grown else None

        rise = await poll(explained_rise, 2 * REPORT_S / SPEED + 30, every_s=0.2)

        # ---- koordctl explain node: the formula with its values and the HP term named as what moved
        r = explain("node", node, "--collector", collector, "--since", "24h", "-o", "json")
        items = [i for i in json.loads(r.stdout)["items"] if i["explained"]]
        hp = [i["resources"]["cpu"]["terms"]["podHPUsed"] for i in items]
        assert max(hp) > hp[0] * 1.2, hp
        changed = next(i for i in items if i["ts"] == rise["ts"])
        moved = changed["moved"]["cpu"]
        assert moved["most"] == "podHPUsed" and moved["terms"][0]["delta"] > 0 and moved["batch_delta"] < 0
        cpu = changed["resources"]["cpu"]
        t = cpu["terms"]
        assert cpu["batch"] == max(t["capacity"] - t["safetyMargin"] - t["systemUsageOrNodeReserved"] - t["podHPUsed"], 0)
        assert cpu["policy"] == "usage" and changed["hpPods"]
        text = explain("node", node, "--collector", collector, "--since", "24h").stdout
        assert "moved most: podHPUsed" in text and "batch " in text and "safetyMargin" in text

        # ---- a pod filtered for load: 80 % of a node's CPU is an estimate of 68 % > 65 % anywhere
        nodes = sorted(n.name for n in await sim.list_nodes())
        cap = min(n.capacity_resources().cpu_milli for n in await sim.list_nodes())
        want = cap * 80 // 100
        pod = {"metadata": {"name": "big-web", "namespace": "shop", "uid": "uid-big-web", "resourceVersion": "1"},
               "spec": {"priority": 9500, "containers": [{"name": "web", "resources": {
                   "requests": {"cpu": f"{want}m", "memory": "1Gi"}, "limits": {"cpu": f"{want}m", "memory": "1Gi"}}}]}}  # fmt: skip
        async with httpx.AsyncClient(timeout=10) as c:
            reply = (await c.post(extender + "/filter", content=orjson.dumps({"Pod": pod, "NodeNames": nodes}))).json()
        assert set(reply["FailedNodes"]) == set(nodes) and not reply.get("NodeNames")
        r = explain("pod", "shop/big-web", "--extender", extender, "--collector", collector,
                    "--descheduler", f"http://127.0.0.1:{free_port()}", "-o", "json")  # fmt: skip
        x = json.loads(r.stdout)["services"]["scheduler-extender"]
        assert x["estimate"]["cpu_milli"] == want * 85 // 100 and x["passed"] == 0
        assert x["rejected"] == {"node(s) cpu usage exceed threshold": len(nodes)}
        for d in x["nodes"]:
            load = next(p for p in d["plugins"] if p["plugin"] == "LoadAwareScheduling")
            nums = load["numbers"]["cpu"]
            assert (d["rejected_by"], load["reason"]) == ("LoadAwareScheduling", "node(s) cpu usage exceed threshold")
            assert nums["threshold"] == 65 and nums["estimate"] == want * 85 // 100 and nums["percent"] > 65
        text = explain("pod", "shop/big-web", "--extender", extender, "--collector", collector).stdout
        assert "rejected by LoadAwareScheduling: node(s) cpu usage exceed threshold" in text
        assert f"pod estimate {want * 85 // 100 / 1000:g} cores" in text and "over threshold 65 %" in text
    finally:
        codes = {m: stop(p) for m, p in procs.items()}
        await sim.close()
    assert all(c == 0 for c in codes.values()), codes
