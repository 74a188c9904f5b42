"""The descheduler on the kubernetes backend, against a local HTTP server answering like the
API server: nodes and pods built from the real fixtures, the Eviction API's real answers (201,
429 with the PodDisruptionBudget Status, 404) and the Reservation custom resource."""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml
from descheduler.core import migration as mig
from descheduler.core.config import AnomalyCondition, LowNodeLoadArgs, MigrationLimits, MigrationOptions, NodePool
from descheduler.loop import Descheduler
from koordcommon.cluster.kube import KubeCluster
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from koordcommon.testing.fixtures import fixtures_dir

GI = 1 << 30
RS = "zk-5d4f8b9c7"
RESERVATIONS = "/apis/scheduling.koordinator.sh/v1alpha1/reservations"


def _fixture(name: str) -> Any:
    d = fixtures_dir()
    return yaml.safe_load((d / name).read_text())


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 300 else "Success",
            "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return body


# What EvictionREST.Create answers (k8s-protocols.md section 5.2).
EVICTED = (201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
PDB_BLOCKED = (429, _status(
    429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
    {"retryAfterSeconds": 10, "causes": [{"reason": "DisruptionBudget",
                                           "message": "The disruption budget zk-pdb needs 2 healthy pods and has 2 currently"}]},
))
NOT_FOUND = (404, _status(404, "NotFound", 'pods "zk-gone" not found', {"name": "zk-gone", "kind": "pods"}))


class FakeApiServer:
    def __init__(self, evictions: dict[str, tuple[int, dict]]) -> None:
        self.evictions = evictions
        self.requests: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        self.rv = 10
        base_node = _fixture("node.yaml")
        self.nodes = []
        for name in ("kwok-hot", "kwok-cold"):
            n = copy.deepcopy(base_node)
            n["metadata"]["name"] = name
            n["metadata"]["labels"]["kubernetes.io/hostname"] = name
            n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            self.nodes.append(n)
        website = _fixture("cpu-request-limit.yaml")  # requests 0.5 cpu, limits 1
        self.pods = []
        for name in ("zk-0", "zk-1", "zk-gone"):
            p = copy.deepcopy(website)
            p["metadata"].update(
                name=name, namespace="default", uid=f"uid-{name}", labels={"app": "zk"},
                creationTimestamp="2024-05-01T12:00:00Z",
                ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": RS, "uid": "rs-uid",
                                  "controller": True}],
            )
            p["spec"]["nodeName"] = "kwok-hot"
            p["spec"]["priority"] = 5500
            p["spec"]["priorityClassName"] = "koord-batch"
            p["status"] = {"phase": "Running", "qosClass": "Burstable"}
            self.pods.append(p)
        self.custom: dict[str, dict] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with server.lock:
                    server.requests.append((self.command, path, body))
                    code, payload = server.route(self.command, path, body, parse_qs(query))
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def route(self, method: str, path: str, body: Any, query: dict[str, list[str]]) -> tuple[int, dict]:
        if path == "/api/v1/nodes":
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": self.nodes}
        if path == "/api/v1/pods":
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": self.pods}
        if (m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", path)) and method == "POST":
            code, payload = self.evictions[m[2]]
            dry_run = query.get("dryRun") == ["All"] and (body.get("deleteOptions") or {}).get("dryRun") == ["All"]
            if (code < 300 or code == 404) and not dry_run:  # evicted, or deleted meanwhile
                self.pods = [p for p in self.pods if p["metadata"]["name"] != m[2]]
            return code, payload
        if path == RESERVATIONS and method == "POST":
            obj = copy.deepcopy(body)
            self.rv += 1
            # the API server assigns identity and time, and keeps status out of a create
            obj["metadata"].update(uid="server-uid", creationTimestamp="2024-05-01T12:00:05Z", resourceVersion=str(self.rv))
            obj.pop("status", None)
            self.custom[obj["metadata"]["name"]] = obj
            return 201, obj
        if m := re.fullmatch(RESERVATIONS + r"/([^/]+)", path):
            obj = self.custom.get(m[1])
            if obj is None:
                return 404, _status(404, "NotFound", f'reservations.scheduling.koordinator.sh "{m[1]}" not found')
            if method == "DELETE":
                del self.custom[m[1]]
            return 200, obj
        return 404, _status(404, "NotFound", f"the server could not find the requested resource {path}")


def metrics(now_ms: int) -> dict[str, NodeMetric]:
    """kwok-hot at 95 % cpu (high threshold 75 % of 32 cores = 24 cores), kwok-cold at 10 %."""
    pods = [PodMetric(uid=f"uid-{n}", namespace="default", name=n, usage=Resources(u, GI))
            for n, u in (("zk-0", 3000), ("zk-1", 2000), ("zk-gone", 1500))]
    return {
        "kwok-hot": NodeMetric(node="kwok-hot", ts=now_ms, node_usage=Resources(30400, 40 * GI),
                               system_usage=Resources(23900, 37 * GI), pods=pods),
        "kwok-cold": NodeMetric(node="kwok-cold", ts=now_ms, node_usage=Resources(3200, 20 * GI)),
    }


def args(mode: str) -> LowNodeLoadArgs:
    return LowNodeLoadArgs(
        nodePools=[NodePool(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1))],
        limits=MigrationLimits(maxMigratingPerNode=3, maxMigratingPerWorkload=3, maxUnavailablePerWorkload=3,
                               skipCheckExpectedReplicas=True, evictQPS=0),
        migration=MigrationOptions(defaultJobMode=mode),
    )


@pytest.fixture
def server():
    s = FakeApiServer({"zk-0": EVICTED, "zk-1": PDB_BLOCKED, "zk-gone": NOT_FOUND})
    yield s
    s.stop()


@pytest.fixture
async def cluster(server):
    c = KubeCluster(host=server.url, request_timeout_s=5)
    await c.start()
    yield c
    await c.close()


class Clock:
    t = 500.0

    def __call__(self) -> float:
        return self.t


async def test_evictions_201_429_404(cluster, server):
    clock = Clock()
    d = Descheduler(args("EvictDirectly"), cluster, None, clock=clock)
    now = 1_714_564_800_000
    d.metrics = metrics(now)
    report = await d.run_round(now_ms=now)
    # 6400m over: the victims go in usage-score order until the node is under 24 cores
    assert [m.pod.name for m in report.plan.migrations] == ["zk-0", "zk-1", "zk-gone"]
    assert report.outcomes == {"default/zk-0": "evicted", "default/zk-1": "FailedEvict (blocked)",
                               "default/zk-gone": "FailedEvict (not_found)"}
    posts = [(p, b) for m, p, b in server.requests if m == "POST"]
    assert [p for p, _ in posts] == [f"/api/v1/namespaces/default/pods/{n}/eviction" for n in ("zk-0", "zk-1", "zk-gone")]
    body = posts[0][1]
    assert body["apiVersion"] == "policy/v1" and body["kind"] == "Eviction"
    assert body["metadata"]["name"] == "zk-0" and body["metadata"]["namespace"] == "default"
    assert body["metadata"]["annotations"]["reason"].startswith("node is overutilized, node cpu usage(95.00%)>threshold(75.00%)")
    # the PDB's answer: retried no sooner than the server asked
    assert d.blocked_until["uid-zk-1"] == clock.t + 10
    assert "needs 2 healthy pods" in d.finished[0].reason
    assert [j.pod_key for j in d.jobs.values()] == ["default/zk-0"] and d.jobs["uid-zk-0"].phase == mig.WAITING

    # next round: zk-0's job is in flight, zk-1 waits for its retry, zk-gone is gone
    server.requests.clear()
    report = await d.run_round(now_ms=now + 1000)
    assert [m.pod.name for m in report.plan.migrations] == []
    clock.t += 10
    report = await d.run_round(now_ms=now + 2000)
    assert [m.pod.name for m in report.plan.migrations] == ["zk-1"]


async def test_reservation_first_asks_the_pdb_then_reserves_and_waits_for_koord_scheduler(cluster, server):
    clock = Clock()
    d = Descheduler(args("ReservationFirst"), cluster, None, clock=clock)  # koord-scheduler places reservations
    now = 1_714_564_800_000
    d.metrics = metrics(now)
    report = await d.run_round(now_ms=now)
    # a dry-run eviction first: the PDB's 429 and the 404 end those two before any reservation
    assert report.outcomes == {"default/zk-0": mig.RESERVING, "default/zk-1": "blocked", "default/zk-gone": "not_found"}
    probes = [b for m, p, b in server.requests if m == "POST" and p.endswith("/eviction")]
    assert len(probes) == 3 and all(b["deleteOptions"]["dryRun"] == ["All"] for b in probes)
    assert d.blocked_until["uid-zk-1"] == clock.t + 10
    created = [b for m, p, b in server.requests if m == "POST" and p == RESERVATIONS]
    assert len(created) == 1
    r = created[0]
    assert r["apiVersion"] == "scheduling.koordinator.sh/v1alpha1" and r["kind"] == "Reservation"
    assert r["metadata"]["name"] == "desched-uid-zk-0"
    assert r["spec"]["owners"] == [{"controller": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": RS,
                                                    "uid": "rs-uid", "controller": True, "namespace": "default"}}]
    assert r["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m"}
    assert r["spec"]["template"]["metadata"]["labels"] == {"app": "zk"}
    assert r["spec"]["allocateOnce"] is True and r["spec"]["ttl"] == "300s"

    # not Available yet: nothing is evicted while koord-scheduler has not placed it
    server.requests.clear()
    clock.t += 30
    await d.advance()
    assert not any(m == "POST" for m, _, _ in server.requests)

    # koord-scheduler marks it Available on kwok-cold: now the pod is evicted (for real)
    server.custom["desched-uid-zk-0"]["status"] = {"phase": "Available", "nodeName": "kwok-cold"}
    await d.advance()
    evictions = [b for m, p, b in server.requests if m == "POST" and p.endswith("/eviction")]
    assert [b["metadata"]["name"] for b in evictions] == ["zk-0"] and "deleteOptions" not in evictions[0]
    assert d.jobs["uid-zk-0"].phase == mig.WAITING and d.jobs["uid-zk-0"].reservation_node == "kwok-cold"
    assert [p["metadata"]["name"] for p in server.pods] == ["zk-1", "zk-gone"]


async def test_reservation_never_available_is_deleted_and_the_pod_stays(cluster, server):
    clock = Clock()
    d = Descheduler(args("ReservationFirst"), cluster, None, clock=clock)
    now = 1_714_564_800_000
    d.metrics = metrics(now)
    await d.run_round(now_ms=now)
    clock.t += 61  # past reservationWaitSeconds (60)
    await d.advance()
    assert [p for m, p, _ in server.requests if m == "DELETE"] == [RESERVATIONS + "/desched-uid-zk-0"]
    assert server.custom == {} and d.jobs == {}
    assert d.finished[-1].reason == "ReservationTimeout"
    assert not [b for m, p, b in server.requests if p.endswith("/eviction") and "dryRun" not in (b.get("deleteOptions") or {})]
