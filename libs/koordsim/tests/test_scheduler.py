"""ExtenderScheduler against a real HTTP extender (FastAPI + uvicorn), as kube-scheduler drives it."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request, Response
from koordcommon.records import ContainerSpec, NodeRecord, PodRecord
from koordcommon.testing.fixtures import fixtures_dir
from koordcommon.testing.net import free_port
from koordsim.cluster import SimCluster, SimSpec
from koordsim.scheduler import ExtenderError, ExtenderScheduler, _go_json, extender_args

BATCH_CPU = "koordinator.sh/batch-cpu"
BLOCK_LABEL = "ext.example.com/blocked"


def fixture_cases() -> dict[str, dict]:
    path = fixtures_dir() / "kube-scheduler.extender.v1.types_test.compat.json"
    return {c["type"]: c for c in json.loads(path.read_text())["cases"]}


def make_extender(cluster: SimCluster):
    """Filters out nodes labelled BLOCK_LABEL=true; scores sim-node-00N with 2N."""
    app = FastAPI()
    state = {"filter": "label", "prioritize": "name", "requests": [], "raw": None, "delay": 0.0}

    @app.post("/scheduler/filter")
    async def filter_(request: Request):
        body = await request.body()
        args = json.loads(body)
        state["requests"].append(("filter", args, body))
        mode = state["filter"]
        if mode == "error500":
            return Response(status_code=500)
        if mode == "sleep":
            await asyncio.sleep(state["delay"])
        if mode == "raw":
            return Response(content=state["raw"], media_type="application/json")
        if args["NodeNames"] is not None:
            names = args["NodeNames"]
            labels = {n: cluster.state.nodes[n].labels for n in names}  # the extender's own cache
        else:
            items = args["Nodes"]["items"]
            names = [i["metadata"]["name"] for i in items]
            labels = {i["metadata"]["name"]: i["metadata"].get("labels", {}) for i in items}
        blocked = {n for n in names if labels[n].get(BLOCK_LABEL) == "true"}
        keep = [n for n in names if n not in blocked]
        reply = {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {n: "blocked by label" for n in sorted(blocked)},
            "FailedAndUnresolvableNodes": None,
            "Error": "",
        }
        if mode == "bothnull":
            pass
        elif args["NodeNames"] is not None:
            reply["NodeNames"] = keep
        else:
            reply["Nodes"] = {"metadata": {}, "items": [i for i in items if i["metadata"]["name"] in keep]}
        if mode == "lower":
            return Response(content=json.dumps(reply).lower(), media_type="application/json")
        return reply

    @app.post("/scheduler/prioritize")
    async def prioritize(request: Request):
        body = await request.body()
        args = json.loads(body)
        state["requests"].append(("prioritize", args, body))
        if state["prioritize"] == "error500":
            return Response(status_code=500)
        names = args["NodeNames"] if args["NodeNames"] is not None else [i["metadata"]["name"] for i in args["Nodes"]["items"]]
        return [{"Host": n, "Score": 2 * int(n[-1])} for n in names] + [{"Host": "stranger", "Score": 10}]

    return app, state


@pytest.fixture
async def cluster():
    spec = SimSpec(nodes=6, online_pods_per_node=0, mid_pods=0, seed=1, start_ms=1_780_000_000_000)
    c = SimCluster(spec)
    for i in range(6):
        await c.patch_node_status(f"sim-node-00{i}", {BATCH_CPU: 1000 if i == 5 else 8000})
    await c.update_node("sim-node-001", labels={BLOCK_LABEL: "true"})
    await c.update_node("sim-node-003", unschedulable=True)
    await c.update_node("sim-node-004", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    return c


@pytest.fixture
async def extender(cluster):
    app, state = make_extender(cluster)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "extender did not start"
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}/scheduler/", state
    server.should_exit = True
    await task


def batch_pod(name: str, cpu: int, priority: int = 5000, created_ms: int = 0) -> PodRecord:
    return PodRecord(
        namespace="batch",
        name=name,
        uid="",
        priority=priority,
        created_ms=created_ms,
        labels={"koordinator.sh/qosClass": "BE"},
        containers=[ContainerSpec("main", {BATCH_CPU: cpu}, {BATCH_CPU: cpu})],
    )


# --------------------------------------------------------------------------- wire shapes


@pytest.mark.parametrize("cache_capable", [True, False])
def test_extender_args_shape_matches_kube_scheduler(cache_capable):
    want = fixture_cases()["ExtenderArgs"]["json"]
    pod = PodRecord("default", "podname", "")
    node = NodeRecord("nodename")
    args = extender_args(pod, [node], cache_capable)
    assert list(args) == list(want) == ["Pod", "Nodes", "NodeNames"]
    assert "apiVersion" not in args["Pod"] and "kind" not in args["Pod"]  # no TypeMeta in the scheduler's cache
    assert args["Pod"]["metadata"]["name"] == want["Pod"]["metadata"]["name"]
    assert set(args["Pod"]) == set(want["Pod"]) == {"metadata", "spec", "status"}
    if cache_capable:
        assert args["Nodes"] is None and args["NodeNames"] == ["nodename"]
    else:
        assert args["NodeNames"] is None
        assert list(args["Nodes"]) == list(want["Nodes"]) == ["metadata", "items"]
        assert args["Nodes"]["metadata"] == {}
        item = args["Nodes"]["items"][0]
        assert item["metadata"]["name"] == want["Nodes"]["items"][0]["metadata"]["name"]
        assert set(item) == set(want["Nodes"]["items"][0])
    text = _go_json(args).decode()
    assert text.startswith('{"Pod":{"metadata":{"name":"podname"')
    assert ('"Nodes":null,"NodeNames":["nodename"]}' in text) == cache_capable
    assert text.endswith('"NodeNames":null}') != cache_capable


# --------------------------------------------------------------------------- scheduling cycles


@pytest.mark.parametrize("cache_capable", [True, False])
async def test_places_pods_like_kube_scheduler(cluster, extender, cache_capable):
    url, state = extender
    pod1 = await cluster.create_pod(batch_pod("p1", 2000))
    async with ExtenderScheduler(cluster, url, node_cache_capable=cache_capable, timeout_s=5) as sched:
        r1 = await sched.schedule_pod(pod1)
        assert r1.node == "sim-node-002" and not r1.error
        assert r1.reasons == {
            "sim-node-001": "blocked by label",
            "sim-node-003": "node(s) were unschedulable",
            "sim-node-004": "node(s) had untolerated taint {dedicated: gpu}",
            "sim-node-005": f"Insufficient {BATCH_CPU}",
        }
        # empty nodes: LeastAllocated ties, the extender's 2N x weight 1 x 10 decides
        assert r1.scores["sim-node-002"] - r1.scores["sim-node-000"] == 40
        assert (await cluster.get_pod("batch", "p1")).node_name == "sim-node-002"
        (v1, f_args, f_body), (v2, p_args, _) = state["requests"]
        assert (v1, v2) == ("filter", "prioritize")
        assert list(f_args) == ["Pod", "Nodes", "NodeNames"]
        assert f_body.startswith(b'{"Pod":{"metadata":{"name":"p1"')
        sent = f_args["NodeNames"] if cache_capable else [i["metadata"]["name"] for i in f_args["Nodes"]["items"]]
        assert sent == ["sim-node-000", "sim-node-001", "sim-node-002"]
        assert (f_args["Nodes"] is None) == cache_capable and (f_args["NodeNames"] is None) != cache_capable
        assert f_args["Pod"]["spec"]["containers"][0]["resources"]["requests"] == {BATCH_CPU: "2k"}
        p_sent = p_args["NodeNames"] if cache_capable else [i["metadata"]["name"] for i in p_args["Nodes"]["items"]]
        assert p_sent == ["sim-node-000", "sim-node-002"]

        # 7000 no longer fits on 002 (2000 used of 8000): one node left, prioritize is skipped
        state["requests"].clear()
        await cluster.create_pod(batch_pod("p2", 7000))
        [r2] = await sched.schedule_pending()
        assert r2.node == "sim-node-000" and r2.scores == {}
        assert [v for v, _, _ in state["requests"]] == ["filter"]
        assert r2.reasons["sim-node-002"] == f"Insufficient {BATCH_CPU}"

        # only the label-blocked node passes the in-tree filter; the extender removes it
        state["requests"].clear()
        await cluster.create_pod(batch_pod("p3", 7000))
        [r3] = await sched.schedule_pending()
        assert r3.node is None and not r3.error
        [(verb, args, _)] = state["requests"]
        sent = args["NodeNames"] if cache_capable else [i["metadata"]["name"] for i in args["Nodes"]["items"]]
        assert (verb, sent) == ("filter", ["sim-node-001"])
        assert r3.message == (
            f"0/6 nodes are available: 3 Insufficient {BATCH_CPU}, 1 blocked by label, "
            "1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable."
        )
        # nothing passes in-tree: the extender is not asked at all
        state["requests"].clear()
        p4 = await cluster.create_pod(batch_pod("p4", 9000))
        r4 = await sched.schedule_pod(p4)
        assert r4.node is None and state["requests"] == []
        assert r4.message == f"0/6 nodes are available: 4 Insufficient {BATCH_CPU}, 1 node(s) had untolerated taint " \
            "{dedicated: gpu}, 1 node(s) were unschedulable."
        assert (await cluster.get_pod("batch", "p3")).node_name is None


async def test_queue_order_and_in_tree_resources(cluster, extender):
    url, _ = extender
    await cluster.create_pod(batch_pod("low", 6000, priority=5000, created_ms=1))
    await cluster.create_pod(batch_pod("high", 6000, priority=5900, created_ms=2))
    await cluster.create_pod(batch_pod("high-late", 6000, priority=5900, created_ms=3))
    async with ExtenderScheduler(cluster, url) as sched:
        results = await sched.schedule_pending()
    assert [(r.name, r.node) for r in results] == [("high", "sim-node-002"), ("high-late", "sim-node-000"), ("low", None)]


async def test_weight_multiplies_extender_score(cluster, extender):
    url, _ = extender
    pod = await cluster.create_pod(batch_pod("w", 1000))
    async with ExtenderScheduler(cluster, url, weight=3) as sched:
        r = await sched.schedule_pod(pod)
    base = r.scores["sim-node-000"]
    assert r.scores["sim-node-002"] == base + 2 * 2 * 3 * 10  # score 4 x weight 3 x 10
    assert "stranger" not in r.scores


@pytest.mark.parametrize(
    "mode, ignorable, node, error",
    [
        ("error500", False, None, "failed filter with extender at URL {url}/filter, code 500"),
        ("error500", True, "sim-node-005", ""),  # ignorable: the filter is skipped, 001 comes back
        ("bothnull", False, None, ""),  # both null: every node filtered
        ("lower", False, "sim-node-005", ""),  # Go decodes keys case-insensitively
    ],
)
async def test_filter_failures(cluster, extender, mode, ignorable, node, error):
    url, state = extender
    state["filter"] = mode
    pod = await cluster.create_pod(batch_pod("f", 1000))
    async with ExtenderScheduler(cluster, url, ignorable=ignorable) as sched:
        r = await sched.schedule_pod(pod)
    assert r.node == node
    assert r.error == error.format(url=url.rstrip("/"))
    if node is not None:  # 1000m fits on 005 too, which scores highest (2 x 5)
        assert ("sim-node-001" in r.scores) == ignorable
    if mode == "bothnull":
        assert r.message.startswith("0/6 nodes are available:") and r.reasons["sim-node-000"] == "filtered by extender"


async def test_fixture_filter_result_decodes(cluster, extender):
    """The kube-scheduler compatibility JSON: its Error wins; without it, names must be known."""
    url, state = extender
    case = fixture_cases()["ExtenderFilterResult"]
    state["filter"] = "raw"
    nodes = [NodeRecord("node1"), NodeRecord("nodename")]
    async with ExtenderScheduler(cluster, url, node_cache_capable=True) as sched:
        pod = PodRecord("default", "podname", "")
        for text in (case["jsonText"], case["jsonText"].lower()):
            state["raw"] = text
            with pytest.raises(ExtenderError, match="myerror"):
                await sched.extender_filter(pod, nodes)
        no_error = dict(case["json"], Error="")
        state["raw"] = json.dumps(no_error)
        kept, failed, unresolvable = await sched.extender_filter(pod, nodes)
        assert [n.name for n in kept] == ["node1"]
        assert failed == {"foo": "bar"} and unresolvable == {"baz": "qux"}
        for names, error in ((["ghost"], 'claims a filtered node "ghost"'),
                             (["node1", 7], 'claims a filtered node "7"'),
                             (["node1", ["node1"]], "claims a filtered node"),
                             ("node1", "NodeNames is not an array"),
                             ({"node1": 1}, "NodeNames is not an array")):
            state["raw"] = json.dumps(dict(no_error, NodeNames=names))
            with pytest.raises(ExtenderError, match=error):
                await sched.extender_filter(pod, nodes)
    async with ExtenderScheduler(cluster, url, node_cache_capable=False) as sched:
        state["raw"] = json.dumps(dict(no_error, NodeNames=["ghost"]))
        kept, _, _ = await sched.extender_filter(pod, nodes)
        assert [n.name for n in kept] == ["nodename"]  # not cache-capable: Nodes.items are used


async def test_prioritize_errors_are_ignored(cluster, extender):
    url, state = extender
    state["prioritize"] = "error500"
    pod = await cluster.create_pod(batch_pod("p", 1000))
    async with ExtenderScheduler(cluster, url) as sched:
        r = await sched.schedule_pod(pod)
    assert r.node == "sim-node-000" and not r.error  # in-tree tie -> lowest name
    assert r.scores["sim-node-000"] == r.scores["sim-node-002"]


async def test_timeout_fails_the_attempt(cluster, extender):
    url, state = extender
    state["filter"], state["delay"] = "sleep", 0.6
    pod = await cluster.create_pod(batch_pod("t", 1000))
    async with ExtenderScheduler(cluster, url, timeout_s=0.2) as sched:
        t0 = time.monotonic()
        r = await sched.schedule_pod(pod)
    assert time.monotonic() - t0 < 0.55
    assert r.node is None and r.error.startswith("failed filter with extender at URL")


async def test_managed_resources_skip_uninterested_pods(cluster, extender):
    url, state = extender
    pod = await cluster.create_pod(
        PodRecord("default", "plain", "", containers=[ContainerSpec("c", {"cpu": 100}, {"cpu": 100})])
    )
    async with ExtenderScheduler(cluster, url, managed_resources=(BATCH_CPU,)) as sched:
        r = await sched.schedule_pod(pod)
    assert state["requests"] == []
    assert r.node == "sim-node-000"  # 001 not filtered: the extender was not asked


async def test_in_process_transport_carries_the_same_bytes(cluster):
    """Without HTTP: the transport gets each verb and the exact request body, and its reply is
    read as an HTTP reply would be."""
    seen: list[tuple[str, bytes]] = []

    async def transport(verb: str, body: bytes) -> tuple[int, bytes]:
        seen.append((verb, body))
        if verb == "filter":
            return 200, (
                b'{"Nodes":null,"NodeNames":["sim-node-000","sim-node-001"],"FailedNodes":{"sim-node-002":"busy"},'
                b'"FailedAndUnresolvableNodes":null,"Error":""}'
            )
        return 200, b'[{"Host":"sim-node-000","Score":0},{"Host":"sim-node-001","Score":10}]'

    pod = await cluster.create_pod(batch_pod("p1", 1000))
    async with ExtenderScheduler(cluster, "", transport=transport) as sched:
        r = await sched.schedule_pod(pod)
    assert r.node == "sim-node-001" and r.reasons["sim-node-002"] == "busy"
    assert [v for v, _ in seen] == ["filter", "prioritize"]
    by_name = {n.name: n for n in await cluster.list_nodes()}
    sent = [by_name[name] for name in json.loads(seen[0][1])["NodeNames"]]
    assert len(sent) > 2 and seen[0][1] == _go_json(extender_args(pod, sent, True))

    async def failing(verb: str, body: bytes) -> tuple[int, bytes]:
        return 500, b"boom"

    other = await cluster.create_pod(batch_pod("p2", 1000))
    async with ExtenderScheduler(cluster, "", transport=failing) as sched:
        r2 = await sched.schedule_pod(other)
    assert r2.node is None and "code 500" in r2.error


async def test_skip_dominated_tries_no_pod_asking_more_than_one_that_failed(cluster, extender):
    """Every node's batch room is 8000 at most: the 9000 pod fails; the 9500 and 10000 ones ask
    more and are not tried; the 1000 one is."""
    url, _ = extender
    for name, cpu, t in (("big", 9000, 1), ("bigger", 9500, 2), ("biggest", 10000, 3), ("small", 1000, 4)):
        await cluster.create_pod(batch_pod(name, cpu, created_ms=t))
    async with ExtenderScheduler(cluster, url, skip_dominated=True) as sched:
        results = {r.name: r for r in await sched.schedule_pending()}
    assert results["small"].node is not None
    assert results["big"].node is None and results["big"].message.startswith("0/6 nodes are available")
    assert "bigger" not in results and "biggest" not in results  # not tried
    async with ExtenderScheduler(cluster, url) as sched:  # without it every pod is tried, with the same outcome
        again = {r.name: r for r in await sched.schedule_pending()}
    assert {n: r.node for n, r in again.items()} == {"big": None, "bigger": None, "biggest": None}
    assert all(r.message.startswith("0/6 nodes are available") for r in again.values())
