"""The dashboard in real headless Chromium against a real collector process and recommender.

Stored data has known values (3 nodes; prod, mid, batch and free pods on each; batch/mid
allocatable reports; QoS and descheduling events), so the test checks what the page drew,
not merely that it drew something. The REST calls the page made must all be documented
paths: the collector's OpenAPI, the dashboard's own routes and the recommender's API.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, Event, NodeMetricSample, NodeResource, Owner, PodUsage
from koordcommon.testing.nats import drop_namespace
from koordcommon.testing.net import free_port, wait_http_ready

GIB = 1 << 30
NODES = ("node-a", "node-b", "node-c")
MINUTES = 40
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


def resources() -> list[NodeResource]:
    return [
        NodeResource(node=node, ts=NOW_MS - k * 300_000 - 1000, source="slo-controller", seq=k,
                     batch=BATCH_ALLOCATABLE, mid=MID_ALLOCATABLE, written=True, reason="")
        for node in NODES for k in range(9)
    ]  # fmt: skip


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
    ]  # fmt: skip


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

    tmp = tmp_path_factory.mktemp("dashboard")
    db_url = f"sqlite:///{tmp / 'collector.db'}"
    store = Store.open(db_url, tmp, migrate=True)
    store.write(build_rows([*samples(), *resources(), *events()]))
    store.close()

    rec_port, col_port = free_port(), free_port()
    recommender = f"http://127.0.0.1:{rec_port}"
    namespace = f"dash{os.getpid()}"
    env = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": db_url,
           "KOORD_COLLECTOR_HTTP_HOST": "127.0.0.1", "KOORD_COLLECTOR_HTTP_PORT": str(col_port),
           "KOORD_COLLECTOR_BUS_NAMESPACE": namespace, "KOORD_COLLECTOR_DATA_DIR": str(tmp / "data"),
           "KOORD_COLLECTOR_RECOMMENDER_URL": recommender, "KOORD_COLLECTOR_LOG_LEVEL": "WARNING"}  # fmt: skip
    with open(tmp / "collector.log", "wb") as log, ThreadServer(recommender_app(), rec_port):
        proc = subprocess.Popen([sys.executable, "-m", "metrics_collector"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{col_port}"
            wait_http_ready(url + "/readyz", timeout=30)
            wait_http_ready(recommender + "/api/v1/recommendations", timeout=10)
            yield {"collector": url, "recommender": recommender, "tmp": tmp}
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
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


def test_recommendations_with_estimated_savings(loaded):
    page, _ = loaded
    page.wait_for_function("document.querySelectorAll('#recommendation-table tbody tr').length > 0", timeout=10_000)
    text = page.inner_text("#recommendation-table")
    assert "shop/Deployment/web" in text
    savings = page.evaluate("window.koord.savings")
    # web requests 4 cores per pod and uses 2.5: a positive CPU saving over 3 replicas
    assert savings["cpu_milli"] > 0
    assert page.inner_text("#savings").startswith("estimated savings")


def test_qos_and_descheduling_events(loaded):
    page, _ = loaded
    rows = page.locator("#event-table tbody tr")
    assert rows.count() == 3
    kinds = [rows.nth(i).locator("td").nth(1).inner_text() for i in range(3)]
    assert kinds == ["deschedule", "evict", "qos"]  # newest first
    assert "node-c is hot" in rows.nth(0).inner_text()
    page.select_option("#event-kind", "qos")
    page.wait_for_function("document.querySelectorAll('#event-table tbody tr').length === 1", timeout=10_000)
    page.select_option("#event-kind", "")


def test_page_refreshes_by_itself(loaded):
    page, _ = loaded
    before = page.evaluate("window.koord.refreshes")
    page.wait_for_function(f"window.koord.refreshes > {before}", timeout=10_000)


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
            "/api/v1/events", "/dashboard/recommender/api/v1/recommendations"} <= used  # fmt: skip


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
