"""Scheduler-extender latency: filter + prioritize for 1,000 and 5,000 nodes, both request forms.

One "call pair" is what kube-scheduler does per pod: POST /filter with every candidate, then
POST /prioritize with the nodes that passed. It runs in-process through the ASGI app (routing,
body read, decode, judgement, encode, response), with no network in between.

The floor is the unavoidable JSON work on the same payloads, in the same run: orjson decode of
both requests plus orjson encode of both replies, each measured in the same place of a round
as the call it stands for (after the same scheduler-side work), so both see the caches alike.
The goal is p99 within 2x the floor.

Cases per size: one pod scheduled again and again (the same payloads each round, in both
request forms), then, informative, a burst of new pods of one shape (a ReplicaSet scaling up,
NodeNames form): each pod is parsed once, and the nodes fill up as the burst goes on.

    .venv/bin/python bench/extender.py [--iterations 1000] [--sizes 1000,5000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time

import orjson
from koordcommon.kube_codec import node_to_k8s
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from koordcommon.service import tune_gc, tune_malloc
from scheduler_extender import api
from scheduler_extender.core import wire
from scheduler_extender.core.state import ClusterState

Gi = 1024**3
NOW = 1_700_000_000_000


def kube_node(name: str) -> dict:
    """A Node as kube-scheduler's cache encodes it: status with capacity, conditions, nodeInfo."""
    rec = NodeRecord(
        name=name,
        labels={"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{hash(name) % 3}"},
        capacity={"cpu": 32000, "memory": 128 * Gi, "pods": 110},
        allocatable={
            "cpu": 31500,
            "memory": 126 * Gi,
            "pods": 110,
            "koordinator.sh/batch-cpu": 12000,
            "koordinator.sh/batch-memory": 40 * Gi,
        },
    )
    obj = node_to_k8s(rec)
    obj.pop("apiVersion")
    obj.pop("kind")
    obj["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    obj["status"]["nodeInfo"] = {
        "machineID": "ec2" + name,
        "systemUUID": "ec2" + name,
        "bootID": "b-" + name,
        "kernelVersion": "6.1.0",
        "osImage": "Ubuntu 22.04.4 LTS",
        "containerRuntimeVersion": "containerd://1.7.13",
        "kubeletVersion": "v1.29.2",
        "kubeProxyVersion": "v1.29.2",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
    return obj


def build_state(n: int, rng: random.Random) -> ClusterState:
    st = ClusterState(clock=lambda: NOW + 5_000)
    nodes, pods, metrics = [], [], []
    for i in range(n):
        name = f"node-{i:05d}"
        alloc = {
            "cpu": 31500,
            "memory": 126 * Gi,
            "pods": 110,
            "koordinator.sh/batch-cpu": 12000,
            "koordinator.sh/batch-memory": 40 * Gi,
        }
        nodes.append(NodeRecord(name=name, capacity=dict(alloc), allocatable=alloc))
        reported = []
        for j in range(8):
            p = PodRecord(
                namespace="default",
                name=f"{name}-p{j}",
                uid=f"{name}-p{j}",
                node_name=name,
                phase="Running",
                owners=[OwnerRef(kind="ReplicaSet", name=f"app-{j}")],
                containers=[ContainerSpec("c", {"cpu": 2000, "memory": 4 * Gi}, {"cpu": 2000, "memory": 4 * Gi})],
                start_ms=NOW - 3_600_000,
            )
            pods.append(p)
            reported.append(
                PodMetric(uid=p.uid, namespace="default", name=p.name, usage=Resources(rng.randint(200, 1800), 2 * Gi))
            )
        metrics.append(
            NodeMetric(
                node=name,
                ts=NOW,
                node_usage=Resources(rng.randint(2000, 24000), rng.randint(16, 110) * Gi),
                allocatable=Resources(31500, 126 * Gi),
                pods=reported,
            )
        )
    st.apply_many(nodes=nodes, pods=pods)
    for m in metrics:
        st.apply_metric(m)
    return st


POD = {
    "metadata": {
        "name": "web-7d9c-abcde",
        "namespace": "default",
        "uid": "uid-web-7d9c-abcde",
        "resourceVersion": "4711",
        "labels": {"app": "web", "pod-template-hash": "7d9c"},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c", "uid": "rs-1", "controller": True}
        ],
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "priority": 9500,
        "containers": [
            {
                "name": "web",
                "image": "nginx:1.25",
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}},
            }
        ],
    },
    "status": {"phase": "Pending", "qosClass": "Burstable"},
}


class Asgi:
    """Calls the ASGI app the way uvicorn does, without a socket."""

    def __init__(self, app):
        self.app = app

    async def post(self, path: str, body: bytes) -> bytes:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 10262),
        }
        sent = False
        chunks: list[bytes] = []
        status = [0]

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        if status[0] != 200:
            raise RuntimeError(f"{path} answered {status[0]}")
        return b"".join(chunks)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(len(s) * p) - 1))]


def burst_pod(i: int) -> dict:
    """The i-th pod of a ReplicaSet's burst: the same template, its own name and uid."""
    meta = {**POD["metadata"], "name": f"web-7d9c-{i:05d}", "uid": f"uid-web-7d9c-{i:05d}"}
    return {**POD, "metadata": meta}


async def run_case(
    n: int, cache_capable: bool, burst: bool, iterations: int, budget_s: float, client: Asgi, items: list[dict]
) -> dict:
    names = [it["metadata"]["name"] for it in items]
    nodes = None if cache_capable else {"metadata": {"resourceVersion": "1"}, "items": items}
    counter = iter(range(10**9))

    def filter_body() -> tuple[dict, bytes]:
        pod = burst_pod(next(counter)) if burst else POD
        return pod, wire.encode_extender_args(pod, nodes, names if cache_capable else None)

    def prioritize_body(pod: dict, res: dict) -> bytes:
        if cache_capable:  # the prioritize request holds the survivors, as kube-scheduler sends them
            return wire.encode_extender_args(pod, None, res["NodeNames"])
        return wire.encode_extender_args(pod, {"metadata": {"resourceVersion": "1"}, "items": res["Nodes"]["items"]}, None)

    async def one_round() -> tuple[float, float, int]:
        pod, body = filter_body()  # the scheduler's, before the call
        # The extender's calls, with the scheduler's own work between them (reading the filter
        # reply, writing the prioritize request, reading the scores).
        t0 = time.perf_counter()
        fr = await client.post("/filter", body)
        t1 = time.perf_counter()
        fobj = orjson.loads(fr)
        prio_body = prioritize_body(pod, fobj)
        t2 = time.perf_counter()
        pr = await client.post("/prioritize", prio_body)
        t3 = time.perf_counter()
        pobj = orjson.loads(pr)
        # The floor in the same place: decode each request and encode each reply, with the same
        # scheduler work between, so both see the caches in the same state.
        f0 = time.perf_counter()
        orjson.loads(body)
        orjson.dumps(fobj)
        f1 = time.perf_counter()
        prioritize_body(pod, orjson.loads(fr))
        f2 = time.perf_counter()
        orjson.loads(prio_body)
        orjson.dumps(pobj)
        f3 = time.perf_counter()
        orjson.loads(pr)
        return (t1 - t0) + (t3 - t2), (f1 - f0) + (f3 - f2), len(pobj)

    for _ in range(5):  # first calls encode the reply entries of every node
        await one_round()
    warm = time.perf_counter()
    for _ in range(5):
        _, _, passed = await one_round()
    per_round = (time.perf_counter() - warm) / 5
    # bounded runtime: large payloads get fewer rounds (at least 100, so that p99 is not the maximum)
    rounds = min(iterations, max(100, int(budget_s / per_round)))
    total, floor = [], []
    for _ in range(rounds):
        t, f, passed = await one_round()
        total.append(t)
        floor.append(f)
    return {
        "nodes": n,
        "cache_capable": cache_capable,
        "burst": burst,
        "passed": passed,
        "rounds": rounds,
        "p50_ms": pct(total, 0.50) * 1e3,
        "p99_ms": pct(total, 0.99) * 1e3,
        "floor_p50_ms": pct(floor, 0.50) * 1e3,
        "floor_p99_ms": pct(floor, 0.99) * 1e3,
    }


async def main() -> int:
    tune_malloc()  # what the service does at start
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds of measuring per case")
    args = ap.parse_args()
    rng = random.Random(7)
    started = time.perf_counter()
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        t = time.perf_counter()
        st = build_state(n, rng)
        print(f"state of {n} nodes built in {time.perf_counter() - t:.1f} s", flush=True)
        client = Asgi(api.create_app(st))
        items = [kube_node(f"node-{i:05d}") for i in range(n)]
        tune_gc()  # what the service does once the cluster is listed
        # one pod again and again (the payloads), in both forms; then a burst of new
        # pods of one shape, which also pays for parsing each pod (it runs last: it fills nodes)
        for cache_capable, burst in ((True, False), (False, False), (True, True)):
            gc.collect()
            rows.append(await run_case(n, cache_capable, burst, args.iterations, args.budget, client, items))
    print(
        f"{'nodes':>6} {'form':>9} {'pods':>7} {'passed':>6} {'rounds':>6} {'p50 ms':>8} {'p99 ms':>8} {'floor p50':>10} {'floor p99':>10} "
        f"{'p50/floor':>9} {'p99/floor':>9}"
    )
    worst = {False: 0.0, True: 0.0}
    for r in rows:
        ratio50 = r["p50_ms"] / r["floor_p50_ms"]
        ratio99 = r["p99_ms"] / r["floor_p99_ms"]
        worst[r["burst"]] = max(worst[r["burst"]], ratio99)
        form = "NodeNames" if r["cache_capable"] else "Nodes"
        pods = "burst" if r["burst"] else "one"
        print(
            f"{r['nodes']:>6} {form:>9} {pods:>7} {r['passed']:>6} {r['rounds']:>6} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['floor_p50_ms']:>10.2f} "
            f"{r['floor_p99_ms']:>10.2f} {ratio50:>9.2f} {ratio99:>9.2f}"
        )
    print(
        f"worst p99 / floor p99: {worst[False]:.2f} (goal <= 2.0); burst of new pods: {worst[True]:.2f} (informative); "
        f"gc thresholds {gc.get_threshold()}; runtime {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
