"""The dashboard in real headless Chromium against a real collector process and recommender.

Stored data has known values (3 nodes; prod, mid, batch and free pods on each; batch/mid
allocatable reports; QoS and descheduling events), so the test checks what the page drew,
not merely that it drew something. The REST calls the page made must all be documented
paths: the collector's OpenAPI, the dashboard's own routes and the recommender's API.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, Event, NodeMetricSample, NodeResource, Owner, PodUsage
from koordcommon.testing.nats import drop_namespace
from koordcommon.testing.net import free_port, wait_http_ready
from koordcommon.testing.processes import stop

GIB = 1 << 30
NODES = ("node-a", "node-b", "node-c")
MINUTES = 40
API_TOKEN = "dashboard-test-token"
NOW_MS = int(time.time() * 1000) // 60_000 * 60_000

# (name, class, priority, qos, requests, batch requests, usage) of the pods on every node
PODS = (
    ("web", PriorityClass.PROD, 9500, QoSClass.LS, Resources(4000, 8 * GIB), Resources(), Resources(2500, 6 * GIB)),
    ("cache", PriorityClass.MID, 7500, QoSClass.LS, Resources(1000, 2 * GIB), Resources(), Resources(500, GIB)),
    ("spark", PriorityClass.BATCH, 5500, QoSClass.BE, Resources(), Resources(2000, 4 * GIB), Resources(1500, 3 * GIB)),
    ("crawler", PriorityClass.FREE, 3500, QoSClass.BE, Resources(), Resources(500, GIB), Resources(300, GIB // 2)),
)
CAPACITY = Resources(16000, 64 * GIB)
BATCH_ALLOCATABLE = Resources(6000, 20 * GIB)
MID_ALLOCATABLE = Resources(1500, 4 * GIB)

# Expected last value of each cluster series, in cores (3 nodes).
EXPECTED_CPU = {
    "capacity": 48.0,
    "prod used": 7.5,
    "prod allocated": 12.0,
    "mid allocatable": 4.5,
    "mid allocated": 3.0,
    "batch allocatable": 18.0,
    "batch allocated": 7.5,  # batch and free pods both request batch resources
    "batch used": 5.4,
    "free allocated": 1.5,  # there are free pods: their own band
    "free used": 0.9,
}


def samples() -> list[NodeMetricSample]:
    out = []
    for m in range(MINUTES):
        ts = NOW_MS - (MINUTES - 1 - m) * 60_000
        for node in NODES:
            pods = [
                PodUsage(uid=f"{node}-{name}", namespace="shop" if cls is PriorityClass.PROD else "jobs",
                         name=f"{name}-{node}", owner=Owner(kind="ReplicaSet", name=f"{name}-5d8f7c"),
                         qos=qos, priority_class=cls, priority=prio, requests=req, limits=req,
                         batch_requests=breq, usage=use,
                         containers=[ContainerUsage(name="main", requests=req, usage=use)])
                for name, cls, prio, qos, req, breq, use in PODS
            ]  # fmt: skip
            used = sum((p.usage for p in pods), Resources())
            out.append(NodeMetricSample(node=node, ts=ts, source=f"node-agent/{node}", seq=ts, window_s=60,
                                        capacity=CAPACITY, allocatable=CAPACITY, node_usage=used + Resources(400, GIB),
                                        system_usage=Resources(400, GIB), pods=pods))  # fmt: skip
    return out


# The slo-controller's inputs behind each report (as its batch rule publishes them): capacity =
# margin + system + HP + batch. The older a report, the less HP and the more batch it had.
MARGIN = (CAPACITY.cpu_milli * 40 // 100, CAPACITY.memory_bytes * 35 // 100)  # reclaim thresholds 60 / 65


def batch_inputs(k: int) -> tuple[dict, Resources]:
    hp = (3000 - 100 * k, 7 * GIB - k * GIB // 4)  # prod + mid usage, less in older reports
    batch = Resources(BATCH_ALLOCATABLE.cpu_milli + 100 * k, BATCH_ALLOCATABLE.memory_bytes + k * GIB // 4)
    system = (CAPACITY.cpu_milli - MARGIN[0] - hp[0] - batch.cpu_milli,
              CAPACITY.memory_bytes - MARGIN[1] - hp[1] - batch.memory_bytes)
    inputs = {"capacity": [CAPACITY.cpu_milli, CAPACITY.memory_bytes], "safetyMargin": list(MARGIN),
              "systemUsed": list(system), "nodeReserved": [0, 0], "podHPUsed": list(hp), "podHPRequest": [5000, 10 * GIB],
              "podHPMaxUsedRequest": [5000, 10 * GIB], "cpuCalculatePolicy": "usage", "memoryCalculatePolicy": "usage",
              "cpuReclaimThresholdPercent": 60, "memoryReclaimThresholdPercent": 65, "hpPods": []}  # fmt: skip
    return inputs, batch


def report_ts(k: int) -> int:
    return NOW_MS - k * 300_000 - 1000


def resources() -> list[NodeResource]:
    out = []
    for node in NODES:
        for k in range(9):
            inputs, batch = batch_inputs(k)
            out.append(NodeResource(node=node, ts=report_ts(k), source="slo-controller", seq=k, batch=batch,
                                    mid=MID_ALLOCATABLE, written=True, reason="expired", inputs={"batch": inputs}))
    return out


def events() -> list[Event]:
    return [
        Event(kind="qos", node="node-a", action="cpu_suppress", reason="BE cpu limited to 6 cores", seq=1,
              source="node-agent/node-a", ts=NOW_MS - 120_000,
              target={"path": "kubepods.slice/kubepods-besteffort.slice", "file": "cpu.max"}),
        Event(kind="evict", node="node-b", action="evict", reason="memory usage 82% > 70%", seq=2,
              source="node-agent/node-b", ts=NOW_MS - 90_000,
              target={"namespace": "jobs", "name": "spark-node-b", "uid": "node-b-spark"}),
        Event(kind="deschedule", node="node-c", action="migrate", reason="node-c is hot (cpu 91%)", seq=3,
              source="descheduler", ts=NOW_MS - 60_000, dry_run=True,
              target={"namespace": "jobs", "name": "crawler-node-c", "uid": "node-c-crawler"}),
        # one pod's cgroup and its container's: the same file, the path differs only at its end
        Event(kind="qos", node="node-a", action="cpu_burst", seq=4, source="node-agent/node-a", ts=NOW_MS - 50_000,
              reason="cpu.cfs_burst_us 0 -> 400000: the pod's containers may burst to 4 cores over their limit "
                     "while the node is not overloaded (share pool usage under 50 %)",
              target={"path": f"{POD_DIR}", "file": "cpu.cfs_burst_us", "level": "pod"}),
        Event(kind="qos", node="node-a", action="cpu_burst", seq=5, source="node-agent/node-a", ts=NOW_MS - 49_000,
              reason="cpu.cfs_burst_us 0 -> 400000: the container may burst to 4 cores over its limit",
              target={"path": f"{POD_DIR}/cri-containerd-4f1c9a.scope", "file": "cpu.cfs_burst_us",
                      "level": "container"}),
    ]  # fmt: skip


POD_DIR = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0d4c1e7a_93b2_4d5e_8f61_2c7d9e0a1b3c.slice"
EVENTS = 5


# ----------------------------------------------------------------------------- the stack


class ThreadServer:
    """uvicorn in a thread, for the recommender API fed in the test."""

    def __init__(self, app, port: int):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def recommender_app():
    from fastapi import FastAPI
    from recommender.api import router
    from recommender.bus import apply_sample
    from recommender.cluster import WorkloadResolver
    from recommender.core.engine import RecommenderState

    async def fed() -> RecommenderState:
        state = RecommenderState()
        resolve = WorkloadResolver(None)
        for msg in samples():
            await apply_sample(state, msg, resolve)
        return state

    app = FastAPI()
    app.include_router(router)
    app.state.recommender_state = asyncio.run(fed())
    return app


@pytest.fixture(scope="module")
def stack(tmp_path_factory, nats_url):
    from metrics_collector.core.rows import build_rows
    from metrics_collector.store import Store

    # the history ends now, when it is written, not when the module was imported: a long suite
    # would otherwise have moved the dashboard's window past its oldest rows
    global NOW_MS
    NOW_MS = int(time.time() * 1000) // 60_000 * 60_000

    tmp = tmp_path_factory.mktemp("dashboard")
    db_url = f"sqlite:///{tmp / 'collector.db'}"
    store = Store.open(db_url, tmp, migrate=True)
    store.write(build_rows([*samples(), *resources(), *events()]))
    store.close()

    token_file = tmp / "api-token"
    token_file.write_text(API_TOKEN)
    rec_port, col_port = free_port(), free_port()
    recommender = f"http://127.0.0.1:{rec_port}"
    namespace = f"dash{os.getpid()}"
    env = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": db_url,
           "KOORD_COLLECTOR_HTTP_HOST": "127.0.0.1", "KOORD_COLLECTOR_HTTP_PORT": str(col_port),
           "KOORD_COLLECTOR_BUS_NAMESPACE": namespace, "KOORD_COLLECTOR_DATA_DIR": str(tmp / "data"),
           "KOORD_COLLECTOR_RECOMMENDER_URL": recommender, "KOORD_COLLECTOR_LOG_LEVEL": "WARNING",
           "KOORD_COLLECTOR_API_TOKEN_FILE": str(token_file)}  # fmt: skip
    with open(tmp / "collector.log", "wb") as log, ThreadServer(recommender_app(), rec_port):
        proc = subprocess.Popen([sys.executable, "-m", "metrics_collector"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{col_port}"
            wait_http_ready(url + "/readyz", timeout=30)
            wait_http_ready(recommender + "/api/v1/recommendations", timeout=10)
            yield {"collector": url, "recommender": recommender, "tmp": tmp, "token": API_TOKEN}
        finally:
            stop(proc, timeout_s=15)
            asyncio.run(drop_namespace(nats_url, namespace))  # the collector's streams


@pytest.fixture(scope="module")
def loaded(stack, browser):
    """The page after its first refresh, with every request it made recorded."""
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(stack["collector"] + "/dashboard/?refresh=2")
    page.wait_for_function("window.koord && window.koord.refreshes >= 1", timeout=20_000)
    yield page, requests
    page.close()


# ----------------------------------------------------------------------------- tests


def test_cluster_chart_draws_every_band_with_the_stored_values(loaded, stack):
    page, _ = loaded
    assert page.evaluate("window.koord.errors") == []
    series = page.evaluate("window.koord.series.cluster")
    labels, data = series["labels"], series["data"]
    assert labels == list(EXPECTED_CPU)
    xs = data[0]
    assert len(xs) >= MINUTES - 1 and xs == sorted(xs)
    for label, values in zip(labels, data[1:]):
        present = [v for v in values if v is not None]
        assert present, f"series {label!r} is empty"
        assert present[-1] == pytest.approx(EXPECTED_CPU[label], abs=0.05), label

    shot = stack["tmp"] / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("KOORD_SCREENSHOT"):
        Path(os.environ["KOORD_SCREENSHOT"]).write_bytes(shot.read_bytes())
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    # the canvas holds pixels in the colours of solid series (capacity, batch allocatable,
    # mid allocatable, batch used): lines were drawn, not just axes
    painted = page.evaluate(
        """() => {
          const c = document.querySelector('#cluster-chart canvas');
          const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          const colours = {'#2c6fbb': 0, '#8e44ad': 0, '#16a085': 0, '#1d2433': 0};
          for (let i = 0; i < px.length; i += 4) {
            for (const hex of Object.keys(colours)) {
              const r = parseInt(hex.slice(1, 3), 16), g = parseInt(hex.slice(3, 5), 16), b = parseInt(hex.slice(5), 16);
              if (Math.abs(px[i] - r) < 8 && Math.abs(px[i + 1] - g) < 8 && Math.abs(px[i + 2] - b) < 8 && px[i + 3] > 200) colours[hex]++;
            }
          }
          return colours;
        }"""
    )
    assert all(n > 50 for n in painted.values()), painted


def test_memory_view_switches_units(loaded):
    page, _ = loaded
    page.select_option("#resource", "memory")
    page.wait_for_function("window.koord.series.cluster.data[1].some(v => v !== null && v > 100)", timeout=10_000)
    data = page.evaluate("window.koord.series.cluster.data")
    assert [v for v in data[1] if v is not None][-1] == pytest.approx(192.0)  # 3 x 64 GiB
    assert [v for v in data[6] if v is not None][-1] == pytest.approx(60.0)  # 3 x 20 GiB batch allocatable
    page.select_option("#resource", "cpu")
    page.wait_for_function("window.koord.series.cluster.data[1].some(v => v !== null && v < 100)", timeout=10_000)


def test_node_list_and_drill_down(loaded):
    page, _ = loaded
    rows = page.locator("#node-table tbody tr")
    assert rows.count() == len(NODES)
    first = rows.nth(0).locator("td")
    assert first.nth(0).inner_text() == "node-a"
    assert first.nth(2).inner_text() == "16.0 c / 64.0 Gi"
    assert first.nth(5).inner_text() == "6.0 c / 20.0 Gi"
    rows.nth(1).click()
    page.wait_for_function("window.koord.series.node && window.koord.series.node.data[0].length > 0", timeout=10_000)
    assert page.inner_text("#node-name") == "node-b"
    node = page.evaluate("window.koord.series.node")
    by_label = dict(zip(node["labels"], node["data"][1:]))
    assert [v for v in by_label["capacity"] if v is not None][-1] == pytest.approx(16.0)
    assert [v for v in by_label["prod used"] if v is not None][-1] == pytest.approx(2.5)
    assert page.locator("#node-pods tbody tr").count() == len(PODS)
    assert page.locator("#node-resources tbody tr").count() > 0


def test_recommendations_marked_provisional_and_left_out_of_savings(loaded):
    page, _ = loaded
    page.wait_for_function("document.querySelectorAll('#recommendation-table tbody tr').length > 0", timeout=10_000)
    rows = page.locator("#recommendation-table tbody tr")
    text = page.inner_text("#recommendation-table")
    assert "shop/Deployment/web" in text
    # 40 minutes of history: every recommendation is provisional, marked, and none is counted
    assert rows.count() == page.locator("#recommendation-table tbody tr.provisional").count() > 0
    assert all(rows.nth(i).locator("td").nth(6).inner_text() == "provisional" for i in range(rows.count()))
    assert all(rows.nth(i).locator("td").nth(7).inner_text() == "vpa" for i in range(rows.count()))
    savings = page.evaluate("window.koord.savings")
    assert (savings["cpu_milli"], savings["memory_bytes"]) == (0, 0) and savings["provisional"] == rows.count()
    assert page.inner_text("#savings") == f"estimated savings 0.0 cores, 0.0 GiB ({rows.count()} provisional not counted)"


def test_qos_and_descheduling_events(loaded):
    page, _ = loaded
    rows = page.locator("#event-table tbody tr")
    assert rows.count() == EVENTS
    cells = [[rows.nth(i).locator("td").nth(j).inner_text() for j in (1, 4, 5)] for i in range(EVENTS)]
    # newest first; a pod's cgroup and its container's are told apart, not cut to look alike
    assert cells == [
        ["qos", "container", ("…/kubepods-burstable-pod0d4c1e7a_93b2_4d5e_8f61_2c7d9e0a1b3c.slice/"
                             "cri-containerd-4f1c9a.scope cpu.cfs_burst_us")],
        ["qos", "pod", ("…/kubepods-burstable.slice/kubepods-burstable-pod0d4c1e7a_93b2_4d5e_8f61_2c7d9e0a1b3c.slice "
                       "cpu.cfs_burst_us")],
        ["deschedule", "pod", "jobs/crawler-node-c"],
        ["evict", "pod", "jobs/spark-node-b"],
        ["qos", "node", "kubepods.slice/kubepods-besteffort.slice cpu.max"],
    ]  # fmt: skip
    assert "node-c is hot" in rows.nth(2).inner_text()
    page.select_option("#event-kind", "qos")
    page.wait_for_function("document.querySelectorAll('#event-table tbody tr').length === 3", timeout=10_000)
    page.select_option("#event-kind", "")
    page.wait_for_function(f"document.querySelectorAll('#event-table tbody tr').length === {EVENTS}", timeout=10_000)


def test_events_table_fits_1280_px_with_the_reason_visible(stack, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(stack["collector"] + "/dashboard/?refresh=60")
        page.wait_for_function(f"document.querySelectorAll('#event-table tbody tr').length === {EVENTS}",
                               timeout=20_000)  # fmt: skip
        box = page.evaluate("""() => {
          const t = document.querySelector('#event-table').getBoundingClientRect();
          const reasons = [...document.querySelectorAll('#event-table tbody tr td:nth-child(7)')].map(td => {
            const r = td.getBoundingClientRect();
            return {left: r.left, right: r.right, width: r.width, text: td.innerText, scroll: td.scrollWidth,
                    client: td.clientWidth};
          });
          return {right: t.right, width: document.documentElement.clientWidth,
                  scroll: document.documentElement.scrollWidth, reasons};
        }""")  # fmt: skip
        assert box["scroll"] <= box["width"] and box["right"] <= box["width"], box
        longest = max(box["reasons"], key=lambda r: len(r["text"]))
        assert longest["text"].startswith("cpu.cfs_burst_us 0 -> 400000: the pod's containers may burst")
        assert longest["text"].endswith("(share pool usage under 50 %)")  # wrapped, whole
        for r in box["reasons"]:
            assert r["right"] <= box["width"] and r["width"] >= 200 and r["scroll"] <= r["client"] + 1, r
    finally:
        page.close()


def test_node_panel_stacks_the_batch_formula_from_the_stored_inputs(loaded):
    page, _ = loaded
    page.locator("#node-table tbody tr").nth(2).click()
    page.wait_for_function("window.koord.series.nodeStack && window.koord.series.nodeStack.data[0].length === 9 && "
                           "document.querySelector('#node-name').textContent === 'node-c'", timeout=10_000)  # fmt: skip
    stack = page.evaluate("window.koord.series.nodeStack")
    assert stack["labels"] == ["safety margin", "system", "HP", "batch", "capacity"]
    xs, bands = stack["data"][0], dict(zip(stack["labels"], stack["data"][1:]))
    assert xs == [report_ts(k) / 1000 for k in reversed(range(9))]  # oldest first
    for i, k in enumerate(reversed(range(9))):
        inputs, batch = batch_inputs(k)
        expected = {"safety margin": inputs["safetyMargin"][0], "system": inputs["systemUsed"][0],
                    "HP": inputs["podHPUsed"][0], "batch": batch.cpu_milli, "capacity": inputs["capacity"][0]}  # fmt: skip
        for label, milli in expected.items():
            assert bands[label][i] == pytest.approx(milli / 1000), (label, k)
        assert sum(bands[b][i] for b in ("safety margin", "system", "HP", "batch")) == pytest.approx(16.0)
    # every band has data and was drawn: the chart holds the running sums, the legend the heights
    drawn = page.evaluate("window.koord.charts.nodeStack.data")
    assert drawn[4] == pytest.approx([16.0] * 9) and drawn[2] == pytest.approx([b + s for b, s in zip(
        bands["safety margin"], bands["system"])])  # fmt: skip
    painted = page.evaluate(
        """() => {
          const c = document.querySelector('#node-stack canvas');
          const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0;
          for (let i = 0; i < px.length; i += 4) if (px[i] < 90 && px[i + 1] > 90 && px[i + 2] > 160) n++;
          return n;
        }"""
    )
    assert painted > 500  # the batch band (#2c6fbb at 60 % over white) is filled, not a line


def test_log_scale_and_unclipped_axis(loaded):
    page, _ = loaded
    page.check("#log-scale")
    page.wait_for_function("window.koord.charts.cluster.scales.y.distr === 3", timeout=10_000)
    page.uncheck("#log-scale")
    page.wait_for_function("window.koord.charts.cluster.scales.y.distr === 1", timeout=10_000)
    top = page.evaluate("""() => {
      const u = window.koord.charts.cluster;
      const values = u.data.slice(1).flat().filter(v => v !== null);
      return {max: Math.max(...values), scale: u.scales.y.max, size: u.axes[1]._size};
    }""")  # fmt: skip
    assert top["scale"] >= top["max"] and top["size"] >= 50


def test_whatif_panel_shows_the_published_report(stack, browser, tmp_path):
    """A real (small) replay's report, written by the replay's own code, published by koordctl's
    client, shown by the page: its table, recommendation, assumptions and both plots."""
    from koordctl.whatif_publish import PublishError, publish
    from koordwhatif import scenario
    from koordwhatif.config import WhatIfConfig, parse_sweep, sweep
    from koordwhatif.report import write
    from koordwhatif.runner import run_sweep

    spec, about = scenario.spec_for("history", history=whatif_history(tmp_path / "history"))
    configs = sweep(WhatIfConfig(), parse_sweep(["cpuReclaimThresholdPercent=50,70"]))
    out = tmp_path / "whatif"
    with ThreadPoolExecutor(1) as pool:  # the replay runs its own event loop; Playwright's is running here
        runs = pool.submit(run_sweep, spec, configs, 2 * 3600, workers=1).result()
        paths = pool.submit(write, runs, about, out).result()
    assert {p.name for p in paths.values()} == {"report.json", "report.md", "reclaimed-vs-risk.png", "hourly-bands.png"}
    doc = json.loads((out / "report.json").read_text())
    with pytest.raises(PublishError, match="401"):  # writes need the collector's token
        publish(stack["collector"], out, None)
    publish(stack["collector"], out, stack["token"])
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    try:
        page.goto(stack["collector"] + "/dashboard/?refresh=60")
        page.wait_for_function("window.koord.whatif && document.querySelectorAll('#whatif-plots img').length === 2",
                               timeout=20_000)  # fmt: skip
        assert page.is_visible("#whatif-body") and not page.is_visible("#whatif-empty")
        assert page.inner_text("#whatif-title") == about["title"]
        assert page.inner_text("#whatif-recommendation") == f"Recommended: {doc['recommended']}: {doc['why']}"
        md_table = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("|")]
        head = page.locator("#whatif-table thead th")
        assert [head.nth(i).inner_text() for i in range(head.count())] == [
            c.strip() for c in md_table[0].strip("|").split("|")]
        rows = page.locator("#whatif-table tbody tr")
        assert [rows.nth(i).locator("td").nth(0).inner_text() for i in range(rows.count())] == [
            r["config"]["name"] for r in doc["runs"]]
        assert page.locator("#whatif-table tbody tr.recommended td").nth(0).inner_text() == doc["recommended"]
        fights = page.locator("#whatif-fights li")
        assert [fights.nth(i).inner_text() for i in range(fights.count())] == [
            f"{r['config']['name']}: {f['level']} {' vs '.join(f['settings'])}: {f['problem']} Fix: {f['fix']}"
            for r in doc["runs"] for f in r["findings"]]
        assert any("cpuReclaimThresholdPercent=70 vs cpuSuppressThresholdPercent=65" in fights.nth(i).inner_text()
                   for i in range(fights.count()))
        items = page.locator("#whatif-assumptions li")
        assert [items.nth(i).inner_text() for i in range(items.count())] == doc["assumptions"] != []
        page.wait_for_function("[...document.querySelectorAll('#whatif-plots img')].every(i => i.complete && "
                               "i.naturalWidth > 500)", timeout=10_000)  # fmt: skip
    finally:
        page.close()


def whatif_history(directory: Path) -> Path:
    """Two nodes' recorded history, 2 hours of constant usage (the cluster history format)."""
    from koordcommon.clusterhistory import COLUMNS, NODE_USAGE, NODES, POD_USAGE, csv_text

    directory.mkdir(parents=True)

    def write(table: str, rows: list[dict]) -> None:
        cols = COLUMNS[table]
        (directory / f"{table}.csv").write_text(csv_text([cols, *([r.get(c, "") for c in cols] for r in rows)]))

    t0 = 1_700_000_040_000
    node = {"capacity_cpu_milli": 16_000, "capacity_memory_bytes": 64 * GIB, "allocatable_cpu_milli": 16_000,
            "allocatable_memory_bytes": 64 * GIB}  # fmt: skip
    write(NODES, [{"node": "node-1", **node}, {"node": "node-2", **node}])
    usage, pods = [], []
    for k in range(125):
        t = t0 + k * 60_000
        usage += [{"ts": t, "node": "node-1", "cpu_milli": 6000, "memory_bytes": 20 * GIB},
                  {"ts": t, "node": "node-2", "cpu_milli": 2000, "memory_bytes": 8 * GIB}]  # fmt: skip
        for n, name, cpu, mem in (("node-1", "web-1", 4000, 16 * GIB), ("node-2", "api-2", 1000, 4 * GIB)):
            pods.append({"ts": t, "node": n, "namespace": "shop", "name": name, "uid": f"uid-{name}",
                         "priority_class": "koord-prod", "qos": "LS", "requests_cpu_milli": 2 * cpu,
                         "requests_memory_bytes": mem + GIB, "cpu_milli": cpu, "memory_bytes": mem})  # fmt: skip
    write(NODE_USAGE, usage)
    write(POD_USAGE, pods)
    return directory


def _documented(stack) -> list[re.Pattern]:
    from recommender.api import router as rec_router

    spec = httpx.get(stack["collector"] + "/openapi.json", timeout=5).json()
    paths = list(spec["paths"])
    paths += ["/dashboard/recommender" + r.path for r in rec_router.routes]
    return [re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", p) + "$") for p in paths]


def test_rest_calls_are_documented_api_paths(loaded, stack):
    _, requests = loaded
    origin = urlsplit(stack["collector"])
    api_calls = []
    for url in requests:
        u = urlsplit(url)
        assert (u.scheme, u.netloc) == (origin.scheme, origin.netloc), f"request left the collector: {url}"
        if u.path.startswith("/dashboard/static/") or u.path == "/dashboard/":
            continue  # the page and its shipped assets
        api_calls.append(u.path)
    documented = _documented(stack)
    undocumented = sorted({p for p in api_calls if not any(d.match(p) for d in documented)})
    assert undocumented == []
    used = {re.sub(r"/nodes/[^/]+/", "/nodes/{node}/", p) for p in api_calls}
    assert {"/dashboard/config.json", "/api/v1/cluster/summary", "/api/v1/cluster/resources", "/api/v1/nodes",
            "/api/v1/events", "/dashboard/recommender/api/v1/recommendations", "/api/v1/whatif/last",
            "/api/v1/nodes/{node}/explain"} <= used  # fmt: skip


def test_offline_assets_are_shipped(stack):
    index = httpx.get(stack["collector"] + "/dashboard/", timeout=5).text
    srcs = re.findall(r'(?:src|href)="([^"]+)"', index)
    assert srcs and all(s.startswith("/dashboard/static/") for s in srcs), srcs
    for s in srcs:
        assert httpx.get(stack["collector"] + s, timeout=5).status_code == 200, s
    assert httpx.get(stack["collector"] + "/dashboard/static/vendor/uPlot.LICENSE", timeout=5).status_code == 200


def test_config_and_recommender_forwarding(stack):
    cfg = httpx.get(stack["collector"] + "/dashboard/config.json", timeout=5).json()
    assert cfg["recommender_url"] == stack["recommender"]
    assert cfg["recommendations_path"] == "/dashboard/recommender/api/v1/recommendations"
    fwd = httpx.get(stack["collector"] + cfg["recommendations_path"] + "?namespace=shop", timeout=5).json()
    direct = httpx.get(stack["recommender"] + "/api/v1/recommendations?namespace=shop", timeout=5).json()
    assert fwd == direct and fwd["total"] == 1
    bad = httpx.get(stack["collector"] + cfg["recommendations_path"] + "?limit=0", timeout=5)
    assert bad.status_code == 422


def test_unreachable_recommender_is_a_clear_502():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from metrics_collector.dashboard import mount_dashboard

    class S:
        recommender_url = f"http://127.0.0.1:{_closed_port()}"

    app = FastAPI()
    mount_dashboard(app, S())
    r = TestClient(app).get("/dashboard/recommender/api/v1/recommendations")
    assert r.status_code == 502 and S.recommender_url in r.json()["detail"]

    app = FastAPI()
    mount_dashboard(app, object())
    r = TestClient(app).get("/dashboard/recommender/api/v1/recommendations")
    assert r.status_code == 404 and "KOORD_COLLECTOR_RECOMMENDER_URL" in r.json()["detail"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compose_points_the_dashboard_at_the_recommender():
    import yaml

    compose = yaml.safe_load((Path(__file__).resolve().parents[1] / "docker-compose.yml").read_text())
    services = compose["services"]
    url = urlsplit(services["metrics-collector"]["environment"]["KOORD_COLLECTOR_RECOMMENDER_URL"])
    assert url.hostname == "recommender"
    assert str(url.port) == services["recommender"]["environment"]["KOORD_RECOMMENDER_HTTP_PORT"]
