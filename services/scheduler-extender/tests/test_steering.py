"""Whoever can reach the extender must not steer it: filter and prioritize change nothing;
placements come from what is bound (the bind verb, or the watch)."""

from __future__ import annotations

import httpx
import orjson
from extender_helpers import T0, Gi, guaranteed, metric, node
from koordcommon.kube_codec import pod_to_k8s
from koordcommon.testing.http import ThreadServer
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from scheduler_extender import api
from scheduler_extender.core.state import ClusterState, ExtenderConfig

NOW = T0 + 10_000
NODES = ("n1", "n2")


def state() -> ClusterState:
    st = ClusterState(ExtenderConfig(assume_ttl_s=30), clock=lambda: NOW)
    for n in NODES:
        st.apply_node(node(n, cpu=32000))
        st.apply_metric(metric(n, 4000, 8 * Gi))  # 12.5 % used; the threshold is 65 %
    return st


def args(pod) -> bytes:
    return orjson.dumps({"Pod": pod_to_k8s(pod), "NodeNames": list(NODES)})


def test_sixty_prioritize_calls_for_fake_pods_do_not_steer_the_filter():
    st = state()
    with ThreadServer(api.create_app(st)) as s, httpx.Client(base_url=s.url) as client:
        for i in range(60):  # made-up 32-CPU pods, never bound
            fake = guaranteed(f"fake-{i}", 32000, 8 * Gi, uid=f"fake-{i}")
            r = client.post("/prioritize", content=args(fake))
            assert r.status_code == 200 and len(r.json()) == 2
            r = client.post("/filter", content=args(fake))
            assert r.status_code == 200
        real = guaranteed("real", 2000, 4 * Gi, uid="real")
        reply = client.post("/filter", content=args(real)).json()
    assert reply["NodeNames"] == list(NODES) and not reply.get("FailedNodes")
    assert st.assumed == {} and all(not pods for pods in st.assigned.values())


async def test_the_bind_verb_binds_through_the_cluster_and_counts_the_pod_at_once():
    sim = SimCluster(SimSpec(nodes=1, seed=3, speed=0, start_ms=T0, online_pods_per_node=0))
    await sim.start()
    try:
        target = (await sim.list_nodes())[0].name
        pod = await sim.create_pod(guaranteed("web", 16000, 4 * Gi, ns="default"))
        st = ClusterState(ExtenderConfig(assume_ttl_s=30), clock=lambda: NOW)
        st.apply_node(node(target, cpu=32000))
        st.apply_metric(metric(target, 4000, 8 * Gi))
        front = api.create_app(st, "/scheduler")
        path = api.install_bind(front.app, st, sim, "/scheduler")  # beside the verbs, as the service serves it
        async with httpx.AsyncClient(transport=httpx.ASGITransport(front), base_url="http://x") as client:
            body = orjson.dumps({"Pod": pod_to_k8s(pod), "NodeNames": [target]})
            assert (await client.post("/scheduler/filter", content=body)).json()["NodeNames"] == [target]
            assert st.assumed == {}  # judged, not placed
            bound = await client.post(path, content=orjson.dumps(
                {"PodName": "web", "PodNamespace": "default", "PodUID": pod.uid, "Node": target}))
            assert bound.status_code == 200 and bound.json() == {"Error": ""}
            assert (await sim.get_pod("default", "web")).node_name == target
            assert "default/web" in st.assigned[target]  # counted before any watch reports it
            # a second 16-CPU pod no longer fits under the 65 % threshold on that node
            other = guaranteed("web-2", 16000, 4 * Gi, uid="web-2")
            reply = (await client.post("/scheduler/filter", content=orjson.dumps(
                {"Pod": pod_to_k8s(other), "NodeNames": [target]}))).json()
            assert reply["NodeNames"] == [] and target in reply["FailedNodes"]
            refused = await client.post(path, content=orjson.dumps(
                {"PodName": "nope", "PodNamespace": "default", "PodUID": "x", "Node": "no-such-node"}))
            assert refused.status_code == 200 and "failed" in refused.json()["Error"]
            assert (await client.post(path, content=b'{"PodName": 3}')).status_code == 400
    finally:
        await sim.close()
