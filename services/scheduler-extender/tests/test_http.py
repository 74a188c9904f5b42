"""The extender over real HTTP, driven as kube-scheduler drives it: POST, JSON body, 5 s timeout."""

import asyncio

import httpx
import orjson
import pytest
import uvicorn
from extender_helpers import T0, Gi, guaranteed, metric, node, pod_metric
from koordcommon.testing.fixtures import fixtures_dir
from koordcommon.testing.net import free_port
from scheduler_extender import api
from scheduler_extender.core import wire
from scheduler_extender.core.state import ClusterState

COMPAT = {
    c["type"]: c
    for c in orjson.loads((fixtures_dir() / "kube-scheduler.extender.v1.types_test.compat.json").read_bytes())["cases"]
}
NOW = T0 + 10_000


def cluster_state() -> ClusterState:
    """n-idle (10 %), n-busy (over the cpu threshold), n-stale (metric 200 s old), n-nometric."""
    st = ClusterState(clock=lambda: NOW)
    for name in ("n-idle", "n-busy", "n-stale", "n-nometric", "nodename"):
        st.apply_node(node(name))
    st.apply_metric(metric("n-idle", 3200, 8 * Gi))
    st.apply_metric(metric("n-busy", 20000, 8 * Gi, pods=[pod_metric("victim", 8000, 2 * Gi)]))
    st.apply_metric(metric("n-stale", 1000, 1 * Gi, ts=NOW - 200_000))
    st.apply_metric(metric("nodename", 1000, 1 * Gi))
    st.apply_pod(
        guaranteed("victim", 8000, 2 * Gi, node="n-busy", uid="victim-uid", start_ms=T0 - 600_000), initial=True
    )
    return st


@pytest.fixture
async def extender():
    st = cluster_state()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(api.create_app(st, "/scheduler"), host="127.0.0.1", port=port, log_config=None, lifespan="off")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/scheduler", timeout=5.0) as client:
        client.state = st
        yield client
    server.should_exit = True
    await task


POD = {
    "metadata": {"name": "web-0", "namespace": "default", "uid": "u-web-0"},
    "spec": {
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
            }
        ]
    },
    "status": {},
}
NAMES = ["n-idle", "n-busy", "n-stale", "n-nometric", "ghost"]
EXPECTED_FAILED = {
    "n-busy": "node(s) cpu usage exceed threshold",  # (20000 + 3400) / 32000 -> 73 %
    "n-stale": "node(s) nodeMetric expired",
    "ghost": "node(s) unknown to the extender: no node, NodeMetric or NodeResource seen for it",
}


def node_obj(name):
    # what kube-scheduler's encoding/json writes for a Node with zero-valued status parts
    return {"metadata": {"name": name}, "spec": {}, "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}}


async def post(client, verb, body: bytes):
    return await client.post(f"/{verb}", content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("cache_capable", [True, False])
async def test_filter_both_forms(extender, cache_capable):
    nodes = None if cache_capable else {"metadata": {}, "items": [node_obj(n) for n in NAMES]}
    names = NAMES if cache_capable else None
    r = await post(extender, "filter", wire.encode_extender_args(POD, nodes, names))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    res = wire.decode_filter_result(r.content)
    assert res.error == ""
    assert res.failed_nodes == EXPECTED_FAILED
    if cache_capable:
        assert res.node_names == ["n-idle", "n-nometric"] and res.nodes is None
    else:
        assert res.node_names is None
        assert res.nodes["items"] == [node_obj("n-idle"), node_obj("n-nometric")]
        # the scheduler's own node objects come back byte for byte
        assert orjson.dumps(node_obj("n-idle")) in r.content


@pytest.mark.parametrize("cache_capable", [True, False])
async def test_prioritize_both_forms(extender, cache_capable):
    names = ["n-idle", "n-nometric", "n-stale"]
    nodes = None if cache_capable else {"metadata": {}, "items": [node_obj(n) for n in names]}
    r = await post(extender, "prioritize", wire.encode_extender_args(POD, nodes, names if cache_capable else None))
    assert r.status_code == 200
    # n-idle: cpu (32000 - 6600) x 100 // 32000 = 79, memory (64Gi - 8Gi - 6012954214) // -> 78; (79 + 78) // 2 = 78 -> 10
    assert wire.decode_host_priority_list(r.content) == [("n-idle", 10), ("n-nometric", 0), ("n-stale", 0)]
    assert r.content.startswith(b'[{"Host":"n-idle","Score":10}')


async def test_fixture_args_are_accepted(extender):
    r = await post(extender, "filter", COMPAT["ExtenderArgs"]["jsonText"].encode())
    assert r.status_code == 200
    res = wire.decode_filter_result(r.content)
    # NodeNames (cache-capable form) wins; node1 is unknown here. The Nodes form is echoed too.
    assert res.node_names == [] and res.failed_nodes == {"node1": EXPECTED_FAILED["ghost"]}
    lower = await post(extender, "filter", COMPAT["ExtenderArgs"]["jsonText"].lower().encode())
    assert lower.status_code == 200 and wire.decode_filter_result(lower.content).failed_nodes == res.failed_nodes


async def test_preempt_keeps_nodes_where_victims_make_room(extender):
    meta = {"n-busy": wire.MetaVictims(["victim-uid"], 0), "n-stale": wire.MetaVictims(["whoever"], 1)}
    r = await post(extender, "preempt", wire.encode_preemption_args(POD, None, meta))
    assert r.status_code == 200
    got = wire.decode_preemption_result(r.content)
    # n-busy without the victim: (20000 - 8000 + 3400) / 32000 -> 48 %; n-stale's victim is unknown: kept
    assert got == meta
    # a victim that frees too little: the node is dropped
    small = guaranteed("small", 500, Gi, node="n-busy", uid="small-uid", start_ms=T0 - 600_000)
    extender.state.apply_pod(small, initial=True)
    r = await post(
        extender, "preempt", wire.encode_preemption_args(POD, None, {"n-busy": wire.MetaVictims(["small-uid"], 0)})
    )
    assert wire.decode_preemption_result(r.content) == {}
    # full victim pods (nodeCacheCapable false) are understood too
    victims = {"n-busy": wire.Victims([{"metadata": {"name": "victim", "uid": "victim-uid"}}], 0)}
    r = await post(extender, "preempt", wire.encode_preemption_args(POD, victims, None))
    assert wire.decode_preemption_result(r.content) == {"n-busy": wire.MetaVictims(["victim-uid"], 0)}


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
@pytest.mark.parametrize(
    "body, message",
    [
        (b"{not json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1,2]", "must be a JSON object"),
        (b'{"NodeNames":["n-idle"]}', "missing Pod"),
        (b'{"Pod":{},"NodeNames":["n-idle",7],"NodeNameToMetaVictims":{"n":{"Pods":"x"}}}', "must be an array"),
        (
            b'{"Pod":{"spec":{"containers":[{"resources":{"requests":{"cpu":"lots"}}}]}},"NodeNames":["n-idle"],"NodeNameToMetaVictims":{}}',
            "cpu",
        ),
    ],
)
async def test_bad_input_is_400_with_a_message(extender, verb, body, message):
    r = await post(extender, verb, body)
    assert r.status_code == 400
    assert message in r.json()["Error"]


async def test_wrong_method_is_not_a_server_error(extender):
    r = await extender.get("/filter")
    assert r.status_code == 405


async def test_internal_failure_answers_error_not_500(extender, monkeypatch):
    def boom(pod):
        raise RuntimeError("state exploded")

    monkeypatch.setattr(extender.state, "pod_info", boom)
    args = wire.encode_extender_args(POD, None, ["n-idle"])
    r = await post(extender, "filter", args)
    assert r.status_code == 200 and "state exploded" in wire.decode_filter_result(r.content).error
    r = await post(extender, "prioritize", args)
    assert r.status_code == 200 and r.content == b"[]"
    meta = {"n-busy": wire.MetaVictims(["victim-uid"], 0)}
    r = await post(extender, "preempt", wire.encode_preemption_args(POD, None, meta))
    assert r.status_code == 200 and wire.decode_preemption_result(r.content) == meta


async def test_many_nodes_one_request(extender):
    names = [f"ghost-{i}" for i in range(3000)] + ["n-idle"]
    r = await post(extender, "filter", wire.encode_extender_args(POD, None, names))
    res = wire.decode_filter_result(r.content)
    assert res.node_names == ["n-idle"] and len(res.failed_nodes) == 3000


async def test_every_reply_is_what_go_writes_for_the_same_values(extender, go_marshal):
    """Each reply path, as served, equals Go's json.Marshal of the values it carries: no stray
    whitespace, struct fields in order, map keys sorted, HTML-safe escaping."""
    odd = "n<&>\u2028"  # a name that needs Go's escaping; unknown to the extender, so it fails
    both = {"metadata": {"resourceVersion": "7"}, "items": [node_obj(n) for n in NAMES]}
    meta = {"n-busy": wire.MetaVictims(["victim-uid"], 0), "n-stale": wire.MetaVictims(["whoever"], 1)}
    calls = [
        ("filter", "ExtenderFilterResult", wire.encode_extender_args(POD, None, NAMES + [odd])),
        ("filter", "ExtenderFilterResult", wire.encode_extender_args(POD, both, None)),
        ("filter", "ExtenderFilterResult", wire.encode_extender_args(POD, both, NAMES)),
        ("filter", "ExtenderFilterResult", wire.encode_extender_args(POD, None, ["n-idle"])),  # every node passes
        ("filter", "ExtenderFilterResult", wire.encode_extender_args(POD, None, ["n-busy", "ghost"])),  # none does
        ("filter", "ExtenderFilterResult", wire.encode_extender_args(POD, None, [])),
        ("prioritize", "HostPriorityList", wire.encode_extender_args(POD, None, ["n-idle", "n-nometric", "n-stale", odd])),
        ("prioritize", "HostPriorityList", wire.encode_extender_args(POD, both, None)),
        ("prioritize", "HostPriorityList", wire.encode_extender_args(POD, None, [])),
        ("preempt", "ExtenderPreemptionResult", wire.encode_preemption_args(POD, None, meta)),
        ("preempt", "ExtenderPreemptionResult", wire.encode_preemption_args(POD, None, {})),
        ("preempt", "ExtenderBindingResult", b"{not json"),  # a 400's body: {"Error": ...}
    ]
    replies = [(kind, (await post(extender, verb, body)).content) for verb, kind, body in calls]
    assert go_marshal(replies) == [body for _, body in replies]
    # the internal-failure replies, written by the same encoders
    from scheduler_extender.api import _filter_error, _preempt_error, _prioritize_error

    failures = [
        ("ExtenderFilterResult", _filter_error(None, "scheduler-extender filter failed: <boom> & more")),
        ("HostPriorityList", _prioritize_error(None, "")),
        ("ExtenderPreemptionResult", _preempt_error(wire.ExtenderPreemptionArgs({}, None, meta), "")),
        ("ExtenderPreemptionResult", _preempt_error(None, "")),
    ]
    assert go_marshal(failures) == [body for _, body in failures]
