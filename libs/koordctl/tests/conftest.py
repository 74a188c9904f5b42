"""A real collector (HTTP API over a store with known rows) and a real recommender API,
served by uvicorn in threads, and a demo state file naming them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, Event, NodeMetricSample, NodeResource, Owner, PodUsage
from koordcommon.testing.net import free_port, wait_http_ready

GIB = 1 << 30
NODES = ("node-1", "node-2")
NOW_MS = int(time.time() * 1000) // 60_000 * 60_000
PODS = (
    ("web", "shop", PriorityClass.PROD, 9500, QoSClass.LS, Resources(2000, 4 * GIB), Resources(), Resources(1200, 3 * GIB)),
    ("etl", "jobs", PriorityClass.BATCH, 5500, QoSClass.BE, Resources(), Resources(1000, 2 * GIB), Resources(800, GIB)),
)  # fmt: skip
BATCH = Resources(5000, 12 * GIB)


def samples(minutes: int = 10) -> list[NodeMetricSample]:
    out = []
    for m in range(minutes):
        ts = NOW_MS - (minutes - 1 - m) * 60_000
        for node in NODES:
            pods = [
                PodUsage(uid=f"{node}-{name}", namespace=ns, name=f"{name}-{node}",
                         owner=Owner(kind="ReplicaSet", name=f"{name}-7f9c"), qos=qos, priority_class=cls,
                         priority=prio, requests=req, limits=req, batch_requests=breq, usage=use,
                         containers=[ContainerUsage(name="main", requests=req, usage=use)])
                for name, ns, cls, prio, qos, req, breq, use in PODS
            ]  # fmt: skip
            out.append(NodeMetricSample(node=node, ts=ts, seq=ts, source=f"node-agent/{node}", window_s=60,
                                        capacity=Resources(8000, 32 * GIB), allocatable=Resources(8000, 32 * GIB),
                                        node_usage=Resources(2500, 5 * GIB), pods=pods))  # fmt: skip
    return out


def stored_events() -> list[Event]:
    return [
        Event(kind="qos", node="node-1", action="cpu_suppress", reason="BE limited to 4 cores", seq=1,
              ts=NOW_MS - 30_000, source="node-agent/node-1", target={"path": "kubepods.slice", "file": "cpu.max"}),
        Event(kind="deschedule", node="node-2", action="migrate", reason="node-2 is hot", seq=2, dry_run=True,
              ts=NOW_MS - 20_000, source="descheduler", target={"namespace": "jobs", "name": "etl-node-2"}),
    ]  # fmt: skip


class ThreadServer:
    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@contextlib.contextmanager
def serving_collector(tmp, guarded: bool = False, **settings):
    """A collector over a store holding the samples, NodeResources and events above, served over
    HTTP; `guarded`: behind the chassis' guard as the service runs (tokens, body limits)."""
    from metrics_collector.core.rows import build_rows
    from metrics_collector.main import build
    from metrics_collector.settings import Settings
    from metrics_collector.store import Store

    url = f"sqlite:///{tmp / 'c.db'}"
    store = Store.open(url, tmp, migrate=True)
    resources = [NodeResource(node=n, ts=NOW_MS - 60_000, seq=1, source="slo-controller", batch=BATCH,
                              mid=Resources(0, 0), written=True) for n in NODES]  # fmt: skip
    store.write(build_rows([*samples(), *resources, *stored_events()]))
    store.close()
    svc, _ = build(Settings(database_url=url, data_dir=str(tmp), **settings))
    svc.mark_started()  # the app is served without running main: its wiring is this fixture
    with ThreadServer(svc.asgi() if guarded else svc.app) as server:
        wait_http_ready(server.url + "/healthz", timeout=15)
        yield server.url


@pytest.fixture(scope="session")
def collector_url(tmp_path_factory):
    with serving_collector(tmp_path_factory.mktemp("collector")) as url:
        yield url


@pytest.fixture(scope="session")
def recommender_url():
    from koordcommon.service import Service
    from recommender.api import router
    from recommender.bus import apply_sample
    from recommender.cluster import WorkloadResolver
    from recommender.core.engine import RecommenderState

    async def fed():
        state = RecommenderState()
        resolve = WorkloadResolver(None)
        for msg in samples(60):
            await apply_sample(state, msg, resolve)
        return state

    from recommender.main import Settings

    svc = Service("recommender", Settings())  # the chassis: /readyz, /healthz, /metrics
    svc.mark_started()
    svc.app.include_router(router)
    svc.app.state.recommender_state = asyncio.run(fed())
    with ThreadServer(svc.app) as server:
        wait_http_ready(server.url + "/api/v1/recommendations", timeout=15)
        yield server.url


@pytest.fixture
def demo_state(tmp_path, monkeypatch):
    """Write a demo state file and point koordctl at it; returns a function taking the services."""
    path = tmp_path / "demo.json"
    monkeypatch.setenv("KOORD_STATE_FILE", str(path))

    def write(services: dict[str, str], nats_url: str = "", namespace: str = "") -> None:
        path.write_text(json.dumps({"nats_url": nats_url, "namespace": namespace, "services": services}))

    return write
