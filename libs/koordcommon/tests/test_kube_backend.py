"""The kubernetes backend against a local HTTP server that answers like the Kubernetes API.

The server replays the real API fixtures (fuzzed Node/Pod JSON, kwok node, website pods) and
records every request, so the tests check both what the official client sent (method, path,
query, content type, body) and what the port returned.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from koordcommon.cluster import ClusterPort, EvictionOutcome, open_cluster
from koordcommon.cluster.kube import KubeApiError, KubeCluster
from koordcommon.crds import CRDS
from koordcommon.kube_codec import parse_time_ms
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.testing.fixtures import fixtures_dir

GI = 2**30
TOKEN = "t0ken-abc"


def _fixture(name: str) -> Any:
    d = fixtures_dir()
    with open(d / name) as f:
        return json.load(f) if name.endswith(".json") else yaml.safe_load(f)


def _status(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 300 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


PDB_BLOCKED = _status(
    429,
    "TooManyRequests",
    "Cannot evict pod as it would violate the pod's disruption budget.",
    {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget zk-pdb needs 2 healthy pods and has 2 currently",
            }
        ]
    },
)
PDB_PROCESSING = _status(
    429,
    "TooManyRequests",
    "Cannot evict pod as it would violate the pod's disruption budget.",
    {
        "retryAfterSeconds": 10,
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget zk-pdb is still being processed by the server.",
            }
        ],
    },
)
EVICTIONS: dict[str, tuple[int, dict]] = {
    "zk-0": (201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    "zk-1": (429, PDB_BLOCKED),
    "zk-2": (429, PDB_PROCESSING),
    "missing": (404, _status(404, "NotFound", 'pods "missing" not found', {"name": "missing", "kind": "pods"})),
    "two-pdbs": (
        500,
        _status(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        ),
    ),
    "negative": (403, _status(403, "Forbidden", "pdb disruptions allowed is negative")),
    "mismatch": (400, _status(400, "BadRequest", "name in URL does not match name in Eviction object")),
}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


class FakeApiServer:
    """A threaded HTTP server with the routes the backend uses."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.stopping = threading.Event()
        self.rv = 100
        self.page_size = 1000
        fuzzed_node = _fixture("core.v1.Node.json")
        kwok = _fixture("node.yaml")
        self.nodes: dict[str, dict] = {fuzzed_node["metadata"]["name"]: fuzzed_node, kwok["metadata"]["name"]: kwok}
        pods = [_fixture("core.v1.Pod.json")]
        for name in ("extended-resource-pod.yaml", "high-priority-pod.yaml", "cpu-request-limit.yaml"):
            p = _fixture(name)
            p["metadata"].setdefault("namespace", "default")
            p["spec"]["nodeName"] = "kwok-node-0"
            pods.append(p)
        self.pods = pods
        self.replicasets = {
            ("default", "web-5d4f"): {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": "web-5d4f",
                    "namespace": "default",
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d1", "controller": True}
                    ],
                },
            },
            ("default", "bare-rs"): {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": "bare-rs", "namespace": "default"},
            },
        }
        self.custom: dict[tuple[str, str, str], dict] = {}  # (plural, namespace, name)
        self.watch_queues: dict[str, list[dict | None]] = {"nodes": [], "pods": [], "nodeslos": []}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                rec = Recorded(
                    self.command, url.path, parse_qs(url.query), {k.lower(): v for k, v in self.headers.items()}, body
                )
                with server.lock:
                    server.requests.append(rec)
                if rec.query.get("watch") == ["true"]:
                    server.serve_watch(self, rec)
                    return
                code, payload = server.route(rec)
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if code == 429 and payload.get("details", {}).get("retryAfterSeconds"):
                    self.send_header("Retry-After", str(payload["details"]["retryAfterSeconds"]))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # helpers for tests ------------------------------------------------------------------
    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def push(self, resource: str, type_: str | None, obj: dict | None = None) -> None:
        """Queue a watch event; `None` ends the current watch response (as a server timeout)."""
        with self.cond:
            self.watch_queues[resource].append(None if type_ is None else {"type": type_, "object": obj})
            self.cond.notify_all()

    def find(self, method: str, pattern: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and re.fullmatch(pattern, r.path)]

    # routes -------------------------------------------------------------------------------
    def _list(self, kind: str, items: list[dict], rec: Recorded) -> tuple[int, dict]:
        start = int(rec.query.get("continue", ["0"])[0])
        limit = int(rec.query.get("limit", ["0"])[0]) or len(items) or 1
        size = min(limit, self.page_size)
        page = items[start : start + size]
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if start + size < len(items):
            meta["continue"] = str(start + size)
        return 200, {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page}

    def route(self, rec: Recorded) -> tuple[int, dict]:
        p, m = rec.path, rec.method
        if p == "/api/v1/nodes" and m == "GET":
            return self._list("NodeList", list(self.nodes.values()), rec)
        if mt := re.fullmatch(r"/api/v1/nodes/([^/]+)", p):
            node = self.nodes.get(mt[1])
            return (200, node) if node else (404, _status(404, "NotFound", f'nodes "{mt[1]}" not found'))
        if (mt := re.fullmatch(r"/api/v1/nodes/([^/]+)/status", p)) and m == "PATCH":
            node = self.nodes.get(mt[1])
            if node is None:
                return 404, _status(404, "NotFound", f'nodes "{mt[1]}" not found')
            node = _merge_patch(node, rec.body)
            node["metadata"]["resourceVersion"] = self.next_rv()
            self.nodes[mt[1]] = node
            return 200, node
        if p == "/api/v1/namespaces" and m == "GET":
            namespaces = sorted({i["metadata"].get("namespace", "default") for i in self.pods})
            items = [
                {"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, "team": f"t-{ns}"}}}
                for ns in namespaces
            ]
            return self._list("NamespaceList", items, rec)
        if p == "/api/v1/pods" and m == "GET":
            items = self.pods
            for sel in rec.query.get("fieldSelector", []):
                key, _, value = sel.partition("=")
                assert key == "spec.nodeName"
                items = [i for i in items if i["spec"].get("nodeName") == value]
            return self._list("PodList", items, rec)
        if (mt := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", p)) and m == "GET":
            return self._list("PodList", [i for i in self.pods if i["metadata"].get("namespace") == mt[1]], rec)
        if (mt := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", p)) and m == "POST":
            pod = copy.deepcopy(rec.body)
            pod["metadata"].update(
                uid="uid-new", resourceVersion=self.next_rv(), creationTimestamp="2024-05-01T12:00:00Z"
            )
            pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
            self.pods.append(pod)
            return 201, pod
        if mt := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", p):
            for pod in self.pods:
                if pod["metadata"]["name"] == mt[2] and pod["metadata"].get("namespace") == mt[1]:
                    if m == "DELETE":
                        self.pods.remove(pod)
                    return 200, pod
            return 404, _status(404, "NotFound", f'pods "{mt[2]}" not found')
        if (mt := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", p)) and m == "POST":
            return EVICTIONS[mt[2]]
        if (mt := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding", p)) and m == "POST":
            return 201, _status(201, "", "")
        if (mt := re.fullmatch(r"/api/v1/namespaces/([^/]+)/events", p)) and m == "POST":
            return 201, rec.body
        if mt := re.fullmatch(r"/apis/apps/v1/namespaces/([^/]+)/replicasets/([^/]+)", p):
            rs = self.replicasets.get((mt[1], mt[2]))
            return (200, rs) if rs else (404, _status(404, "NotFound", f'replicasets.apps "{mt[2]}" not found'))
        if mt := re.fullmatch(r"/apis/([^/]+)/([^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", p):
            return self.route_custom(rec, mt[4], mt[3] or "", mt[5])
        return 404, _status(404, "NotFound", f"the server could not find the requested resource {p}")

    def route_custom(self, rec: Recorded, plural: str, ns: str, name: str | None) -> tuple[int, dict]:
        if name is None and rec.method == "GET":
            items = [o for (pl, n, _), o in sorted(self.custom.items()) if pl == plural and (not ns or n == ns)]
            return self._list("List", items, rec)
        if name is None and rec.method == "POST":
            obj = copy.deepcopy(rec.body)
            key = (plural, ns, obj["metadata"]["name"])
            if key in self.custom:
                return 409, _status(409, "AlreadyExists", f'{plural} "{key[2]}" already exists')
            obj["metadata"]["resourceVersion"] = self.next_rv()
            self.custom[key] = obj
            return 201, obj
        key = (plural, ns, name or "")
        current = self.custom.get(key)
        if current is None:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
        if rec.method == "GET":
            return 200, current
        if rec.method == "PUT":
            if rec.body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(rec.body)
            obj["metadata"]["resourceVersion"] = self.next_rv()
            self.custom[key] = obj
            return 200, obj
        if rec.method == "DELETE":
            del self.custom[key]
            return 200, _status(200, "", "")
        return 405, _status(405, "MethodNotAllowed", rec.method)

    def serve_watch(self, h: BaseHTTPRequestHandler, rec: Recorded) -> None:
        resource = rec.path.rsplit("/", 1)[1]
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        try:
            while not self.stopping.is_set():
                with self.cond:
                    queue = self.watch_queues[resource]
                    if not queue:
                        self.cond.wait(0.05)
                        continue
                    ev = queue.pop(0)
                if ev is None:
                    break
                line = json.dumps(ev).encode() + b"\n"
                h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                h.wfile.flush()
                if ev["type"] == "ERROR":
                    break  # the API server ends a watch after an ERROR event
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except OSError:
            pass


@pytest.fixture
def server():
    s = FakeApiServer().start()
    yield s
    s.stop()


@pytest.fixture
async def cluster(server):
    c = KubeCluster(host=server.url, token=TOKEN, request_timeout_s=5, watch_timeout_s=30)
    await c.start()
    yield c
    await c.close()


# reads --------------------------------------------------------------------------------


async def test_is_a_cluster_port_and_open_cluster_builds_it(server):
    c = open_cluster("kubernetes", host=server.url)
    assert isinstance(c, KubeCluster) and isinstance(c, ClusterPort)
    await c.close()


async def test_start_checks_the_server_with_a_token(cluster, server):
    first = server.requests[0]
    assert (first.method, first.path, first.query) == ("GET", "/api/v1/nodes", {"limit": ["1"]})
    assert first.headers["authorization"] == f"Bearer {TOKEN}"
    assert "application/json" in first.headers["accept"]


async def test_kubeconfig_context_selects_server_and_token(server, tmp_path):
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "other",
        "clusters": [
            {"name": "fake", "cluster": {"server": server.url}},
            {"name": "elsewhere", "cluster": {"server": "http://127.0.0.1:9"}},
        ],
        "users": [{"name": "robot", "user": {"token": "from-kubeconfig"}}],
        "contexts": [
            {"name": "fake", "context": {"cluster": "fake", "user": "robot"}},
            {"name": "other", "context": {"cluster": "elsewhere", "user": "robot"}},
        ],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    c = KubeCluster(kubeconfig=str(path), context="fake")
    assert len(await c.list_nodes()) == 2
    assert server.requests[-1].headers["authorization"] == "Bearer from-kubeconfig"
    await c.close()


async def test_start_fails_clearly_when_nothing_listens():
    c = KubeCluster(host="http://127.0.0.1:9", request_timeout_s=1)
    with pytest.raises(KubeApiError) as err:
        await c.start()
    assert err.value.status == 0
    await c.close()


async def test_list_nodes_decodes_fixtures(cluster, server):
    nodes = {n.name: n for n in await cluster.list_nodes()}
    assert set(nodes) == {"nameValue", "kwok-node-0"}
    kwok = nodes["kwok-node-0"]
    assert kwok.capacity == {"cpu": 32000, "memory": 256 * GI, "pods": 110}
    assert kwok.allocatable_resources().cpu_milli == 32000
    assert nodes["nameValue"].unschedulable is True
    req = server.find("GET", "/api/v1/nodes")[-1]
    assert req.query["limit"] == ["500"]


async def test_list_nodes_skips_an_undecodable_node(cluster, server):
    server.nodes["broken"] = {"metadata": {"name": "broken"}, "status": {"capacity": {"cpu": "a lot"}}}
    assert sorted(n.name for n in await cluster.list_nodes()) == ["kwok-node-0", "nameValue"]
    with pytest.raises(ValueError, match="node broken: status.capacity"):
        await cluster.get_node("broken")


async def test_list_nodes_follows_continue_tokens(cluster, server):
    server.page_size = 1
    nodes = await cluster.list_nodes()
    assert sorted(n.name for n in nodes) == ["kwok-node-0", "nameValue"]
    pages = server.find("GET", "/api/v1/nodes")[1:]
    assert [r.query.get("continue") for r in pages] == [None, ["1"]]


async def test_get_node(cluster):
    node = await cluster.get_node("kwok-node-0")
    assert node is not None and node.capacity["memory"] == 256 * GI
    assert await cluster.get_node("nope") is None


async def test_list_pods_on_a_node_uses_a_field_selector(cluster, server):
    pods = await cluster.list_pods(node_name="kwok-node-0")
    assert sorted(p.name for p in pods) == ["cpu-demo", "extended-resource-demo", "high-priority"]
    by_name = {p.name: p for p in pods}
    assert by_name["cpu-demo"].containers[0].requests == {"cpu": 500}
    assert by_name["high-priority"].requests() == {"cpu": 500, "memory": 10 * GI}
    req = server.find("GET", "/api/v1/pods")[-1]
    assert req.query["fieldSelector"] == ["spec.nodeName=kwok-node-0"]
    all_pods = await cluster.list_pods()
    assert len(all_pods) == 4
    assert "fieldSelector" not in server.find("GET", "/api/v1/pods")[-1].query


async def test_list_pods_in_a_namespace(cluster, server):
    pods = await cluster.list_pods(namespace="cpu-example")
    assert [p.name for p in pods] == ["cpu-demo"]
    assert server.find("GET", "/api/v1/namespaces/cpu-example/pods")


async def test_list_namespaces_with_labels(cluster, server):
    namespaces = await cluster.list_namespaces()
    assert namespaces["cpu-example"] == {"kubernetes.io/metadata.name": "cpu-example", "team": "t-cpu-example"}
    assert server.find("GET", "/api/v1/namespaces")


async def test_get_pod(cluster):
    pod = await cluster.get_pod("namespaceValue", "nameValue")
    assert pod is not None and pod.uid == "uidValue" and pod.priority == 25
    assert await cluster.get_pod("default", "nope") is None


@pytest.mark.parametrize(
    "owner,expect",
    [
        (OwnerRef("ReplicaSet", "web-5d4f", controller=True), ("Deployment", "web")),
        (OwnerRef("ReplicaSet", "bare-rs", controller=True), ("ReplicaSet", "bare-rs")),
        (OwnerRef("ReplicaSet", "deleted-rs", controller=True), ("ReplicaSet", "deleted-rs")),
        (OwnerRef("StatefulSet", "zk", controller=True), ("StatefulSet", "zk")),
        (None, ("Pod", "solo")),
    ],
)
async def test_resolve_workload(cluster, server, owner, expect):
    pod = PodRecord("default", "solo", "u", owners=[owner] if owner else [])
    assert await cluster.resolve_workload(pod) == expect
    assert await cluster.resolve_workload(pod) == expect
    reads = server.find("GET", r"/apis/apps/v1/namespaces/default/replicasets/.*")
    assert len(reads) == (1 if owner and owner.kind == "ReplicaSet" else 0)  # second call from the cache


# node status --------------------------------------------------------------------------


async def test_patch_node_status_is_a_merge_patch_on_the_status_subresource(cluster, server):
    node = await cluster.patch_node_status(
        "kwok-node-0", {"kubernetes.io/batch-cpu": 50_000, "kubernetes.io/batch-memory": 120 * GI}
    )
    req = server.find("PATCH", "/api/v1/nodes/kwok-node-0/status")[-1]
    assert req.headers["content-type"] == "application/merge-patch+json"
    want = {"kubernetes.io/batch-cpu": "50k", "kubernetes.io/batch-memory": "120Gi"}
    assert req.body == {"status": {"capacity": want, "allocatable": want}}
    assert node.allocatable["kubernetes.io/batch-cpu"] == 50_000
    assert node.batch_allocatable().memory_bytes == 120 * GI
    assert node.capacity["cpu"] == 32000  # untouched keys stay

    node = await cluster.patch_node_status(
        "kwok-node-0",
        {"kubernetes.io/mid-cpu": 1500},
        remove_resources=["kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"],
    )
    req = server.find("PATCH", "/api/v1/nodes/kwok-node-0/status")[-1]
    want = {"kubernetes.io/mid-cpu": "1500", "kubernetes.io/batch-cpu": None, "kubernetes.io/batch-memory": None}
    assert req.body == {"status": {"capacity": want, "allocatable": want}}
    assert node.batch_allocatable() is None
    assert node.allocatable["kubernetes.io/mid-cpu"] == 1500


async def test_patch_node_status_of_a_missing_node_raises(cluster):
    with pytest.raises(KubeApiError) as err:
        await cluster.patch_node_status("ghost", {"kubernetes.io/batch-cpu": 1})
    assert err.value.status == 404 and 'nodes "ghost" not found' in err.value.message


# eviction -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pod,outcome,message,retry_after",
    [
        ("zk-0", EvictionOutcome.EVICTED, "evicted", None),
        (
            "zk-1",
            EvictionOutcome.BLOCKED,
            PDB_BLOCKED["message"] + " The disruption budget zk-pdb needs 2 healthy pods and has 2 currently",
            None,
        ),
        (
            "zk-2",
            EvictionOutcome.BLOCKED,
            PDB_BLOCKED["message"] + " The disruption budget zk-pdb is still being processed by the server.",
            10.0,
        ),
        ("missing", EvictionOutcome.NOT_FOUND, 'pods "missing" not found', None),
        (
            "two-pdbs",
            EvictionOutcome.FORBIDDEN,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            None,
        ),
        ("negative", EvictionOutcome.FORBIDDEN, "pdb disruptions allowed is negative", None),
        ("mismatch", EvictionOutcome.ERROR, "name in URL does not match name in Eviction object", None),
    ],
)
async def test_evict_pod_outcomes(cluster, server, pod, outcome, message, retry_after):
    result = await cluster.evict_pod("default", pod, reason="LowNodeLoad")
    assert result.outcome is outcome
    assert result.message == message
    assert result.retry_after_s == retry_after
    req = server.find("POST", f"/api/v1/namespaces/default/pods/{pod}/eviction")[-1]
    assert req.headers["content-type"] == "application/json"
    assert req.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {
            "name": pod,
            "namespace": "default",
            "annotations": {"reason": "LowNodeLoad", "requested-by": "koordinator"},
        },
    }


async def test_evict_pod_dry_run_and_grace_period(cluster, server):
    result = await cluster.evict_pod("default", "zk-0", dry_run=True, grace_period_s=30)
    assert result.outcome is EvictionOutcome.EVICTED
    req = server.find("POST", "/api/v1/namespaces/default/pods/zk-0/eviction")[-1]
    assert req.query == {"dryRun": ["All"]}
    assert req.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "zk-0", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 30, "dryRun": ["All"]},
    }


# pods -----------------------------------------------------------------------------------


async def test_create_bind_delete_pod(cluster, server):
    pod = PodRecord(
        "batch",
        "job-1",
        "",
        labels={"koordinator.sh/qosClass": "BE"},
        priority=5500,
        priority_class_name="koord-batch",
        containers=[
            ContainerSpec(
                "main",
                {"kubernetes.io/batch-cpu": 2000, "kubernetes.io/batch-memory": 4 * GI},
                {"kubernetes.io/batch-cpu": 2000, "kubernetes.io/batch-memory": 4 * GI},
            )
        ],
    )
    created = await cluster.create_pod(pod)
    req = server.find("POST", "/api/v1/namespaces/batch/pods")[-1]
    assert req.body["kind"] == "Pod" and "status" not in req.body
    assert req.body["metadata"] == {"name": "job-1", "namespace": "batch", "labels": {"koordinator.sh/qosClass": "BE"}}
    assert req.body["spec"]["priority"] == 5500 and req.body["spec"]["priorityClassName"] == "koord-batch"
    assert req.body["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "2k",
        "kubernetes.io/batch-memory": "4Gi",
    }
    assert created.uid == "uid-new" and created.created_ms == 1714564800000
    assert created.batch_requests().cpu_milli == 2000

    await cluster.bind_pod("batch", "job-1", "kwok-node-0", uid="uid-new")
    req = server.find("POST", "/api/v1/namespaces/batch/pods/job-1/binding")[-1]
    assert req.body == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "job-1", "namespace": "batch", "uid": "uid-new"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "kwok-node-0"},
    }

    await cluster.delete_pod("batch", "job-1")
    assert server.find("DELETE", "/api/v1/namespaces/batch/pods/job-1")
    await cluster.delete_pod("batch", "job-1")  # already gone: no error
    assert await cluster.get_pod("batch", "job-1") is None


# custom objects -------------------------------------------------------------------------


async def test_custom_object_create_then_replace(cluster, server):
    slo = {"metadata": {"name": "kwok-node-0"}, "spec": {"resourceUsedThresholdWithBE": {"enable": True}}}
    created = await cluster.apply_custom("NodeSLO", slo)
    post = server.find("POST", "/apis/slo.koordinator.sh/v1alpha1/nodeslos")[-1]
    assert post.headers["content-type"] == "application/json"
    assert post.body == {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "kwok-node-0"},
        "spec": {"resourceUsedThresholdWithBE": {"enable": True}},
    }
    rv = created["metadata"]["resourceVersion"]

    slo["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] = 65
    replaced = await cluster.apply_custom("NodeSLO", slo)
    put = server.find("PUT", "/apis/slo.koordinator.sh/v1alpha1/nodeslos/kwok-node-0")[-1]
    assert put.body["metadata"] == {"name": "kwok-node-0", "resourceVersion": rv}
    assert replaced["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65
    assert slo["metadata"] == {"name": "kwok-node-0"}  # the caller's dict is not changed

    got = await cluster.get_custom("NodeSLO", "kwok-node-0")
    assert got == replaced
    assert [o["metadata"]["name"] for o in await cluster.list_custom("NodeSLO")] == ["kwok-node-0"]
    await cluster.delete_custom("NodeSLO", "kwok-node-0")
    assert await cluster.get_custom("NodeSLO", "kwok-node-0") is None
    await cluster.delete_custom("NodeSLO", "kwok-node-0")  # idempotent


async def test_namespaced_custom_objects(cluster, server):
    rec = {"metadata": {"name": "web", "namespace": "shop"}, "spec": {"target": {"type": "workload"}}}
    await cluster.apply_custom("Recommendation", rec)
    assert server.find("POST", "/apis/analysis.koordinator.sh/v1alpha1/namespaces/shop/recommendations")
    assert (await cluster.get_custom("Recommendation", "web", "shop"))["spec"] == rec["spec"]
    assert server.find("GET", "/apis/analysis.koordinator.sh/v1alpha1/namespaces/shop/recommendations/web")
    await cluster.apply_custom("Recommendation", {"metadata": {"name": "db"}, "spec": {}})  # -> default
    everywhere = await cluster.list_custom("Recommendation")
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in everywhere) == [
        ("default", "db"),
        ("shop", "web"),
    ]
    assert [o["metadata"]["name"] for o in await cluster.list_custom("Recommendation", "shop")] == ["web"]


@pytest.mark.parametrize("kind", sorted(CRDS))
async def test_every_custom_kind_uses_its_group_and_plural(cluster, server, kind):
    c = CRDS[kind]
    await cluster.list_custom(kind)
    assert server.find("GET", f"/apis/{c.group}/{c.version}/{c.plural}")


async def test_custom_object_errors(cluster):
    with pytest.raises(ValueError, match="unknown custom object kind 'Widget'"):
        await cluster.list_custom("Widget")
    with pytest.raises(ValueError, match="metadata.name"):
        await cluster.apply_custom("NodeSLO", {"spec": {}})


# events ---------------------------------------------------------------------------------


async def test_emit_event(cluster, server):
    await cluster.emit_event(
        {"kind": "Pod", "name": "zk-1", "namespace": "default", "uid": "u1"},
        "Evicted",
        "evicted by LowNodeLoad",
        "Warning",
    )
    await cluster.emit_event({"kind": "Node", "name": "kwok-node-0"}, "BatchResourceUpdated", "batch-cpu 50k")
    pod_ev = server.find("POST", "/api/v1/namespaces/default/events")[0].body
    assert pod_ev["involvedObject"] == {"kind": "Pod", "name": "zk-1", "namespace": "default", "uid": "u1"}
    assert (pod_ev["reason"], pod_ev["message"], pod_ev["type"]) == ("Evicted", "evicted by LowNodeLoad", "Warning")
    assert pod_ev["metadata"]["name"].startswith("zk-1.") and pod_ev["metadata"]["namespace"] == "default"
    assert pod_ev["source"] == {"component": "koordinator"} and pod_ev["count"] == 1
    sent_ms = parse_time_ms(pod_ev["firstTimestamp"])  # RFC 3339 (the client's model prints +00:00)
    assert abs(sent_ms - time.time() * 1000) < 60_000
    assert pod_ev["lastTimestamp"] == pod_ev["firstTimestamp"]
    node_ev = server.find("POST", "/api/v1/namespaces/default/events")[1].body
    assert node_ev["involvedObject"] == {"kind": "Node", "name": "kwok-node-0"}
    assert node_ev["type"] == "Normal"


# watch ----------------------------------------------------------------------------------


async def _next(it, timeout: float = 5.0):
    return await asyncio.wait_for(it.__anext__(), timeout)


async def test_watch_streams_node_and_pod_events(cluster, server):
    kwok = copy.deepcopy(server.nodes["kwok-node-0"])
    kwok["metadata"]["resourceVersion"] = "101"
    pod = copy.deepcopy(server.pods[2])
    pod["metadata"]["resourceVersion"] = "102"
    pod["status"] = {"phase": "Running"}
    server.push("nodes", "MODIFIED", kwok)
    server.push("pods", "BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "150"}})
    server.push("pods", "ADDED", pod)
    it = cluster.watch()
    events = [await _next(it), await _next(it)]
    by_kind = {e.kind: e for e in events}
    assert by_kind["Node"].type == "MODIFIED" and by_kind["Node"].obj.name == "kwok-node-0"
    assert by_kind["Node"].obj.capacity["cpu"] == 32000
    assert by_kind["Pod"].type == "ADDED" and by_kind["Pod"].obj.name == "high-priority"
    assert by_kind["Pod"].obj.phase == "Running"

    watches = [r for r in server.requests if r.query.get("watch") == ["true"]]
    assert {r.path for r in watches} == {"/api/v1/nodes", "/api/v1/pods"}
    for r in watches:
        assert r.query["resourceVersion"] == ["100"]  # from the list made just before: "from now on"
        assert r.query["allowWatchBookmarks"] == ["true"] and r.query["timeoutSeconds"] == ["30"]

    # the server ends the stream (timeout): the client resumes from the last version it saw
    server.push("pods", None)
    server.push("pods", "DELETED", pod)
    ev = await _next(it)
    assert (ev.type, ev.kind, ev.obj.name) == ("DELETED", "Pod", "high-priority")
    pod_watches = [r for r in server.requests if r.query.get("watch") == ["true"] and r.path == "/api/v1/pods"]
    assert pod_watches[-1].query["resourceVersion"] == ["102"]
    await it.aclose()


async def test_watch_relists_after_410_gone(cluster, server):
    it = cluster.watch()
    server.rv = 500
    server.push("nodes", "ERROR", _status(410, "Expired", "too old resource version: 100 (400)"))
    node = copy.deepcopy(server.nodes["kwok-node-0"])
    node["metadata"]["resourceVersion"] = "501"
    server.push("nodes", "ADDED", node)
    ev = await _next(it)
    assert (ev.type, ev.kind, ev.obj.name) == ("ADDED", "Node", "kwok-node-0")
    node_watches = [r for r in server.requests if r.query.get("watch") == ["true"] and r.path == "/api/v1/nodes"]
    assert node_watches[-1].query["resourceVersion"] == ["500"]
    await it.aclose()


async def test_watch_skips_undecodable_objects_and_custom_kinds(server):
    c = KubeCluster(host=server.url, request_timeout_s=5, watch_timeout_s=30, watch_custom_kinds=("NodeSLO",))
    it = c.watch()
    bad = {"metadata": {"name": "broken", "resourceVersion": "103"}, "status": {"allocatable": {"cpu": "lots"}}}
    server.push("nodes", "ADDED", bad)
    slo = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "kwok-node-0", "resourceVersion": "104"},
        "spec": {},
    }
    server.push("nodeslos", "ADDED", slo)
    ev = await _next(it)
    assert (ev.type, ev.kind, ev.custom_kind, ev.obj) == ("ADDED", "Custom", "NodeSLO", slo)
    good = copy.deepcopy(server.nodes["kwok-node-0"])
    server.push("nodes", "MODIFIED", good)
    ev = await _next(it)
    assert (ev.kind, ev.obj.name) == ("Node", "kwok-node-0")
    assert server.find("GET", "/apis/slo.koordinator.sh/v1alpha1/nodeslos")
    await it.aclose()
    await c.close()


async def test_close_ends_open_watches(server):
    c = KubeCluster(host=server.url, request_timeout_s=5, watch_timeout_s=30)
    before = set(threading.enumerate())
    it = c.watch()
    pending = asyncio.ensure_future(_next(it, 10))
    for _ in range(100):
        if len(server.find("GET", "/api/v1/(nodes|pods)")) >= 4:  # both lists and both watches made
            break
        await asyncio.sleep(0.02)
    pumps = [t for t in set(threading.enumerate()) - before if t.name.startswith("kube-watch-")]
    assert sorted(t.name for t in pumps) == ["kube-watch-Node", "kube-watch-Pod"]
    await c.close()
    for _ in range(150):
        if not any(t.is_alive() for t in pumps):
            break
        await asyncio.sleep(0.02)
    assert not any(t.is_alive() for t in pumps)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
