"""Batch fit and Reservation tables."""

import pytest
from extender_helpers import T0, Gi, guaranteed, metric, node, pod, pod_metric
from koordcommon.records import OwnerRef
from koordcommon.resources import Resources
from koordcommon.schemas import NodeResource
from scheduler_extender.core import reservation as rsv
from scheduler_extender.core.extender import filter_nodes, score_nodes
from test_loadaware import make_state, reason

BATCH_LABELS = {"koordinator.sh/qosClass": "BE"}


def batch_pod(name, cpu, mem=0, prefix="koordinator.sh/", node_name=None):
    extra = {f"{prefix}batch-cpu": cpu}
    if mem:
        extra[f"{prefix}batch-memory"] = mem
    return pod(name, labels=BATCH_LABELS, priority=5000, extra_requests=extra, node=node_name, start_ms=T0 - 600_000)


@pytest.mark.parametrize(
    "want_cpu, want_mem, prefix, expected",
    [
        (4000, 0, "koordinator.sh/", "pass"),  # 10000 - 6000 = 4000 left: exactly fits
        (4001, 0, "koordinator.sh/", "node(s) Insufficient koordinator.sh/batch-cpu"),
        (1000, 17 * Gi, "koordinator.sh/", "node(s) Insufficient koordinator.sh/batch-memory"),  # 20Gi - 4Gi = 16Gi
        (5000, 0, "kubernetes.io/", "node(s) Insufficient kubernetes.io/batch-cpu"),
        (3000, 16 * Gi, "kubernetes.io/", "pass"),
    ],
)
def test_batch_fit(want_cpu, want_mem, prefix, expected):
    st = make_state()
    st.apply_node(node("n", extra={"koordinator.sh/batch-cpu": 10000, "koordinator.sh/batch-memory": 20 * Gi}))
    st.apply_metric(metric("n", 1000, 1 * Gi))
    st.apply_pod(batch_pod("running", 6000, 4 * Gi, node_name="n"), initial=True)
    assert reason(st, batch_pod("new", want_cpu, want_mem, prefix)) == expected


def test_batch_fit_prefers_node_resource_and_degraded_means_none():
    st = make_state()
    st.apply_node(node("n", extra={"koordinator.sh/batch-cpu": 10000}))
    st.apply_metric(metric("n", 1000, 1 * Gi))
    p = batch_pod("new", 12000)
    assert reason(st, p) == "node(s) Insufficient koordinator.sh/batch-cpu"
    st.apply_node_resource(NodeResource(node="n", ts=T0, batch=Resources(15000, 30 * Gi)))
    assert reason(st, p) == "pass"
    st.apply_node_resource(NodeResource(node="n", ts=T0 + 1, batch=None, degraded=True))
    assert reason(st, batch_pod("small", 1)) == "node(s) Insufficient koordinator.sh/batch-cpu"


def mid_pod(name, cpu, mem=0, node_name=None):
    extra = {"koordinator.sh/mid-cpu": cpu}
    if mem:
        extra["koordinator.sh/mid-memory"] = mem
    return pod(name, priority=7500, extra_requests=extra, node=node_name, start_ms=T0 - 600_000)


@pytest.mark.parametrize(
    "want_cpu, want_mem, expected",
    [
        (5000, 0, "pass"),  # NodeResource mid 8000 - 3000 running = 5000 left: exactly fits
        (5001, 0, "node(s) Insufficient koordinator.sh/mid-cpu"),
        (1000, 7 * Gi, "node(s) Insufficient koordinator.sh/mid-memory"),  # 8Gi - 2Gi = 6Gi
        (1000, 6 * Gi, "pass"),
    ],
)
def test_mid_fit_against_the_latest_node_resource(want_cpu, want_mem, expected):
    st = make_state()
    st.apply_node(node("n", extra={"koordinator.sh/mid-cpu": 1000}))  # the status lags behind
    st.apply_metric(metric("n", 1000, 1 * Gi))
    st.apply_node_resource(NodeResource(node="n", ts=T0, batch=Resources(0, 0), mid=Resources(8000, 8 * Gi)))
    st.apply_pod(mid_pod("running", 3000, 2 * Gi, node_name="n"), initial=True)
    assert reason(st, mid_pod("new", want_cpu, want_mem)) == expected


def test_non_batch_pod_ignores_batch_room():
    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 1000, 1 * Gi))
    assert reason(st, guaranteed("prod", 1000, Gi)) == "pass"


# --------------------------------------------------------------------------- owners (Koordinator's TestMatchReservationOwners)


def _res(owners):
    return rsv.Reservation(name="r", node="n", allocatable=Resources(4000, 8 * Gi), owners=owners)


@pytest.mark.parametrize(
    "p, owners, expected",
    [
        (pod("x"), [], False),
        (pod("test-pod-0", ns="test"), [rsv.Owner(object={"name": "test-pod-0", "namespace": "test"})], True),
        (
            pod("test-sts-0-0", ns="test", owners=[OwnerRef(kind="StatefulSet", name="test-sts-0", controller=True)]),
            [rsv.Owner(controller={"name": "test-sts-0", "controller": True, "namespace": "test"})],
            True,
        ),
        (pod("p", labels={"aaa": "bbb", "ccc": "ddd"}), [rsv.Owner(selector=rsv.parse_selector({"matchLabels": {"aaa": "bbb"}}))], True),
        (
            pod("test-pod-1", labels={"aaa": "bbb", "ccc": "ddd"}),
            [rsv.Owner(object={"name": "test-pod-2"}, selector=rsv.parse_selector({"matchLabels": {"aaa": "bbb", "xxx": "yyy"}}))],
            False,
        ),
        (
            pod("test-pod-2", labels={"aaa": "bbb", "ccc": "ddd"}),
            [rsv.Owner(object={"name": "test-pod-0"}), rsv.Owner(selector=rsv.parse_selector({"matchLabels": {"aaa": "bbb"}}))],
            True,
        ),
        (pod("anything"), [rsv.Owner()], True),  # owners == [{}] matches everything
        (pod("opted-out", labels={rsv.LABEL_RESERVATION_IGNORED: "true"}), [rsv.Owner()], False),
    ],
)
def test_match_reservation_owners(p, owners, expected):
    assert _res(owners).matches(p) is expected


def test_parse_reservation_and_expiry():
    obj = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "web-hold", "uid": "r-1", "creationTimestamp": "2023-11-14T22:13:20Z"},
        "spec": {
            "template": {
                "spec": {
                    "nodeName": "n",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "8", "memory": "16Gi"}}}],
                }
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            "ttl": "1h",
        },
    }
    r = rsv.parse_reservation(obj)
    assert (r.node, r.allocatable, r.allocate_once, r.ttl_ms) == ("n", Resources(8000, 16 * Gi), True, 3_600_000)
    created = 1_700_000_000_000
    assert r.created_ms == created
    assert r.active(created + 3_600_000) and not r.active(created + 3_600_001)
    with_expires = dict(obj, spec={**obj["spec"], "expires": "2023-11-14T22:43:20Z"})
    assert rsv.parse_reservation(with_expires).active(created + 1_800_000)
    assert not rsv.parse_reservation(with_expires).active(created + 1_800_001)
    never = dict(obj, spec={**obj["spec"], "ttl": "0"})
    assert rsv.parse_reservation(never).active(created + 10 * 86_400_000)
    with pytest.raises(ValueError):
        rsv.parse_reservation({"metadata": {}})


def _reservation_obj(
    name="web-hold", node_name="n", cpu="8", mem="16Gi", ttl="1h", created="2023-11-14T22:13:20Z", **spec
):
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {
            "template": {
                "spec": {
                    "nodeName": node_name,
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
                }
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            "ttl": ttl,
            **spec,
        },
    }


CREATED = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def reservation_state(**spec):
    """Node n: 32 cores, 20 of them requested by a running pod, 8 held by reservation web-hold."""
    st = make_state(now=CREATED + 60_000)
    for name in ("n", "m"):
        st.apply_node(node(name))
    # the running pod is in n's metric, so load checks leave n alone: only room is judged
    st.apply_metric(metric("n", 3000, 3 * Gi, ts=CREATED, pods=[pod_metric("big", 2000, 2 * Gi)]))
    st.apply_metric(metric("m", 1000, 1 * Gi, ts=CREATED))
    st.apply_pod(guaranteed("big", 20000, 8 * Gi, node="n", start_ms=CREATED - 600_000), initial=True)
    st.apply_reservation(_reservation_obj(**spec))
    return st


WEB = {"app": "web"}


@pytest.mark.parametrize(
    "p, expected",
    [
        # 32 - 20 - 8 held = 4 cores for everyone else
        (guaranteed("other4", 4000, Gi), "pass"),
        (guaranteed("other6", 6000, Gi), "node(s) Insufficient cpu (held by reservations)"),
        # an owner may use the reservation's room as well: 32 - 20 = 12
        (guaranteed("web6", 6000, Gi, labels=WEB), "pass"),
        (guaranteed("web12", 12000, Gi, labels=WEB), "pass"),
        (guaranteed("web13", 13000, Gi, labels=WEB), "node(s) Insufficient cpu (reservation room)"),
    ],
)
def test_reservation_filter(p, expected):
    st = reservation_state()
    assert reason(st, p) == expected


def test_restricted_reservation_holds_owner_inside_it():
    st = reservation_state(allocatePolicy="Restricted")
    assert reason(st, guaranteed("web8", 8000, Gi, labels=WEB)) == "pass"
    assert reason(st, guaranteed("web10", 10000, Gi, labels=WEB)) == "Reservation(s) Insufficient cpu"


def test_expired_reservation_is_released():
    st = reservation_state(ttl="1h")
    p = guaranteed("other6", 6000, Gi)
    assert reason(st, p) != "pass"
    st.clock_box["now"] = CREATED + 3_600_001
    st.apply_metric(metric("n", 3000, 3 * Gi, ts=CREATED + 3_600_000, pods=[pod_metric("big", 2000, 2 * Gi)]))
    st.prune()
    assert not any(r.active(CREATED + 3_600_001) for r in st.node_reservations("n"))
    assert reason(st, p, now=CREATED + 3_600_001) == "pass"


def test_owner_is_steered_then_consumes_the_reservation():
    st = reservation_state()
    web = guaranteed("web6", 6000, Gi, labels=WEB)
    mapped = score_nodes(st, st.pod_info(web), ["m", "n"]).mapped
    assert mapped.tolist() == [0, 10]  # m is emptier, but n holds the pod's reservation
    other = guaranteed("other6", 6000, Gi)
    mapped = score_nodes(st, st.pod_info(other), ["m", "n"]).mapped
    assert mapped[0] == 10  # non-owners are scored by load only
    # bound: allocateOnce -> Succeeded; its room is no longer held, the pod's request counts instead
    st.apply_pod(guaranteed("web6", 6000, Gi, labels=WEB, node="n"))
    r = st.reservations["web-hold"]
    assert (r.phase, r.current_owners, r.allocated) == ("Succeeded", ["default/web6"], Resources(6000, Gi))
    # nothing is held any more: plain request fit (32 - 26 = 6 cores) is kube-scheduler's own check
    assert not any(r.active(st.clock()) for r in st.node_reservations("n"))
    assert reason(st, guaranteed("other6b", 6000, Gi)) == "pass"


def test_reservation_affinity_requires_a_matching_reservation():
    st = reservation_state()
    affine = guaranteed(
        "web2", 2000, Gi, labels=WEB, annotations={rsv.ANNOTATION_RESERVATION_AFFINITY: '{"name":"web-hold"}'}
    )
    outcome = filter_nodes(st, st.pod_info(affine), ["m", "n"])
    assert outcome.passed.tolist() == [1]
    assert outcome.unresolvable(["m", "n"]) == {"m": "node(s) didn't match the pod's reservation affinity"}


def test_reservation_node_full_by_requests_says_so():
    st = reservation_state()
    # 32 - 20 = 12 cores without the reservation: 13 does not fit either way
    assert reason(st, guaranteed("other13", 13000, Gi)) == "node(s) Insufficient cpu"
