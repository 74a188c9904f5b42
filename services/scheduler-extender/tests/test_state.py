"""The assigned-pod cache: timestamps, assumed placements, moves, deletions, stale metrics."""

import pytest
from extender_helpers import T0, Gi, guaranteed, metric, node, pod_metric
from koordcommon.kube_codec import pod_to_k8s
from koordcommon.resources import Resources
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from scheduler_extender.core import wire
from scheduler_extender.core.extender import bind_request, filter_request, prioritize_request
from scheduler_extender.core.plugins.loadaware import NAME as LOAD_AWARE
from scheduler_extender.core.plugins.loadaware import AggregatedArgs, LoadAwareArgs, Thresholds
from scheduler_extender.core.state import ExtenderConfig
from test_loadaware import make_state


def load_of(st, name):
    return st.plugin(LOAD_AWARE).load(st.view(name))


def exist_cpu(st, name):
    return load_of(st, name).exist.cpu_milli


def rows_of_every_plugin(st, names):
    """Each column plugin's stored values for the nodes (what requests are judged by)."""
    st.flush()
    out = {}
    for p in st.plugins:
        if hasattr(p, "columns"):
            out[p.name] = [p.columns.row(st.rows[n]) for n in names]
    return out


def test_initial_pods_are_old_live_pods_are_fresh():
    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 10000, 8 * Gi, pods=[pod_metric("old", 1500, Gi), pod_metric("new", 1500, Gi)]))
    st.apply_pod(guaranteed("old", 4000, 8 * Gi, node="n", start_ms=T0 - 3_600_000), initial=True)
    st.apply_pod(guaranteed("new", 4000, 8 * Gi, node="n", start_ms=T0 - 3_600_000))  # seen bound now
    # only the live one is inside the window: 10000 + max(0, 3400 - 1500)
    assert load_of(st, "n").pending == ["default/new"]
    assert exist_cpu(st, "n") == 11900


def test_stale_metric_is_ignored():
    st = make_state()
    st.apply_node(node("n"))
    assert st.apply_metric(metric("n", 10000, Gi, ts=T0))
    assert not st.apply_metric(metric("n", 99999, Gi, ts=T0 - 1))
    assert exist_cpu(st, "n") == 10000


def test_assumed_pod_moves_to_where_it_was_bound_and_expires():
    st = make_state(ExtenderConfig(assume_ttl_s=30))
    for name in ("a", "b"):
        st.apply_node(node(name))
        st.apply_metric(metric(name, 1000, Gi))
    info = st.pod_info(guaranteed("p", 4000, 8 * Gi))
    st.assume(info, "a")
    assert exist_cpu(st, "a") == 4400 and exist_cpu(st, "b") == 1000
    st.apply_pod(guaranteed("p", 4000, 8 * Gi, node="b"))  # the scheduler chose b after all
    assert exist_cpu(st, "a") == 1000 and exist_cpu(st, "b") == 4400
    st.remove_pod("default/p")
    assert exist_cpu(st, "b") == 1000
    st.assume(st.pod_info(guaranteed("q", 4000, 8 * Gi)), "a")
    st.clock_box["now"] += 30_000
    st.prune()
    assert exist_cpu(st, "a") == 1000 and st.assumed == {}


def test_terminated_pod_leaves_its_node():
    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 1000, Gi))
    st.apply_pod(guaranteed("p", 4000, 8 * Gi, node="n"))
    assert exist_cpu(st, "n") == 4400
    st.apply_pod(guaranteed("p", 4000, 8 * Gi, node="n", phase="Succeeded"))
    assert exist_cpu(st, "n") == 1000


async def test_burst_bound_through_the_bind_verb_spreads_instead_of_flooding():
    """Ten identical pods bound one after another, none seen by the watch yet: each binding
    counts its pod on its node, so the next prioritize prefers another. (Prioritize alone
    counts nothing: test_steering.)"""
    sim = SimCluster(SimSpec(nodes=5, seed=3, speed=0, start_ms=T0, online_pods_per_node=0))
    await sim.start()
    try:
        st = make_state()
        names = sorted(n.name for n in await sim.list_nodes())
        for name in names:
            st.apply_node(node(name))
            st.apply_metric(metric(name, 8000, 8 * Gi))
        chosen = []
        for i in range(10):
            record = await sim.create_pod(guaranteed(f"w{i}", 4000, 8 * Gi, uid=f"u{i}"))
            pod = pod_to_k8s(record)
            args = wire.decode_extender_args(wire.encode_extender_args(pod, None, names))
            passed = wire.decode_filter_result(filter_request(st, args).body).node_names
            hp = wire.decode_host_priority_list(prioritize_request(st, wire.ExtenderArgs(pod, None, passed)).body)
            best = max(hp, key=lambda x: x[1])[0]
            reply = await bind_request(st, sim, wire.ExtenderBindingArgs(f"w{i}", "default", record.uid, best))
            assert reply == b'{"Error":""}'
            chosen.append(best)
        assert sorted(chosen.count(n) for n in names) == [2, 2, 2, 2, 2]
    finally:
        await sim.close()


def test_apply_many_computes_each_row_once_with_the_same_result():
    one, many = make_state(), make_state()
    nodes = [node(f"n{i}") for i in range(3)]
    pods = [guaranteed(f"p{i}", 1000, Gi, node=f"n{i % 3}", start_ms=T0 - 600_000) for i in range(9)]
    for n in nodes:
        one.apply_node(n)
    for p in pods:
        one.apply_pod(p, initial=True)
    many.apply_many(nodes=nodes, pods=pods)
    for st in (one, many):
        for i in range(3):
            st.apply_metric(metric(f"n{i}", 1000, Gi))
    names = ["n0", "n1", "n2"]
    assert rows_of_every_plugin(one, names) == rows_of_every_plugin(many, names)
    assert exist_cpu(many, "n0") == 1000 + 3 * 850


def test_profile_changes_the_estimate():
    from extender_helpers import rs_owner
    from scheduler_extender.core.estimator import WorkloadProfile

    st = make_state()
    p = guaranteed("web-5d4-x", 4000, 8 * Gi, labels={"pod-template-hash": "5d4"}, owners=[rs_owner("web-5d4")])
    assert st.pod_info(p).estimate == Resources(3400, 6012954214)
    st.apply_profile(("default", "Deployment", "web"), WorkloadProfile({"main": Resources(900, 3 * Gi)}))
    assert st.pod_info(p).estimate == Resources(900, 3 * Gi)


def test_raw_allocatable_annotation_overrides_allocatable():
    st = make_state()
    st.apply_node(node("n", annotations={"node.koordinator.sh/raw-allocatable": '{"cpu": 28, "memory": "32Gi"}'}))
    st.apply_node(node("bad", annotations={"node.koordinator.sh/raw-allocatable": "{oops"}))
    assert st.allocatable("n") == Resources(28000, 32 * Gi)
    assert st.allocatable("bad") == Resources(32000, 64 * Gi)


def test_reserve_pod_is_not_assumed():
    """The Reservation holds the room a reserve pod was placed in; assuming it would count it twice."""
    st = make_state(ExtenderConfig(assume_ttl_s=30))
    st.apply_node(node("a"))
    st.apply_metric(metric("a", 1000, Gi))
    reserve = guaranteed("reserve-p", 4000, 8 * Gi)
    reserve.annotations["scheduling.koordinator.sh/reserve-pod"] = "true"
    st.assume(st.pod_info(reserve), "a")
    assert exist_cpu(st, "a") == 1000 and st.assumed == {}


MOVE_CONFIGS = [
    ExtenderConfig(),
    ExtenderConfig(load=LoadAwareArgs(prod_usage_thresholds=Thresholds(60, 90), score_according_prod_usage=True)),
    ExtenderConfig(load=LoadAwareArgs(aggregated=AggregatedArgs(Thresholds(70, 90), "p95", 0, "p90", 1800))),
]


@pytest.mark.parametrize("config", MOVE_CONFIGS)
def test_assumed_placements_moved_around_end_where_they_were_last_put(config):
    """Assume, move and re-assume pods (prod, batch, one the metric already reports): every
    plugin's row equals that of a state where each pod was put once on its last node."""
    from extender_helpers import pod
    from koordcommon.model import PriorityClass
    from test_batch_reservation import BATCH_LABELS

    def state():
        st = make_state(config)
        batch_alloc = {"koordinator.sh/batch-cpu": 10000, "koordinator.sh/batch-memory": 20 * Gi}
        for name in ("a", "b", "c"):
            st.apply_node(node(name, extra=batch_alloc))
        st.apply_metric(metric("a", 9000, 20 * Gi, pods=[pod_metric("seen", 1500, Gi, cls=PriorityClass.PROD)]))
        st.apply_metric(metric("b", 3000, 8 * Gi))
        web = st.pod_info(guaranteed("web", 4000, 8 * Gi, priority=9500))
        job = st.pod_info(pod("job", labels=BATCH_LABELS, priority=5000, extra_requests={"koordinator.sh/batch-cpu": 3000}))
        seen = st.pod_info(guaranteed("seen", 2000, 2 * Gi))  # the metric of a reports it already
        return st, web, job, seen

    moved, web, job, seen = state()
    for info, where in ((web, "a"), (job, "a"), (seen, "a"), (web, "b"), (job, "c"), (web, "b"), (seen, "b"), (job, "a")):
        moved.assume(info, where)
    assert web.is_prod and not job.is_prod and job.batch == Resources(3000, 0)
    direct, web, job, seen = state()
    for info, where in ((web, "b"), (seen, "b"), (job, "a")):
        direct.assume(info, where)
    assert rows_of_every_plugin(moved, "abc") == rows_of_every_plugin(direct, "abc")
    # and the moves did something: web's estimate sits on b, job's batch request on a
    assert exist_cpu(moved, "b") == 3000 + 3400 + 1700
    moved.flush()
    assert moved.plugin("BatchMidFit").columns.row(moved.rows["a"])["batch_free_cpu"] == 10000 - 3000


def test_removed_node_fails_as_unknown_until_it_comes_back():
    from scheduler_extender.core.extender import filter_nodes
    from scheduler_extender.core.plugins.known import REASON_UNKNOWN

    st = make_state()
    for name in ("a", "b"):
        st.apply_node(node(name))
        st.apply_metric(metric(name, 1000, Gi))
    info = st.pod_info(guaranteed("p", 1000, Gi))
    outcome = filter_nodes(st, info, ["a", "b"])
    assert outcome.passed.tolist() == [0, 1] and outcome.failed(["a", "b"]) == {}
    st.remove_node("a")
    outcome = filter_nodes(st, info, ["a", "b"])
    assert outcome.passed.tolist() == [1] and outcome.failed(["a", "b"]) == {"a": REASON_UNKNOWN}
    assert outcome.rejected[0].plugin == "NodeKnown"
    st.apply_node(node("a"))
    outcome = filter_nodes(st, info, ["a", "b"])
    assert outcome.passed.tolist() == [0, 1]


def test_every_input_of_a_pod_counts_in_its_numbers():
    """A pod that differs from another in any single input gets its own numbers, in a state
    that judged the other one before (what is kept per pod is kept by uid and version)."""
    from dataclasses import replace

    from extender_helpers import pod, rs_owner
    from koordcommon.records import ContainerSpec, OwnerRef
    from scheduler_extender.core.estimator import WorkloadProfile

    main = ContainerSpec("main", {"cpu": 2000, "memory": Gi}, {"cpu": 4000})
    base = pod("web-5d4-a", labels={"pod-template-hash": "5d4"}, owners=[rs_owner("web-5d4")], containers=[main])
    one_change = {
        "requests": {"containers": [ContainerSpec("main", {"cpu": 3000, "memory": Gi}, {"cpu": 4000})]},
        "limits": {"containers": [ContainerSpec("main", {"cpu": 2000, "memory": Gi}, {"cpu": 4000, "memory": 2 * Gi})]},
        "container name": {"containers": [ContainerSpec("side", main.requests, main.limits)]},
        "batch request": {"containers": [ContainerSpec("main", {"koordinator.sh/batch-cpu": 1000}, {})]},
        "init container": {"init_containers": [ContainerSpec("init", {"cpu": 8000}, {})]},
        "overhead": {"overhead": {"cpu": 500}},
        "priority": {"priority": 5500},
        "priority-class label": {"labels": {**base.labels, "koordinator.sh/priority-class": "koord-batch"}},
        "qos label": {"labels": {**base.labels, "koordinator.sh/qosClass": "BE"}},
        "status qosClass": {"kube_qos": "BestEffort"},
        "owner": {"owners": [OwnerRef("DaemonSet", "agent")]},
        "workload": {"labels": {}, "owners": [rs_owner("webapp")]},  # a ReplicaSet that is no Deployment's
        "reservation affinity": {"annotations": {"scheduling.koordinator.sh/reservation-affinity": '{"name": "h"}'}},
    }
    fields = ("estimate", "is_prod", "request", "batch", "daemonset", "reservation_affinity")

    def numbers(info):
        return [getattr(info, f) for f in fields]

    profile_only = {"container name", "workload"}  # they matter through the profile alone

    def state(with_profile):
        st = make_state()
        if with_profile:
            st.apply_profile(("default", "Deployment", "web"), WorkloadProfile({"main": Resources(900, 3 * Gi)}))
        return st

    for with_profile in (False, True):
        shared = state(with_profile)
        for i, (what, change) in enumerate(one_change.items()):
            variant = replace(base, name=f"web-5d4-{i}", uid=f"uid-{i}", **change)
            fresh = state(with_profile)
            want, base_numbers = numbers(fresh.pod_info(variant)), numbers(fresh.pod_info(base))
            assert (want != base_numbers) is (with_profile or what not in profile_only), what  # the input matters
            assert numbers(shared.pod_info(base)) == base_numbers
            assert numbers(shared.pod_info(variant)) == want, what


def _pod_json(cpu: str, uid: str = "u1", rv: str | None = "1") -> dict:
    meta = {"name": "w", "namespace": "default", "uid": uid}
    if rv is not None:
        meta["resourceVersion"] = rv
    res = {"cpu": cpu, "memory": "1Gi"}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "resources": {"requests": res, "limits": res}}]}}


@pytest.mark.parametrize("second, rv2, passes", [
    # the same uid and resourceVersion are the same pod (Kubernetes changes the version on every
    # change): the earlier judgement stands whatever the body says
    ("64", "1", ["n"]),
    ("64", "2", []),  # a new version (the API server changes resourceVersion on every change): judged anew
])
def test_a_pod_version_is_judged_once(second, rv2, passes):
    from scheduler_extender.core.extender import judged_pod

    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 1000, Gi))
    first = judged_pod(st, _pod_json("1"))
    assert first.request.cpu_milli == 1000
    args = wire.ExtenderArgs(_pod_json(second, rv=rv2), None, ["n"])
    assert wire.decode_filter_result(filter_request(st, args).body).node_names == passes
    # without a resourceVersion nothing is reused
    assert judged_pod(st, _pod_json("2", rv=None)).request.cpu_milli == 2000


def _with(p, **changes):
    from dataclasses import replace

    return replace(p, **changes)


def test_a_judged_pod_is_known_to_bind_until_the_watch_shows_it_bound():
    """The verbs derive a pending pod's PodInfo once; bind finds it by uid however many pods the
    watch reports in between (the whole cache was once emptied after 4,096 pods, so in a busy
    cluster bind lost the pod it had just filtered: no exclusive CPUs for an LSR pod, nothing
    assumed). A profile change in between makes its estimate derived again, not the pod lost."""
    from extender_helpers import rs_owner
    from scheduler_extender.core.estimator import WorkloadProfile

    st = make_state()
    st.apply_node(node("n", cpu=10**7, mem=10**5 * Gi))
    web = _with(guaranteed("web-5d4-x", 4000, 8 * Gi, phase="Pending", labels={"pod-template-hash": "5d4"},
                           owners=[rs_owner("web-5d4")]), resource_version="1")
    judged = st.pod_info(web)
    for i in range(5000):
        st.apply_pod(_with(guaranteed(f"p{i}", 10, Gi, node="n"), resource_version="2"))
    assert st.known_pod_by_uid(web.uid) is judged
    assert st.known_pod_info(web.uid, "1") is judged and st.known_pod_info(web.uid, "0") is None
    assert len(st._pod_cache) == 1  # bound pods the watch reports are not kept for the verbs
    st.apply_profile(("default", "Deployment", "web"), WorkloadProfile({"main": Resources(900, 3 * Gi)}))
    assert st.known_pod_info(web.uid, "1") is None  # its estimate is stale
    assert st.known_pod_by_uid(web.uid).estimate == Resources(900, 3 * Gi)
    st.apply_pod(_with(web, node_name="n", phase="Running", resource_version="3"))  # the watch shows it bound
    assert st.known_pod_by_uid(web.uid) is None and "default/web-5d4-x" in st.pods


@pytest.mark.parametrize(
    "event, forgotten",
    [
        ("deleted", True),  # the watch's DELETED event
        ("succeeded", True),  # ended: never judged again
        ("deletion requested", True),
        ("still pending", False),  # a newer version while pending: kube-scheduler will judge it again
    ],
)
def test_a_pending_pod_is_forgotten_when_it_ends(event, forgotten):
    from koordcommon.cluster.port import ClusterEvent
    from scheduler_extender import feeds

    st = make_state()
    web = _with(guaranteed("web", 4000, 8 * Gi, phase="Pending"), resource_version="1")
    st.pod_info(web)
    if event == "deleted":
        feeds.apply_event(st, ClusterEvent("DELETED", "Pod", web))
    elif event == "succeeded":
        st.apply_pod(_with(web, phase="Succeeded", resource_version="2"))
    elif event == "deletion requested":
        st.apply_pod(_with(web, deletion_ms=T0, resource_version="2"))
    else:
        st.apply_pod(_with(web, resource_version="2"))
    assert (st.known_pod_by_uid(web.uid) is None) is forgotten


def test_pods_judged_and_never_seen_again_go_oldest_first(monkeypatch):
    from scheduler_extender.core import state as state_module

    monkeypatch.setattr(state_module, "POD_CACHE_MAX", 8)
    st = make_state()
    pods = [_with(guaranteed(f"w{i}", 100, Gi, phase="Pending"), resource_version="1") for i in range(9)]
    for p in pods[:8]:
        st.pod_info(p)
    st.pod_info(pods[0])  # judged again: the newest now
    st.pod_info(pods[8])  # the 9th: the oldest quarter (2) go
    assert [p.name for p in pods if st.known_pod_by_uid(p.uid) is not None] == ["w0", "w3", "w4", "w5", "w6", "w7", "w8"]
