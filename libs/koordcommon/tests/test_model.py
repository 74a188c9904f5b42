"""The priority/QoS model (model.py) and the pod/node records (records.py)."""

from __future__ import annotations

import pytest
from koordcommon.model import (
    LABEL_PRIORITY,
    LABEL_PRIORITY_CLASS,
    LABEL_QOS_CLASS,
    KubeQoS,
    PriorityClass,
    QoSClass,
    combination_error,
    is_hp,
    is_prod,
    is_valid_combination,
    priority_class,
    priority_class_from_value,
    qos_class,
    qos_from_kube,
    raw_priority_class,
    sub_priority,
)
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord
from koordcommon.resources import Resources

P, M, B, F, N = PriorityClass.PROD, PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE, PriorityClass.NONE
GI = 2**30


@pytest.mark.parametrize(
    "value,cls",
    [
        (None, N),
        (0, N),
        (-1, N),
        (2999, N),
        (3000, F),
        (3500, F),
        (3999, F),
        (4000, N),
        (4999, N),
        (5000, B),
        (5999, B),
        (6000, N),
        (6999, N),
        (7000, M),
        (7999, M),
        (8000, N),
        (8999, N),
        (9000, P),
        (9500, P),
        (9999, P),
        (10000, N),
        (2_000_000_000, N),
    ],
)
def test_priority_bands(value, cls):
    assert priority_class_from_value(value) is cls


@pytest.mark.parametrize(
    "labels,priority,raw",
    [
        ({}, 9000, P),
        ({LABEL_PRIORITY_CLASS: "koord-batch"}, 9000, B),  # the label wins over the value
        ({LABEL_PRIORITY_CLASS: "koord-free"}, None, F),
        ({LABEL_PRIORITY_CLASS: "gold"}, 9000, N),  # an unknown label value is none, no fallback
        ({LABEL_PRIORITY_CLASS: ""}, 5000, N),
        (None, 7000, M),
        (None, None, N),
    ],
)
def test_raw_priority_class(labels, priority, raw):
    assert raw_priority_class(labels, priority) is raw


@pytest.mark.parametrize(
    "labels,priority,qos,cls",
    [
        ({}, None, QoSClass.LS, P),  # a normal Kubernetes pod is prod
        ({}, None, QoSClass.BE, B),  # ... unless it is BE (GetPodPriorityClassWithDefault)
        ({}, 0, QoSClass.LSR, P),
        ({}, 10000, QoSClass.BE, B),
        ({}, 2999, QoSClass.SYSTEM, P),
        ({}, 5500, QoSClass.LSR, B),  # an explicit band is kept whatever the QoS
        ({LABEL_PRIORITY_CLASS: "koord-mid"}, 9999, QoSClass.BE, M),
    ],
)
def test_priority_class_with_default(labels, priority, qos, cls):
    assert priority_class(labels, priority, qos) is cls


@pytest.mark.parametrize(
    "labels,kube,qos",
    [
        ({}, KubeQoS.GUARANTEED, QoSClass.LSR),
        ({}, KubeQoS.BURSTABLE, QoSClass.LS),
        ({}, KubeQoS.BEST_EFFORT, QoSClass.BE),
        ({}, "Guaranteed", QoSClass.LSR),
        ({}, None, QoSClass.NONE),
        ({LABEL_QOS_CLASS: "LSE"}, KubeQoS.BEST_EFFORT, QoSClass.LSE),
        ({LABEL_QOS_CLASS: "BE"}, KubeQoS.GUARANTEED, QoSClass.BE),
        ({LABEL_QOS_CLASS: "SYSTEM"}, KubeQoS.BURSTABLE, QoSClass.SYSTEM),
        ({LABEL_QOS_CLASS: "be"}, KubeQoS.GUARANTEED, QoSClass.LSR),  # case matters: invalid label ignored
        ({LABEL_QOS_CLASS: "gold"}, KubeQoS.BURSTABLE, QoSClass.LS),
    ],
)
def test_qos_class(labels, kube, qos):
    assert qos_class(labels, kube) is qos


def test_qos_from_kube_unknown_is_none():
    assert qos_from_kube("Platinum") is QoSClass.NONE


_ALL_QOS = [QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS, QoSClass.BE]
_VALID = {
    P: {QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS},
    M: {QoSClass.SYSTEM, QoSClass.LS, QoSClass.BE},
    B: {QoSClass.SYSTEM, QoSClass.LS, QoSClass.BE},
    F: {QoSClass.SYSTEM, QoSClass.LS, QoSClass.BE},
    N: {QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS},  # judged as prod
}


@pytest.mark.parametrize("cls", [P, M, B, F, N])
@pytest.mark.parametrize("qos", _ALL_QOS)
def test_valid_combinations(cls, qos):
    valid = qos in _VALID[cls]
    assert is_valid_combination(cls, qos) is valid
    err = combination_error(cls, qos)
    assert (err is None) is valid
    if err:
        assert qos.value in err and "allowed" in err


def test_no_qos_label_is_always_valid():
    assert all(is_valid_combination(c, QoSClass.NONE) for c in PriorityClass)


def test_combination_error_message():
    assert combination_error(P, QoSClass.BE) == (
        "priority class koord-prod cannot be combined with QoS class BE; allowed: LS, LSE, LSR or SYSTEM"
    )
    assert combination_error(N, QoSClass.BE).startswith("priority class none (prod) cannot")


@pytest.mark.parametrize("cls,hp", [(P, True), (M, True), (N, True), (B, False), (F, False)])
def test_is_hp(cls, hp):
    assert is_hp(cls) is hp
    assert is_hp(cls.value) is hp  # NodeMetric pod entries carry the string


@pytest.mark.parametrize("cls,prod", [(P, True), (M, False), (N, True), (B, False), (F, False)])
def test_is_prod(cls, prod):
    assert is_prod(cls) is prod
    assert is_prod(cls.value) is prod


@pytest.mark.parametrize("value,expect", [(None, None), ("5", 5), ("-3", -3), ("x", None), ("1.5", None)])
def test_sub_priority(value, expect):
    labels = {} if value is None else {LABEL_PRIORITY: value}
    assert sub_priority(labels) == expect


# records ------------------------------------------------------------------------------


def _c(name="c", req=None, lim=None) -> ContainerSpec:
    return ContainerSpec(name, dict(req or {}), dict(lim or {}))


@pytest.mark.parametrize(
    "containers,init,overhead,requests",
    [
        ([_c(req={"cpu": 100, "memory": GI})], [], {}, {"cpu": 100, "memory": GI}),
        ([_c(req={"cpu": 100}), _c(req={"cpu": 200, "memory": 5})], [], {}, {"cpu": 300, "memory": 5}),
        # an init container bigger than the sum wins per resource
        ([_c(req={"cpu": 100, "memory": GI})], [_c(req={"cpu": 2000, "memory": 1})], {}, {"cpu": 2000, "memory": GI}),
        # init containers run one at a time: the max of them, not their sum
        ([_c(req={"cpu": 100})], [_c(req={"cpu": 500}), _c(req={"cpu": 700})], {}, {"cpu": 700}),
        # overhead is added after the max
        ([_c(req={"cpu": 100})], [_c(req={"cpu": 500})], {"cpu": 50, "memory": 10}, {"cpu": 550, "memory": 10}),
        ([], [], {}, {}),
        ([_c(req={"kubernetes.io/batch-cpu": 1000})], [], {}, {"kubernetes.io/batch-cpu": 1000}),
    ],
)
def test_pod_requests(containers, init, overhead, requests):
    pod = PodRecord("ns", "p", "u", containers=containers, init_containers=init, overhead=overhead)
    assert pod.requests() == requests
    assert pod.request_resources() == Resources(requests.get("cpu", 0), requests.get("memory", 0))


@pytest.mark.parametrize(
    "containers,init,overhead,limits",
    [
        ([_c(lim={"cpu": 100}), _c(lim={"cpu": 100, "memory": GI})], [], {}, {"cpu": 200, "memory": GI}),
        ([_c(lim={"cpu": 100})], [_c(lim={"cpu": 300})], {}, {"cpu": 300}),
        # Kubernetes PodLimits: overhead only adds to limits that are set
        ([_c(lim={"cpu": 100})], [], {"cpu": 50, "memory": 10}, {"cpu": 150}),
        ([_c()], [], {"cpu": 50}, {}),
    ],
)
def test_pod_limits(containers, init, overhead, limits):
    pod = PodRecord("ns", "p", "u", containers=containers, init_containers=init, overhead=overhead)
    assert pod.limits() == limits


@pytest.mark.parametrize(
    "containers,init,kube",
    [
        ([_c()], [], KubeQoS.BEST_EFFORT),
        ([_c(req={"kubernetes.io/batch-cpu": 1000}, lim={"kubernetes.io/batch-cpu": 1000})], [], KubeQoS.BEST_EFFORT),
        ([_c(req={"cpu": 0})], [], KubeQoS.BEST_EFFORT),
        ([_c(req={"cpu": 100, "memory": GI}, lim={"cpu": 100, "memory": GI})], [], KubeQoS.GUARANTEED),
        # requests default to limits on the API server
        ([_c(lim={"cpu": 100, "memory": GI})], [], KubeQoS.GUARANTEED),
        ([_c(req={"cpu": 100, "memory": GI}, lim={"cpu": 200, "memory": GI})], [], KubeQoS.BURSTABLE),
        ([_c(req={"cpu": 100}, lim={"cpu": 100})], [], KubeQoS.BURSTABLE),  # no memory limit
        ([_c(req={"cpu": 100})], [], KubeQoS.BURSTABLE),
        # every container needs cpu and memory limits
        ([_c(req={"cpu": 1, "memory": 1}, lim={"cpu": 1, "memory": 1}), _c("b")], [], KubeQoS.BURSTABLE),
        # init containers count too
        ([_c(req={"cpu": 1, "memory": 1}, lim={"cpu": 1, "memory": 1})], [_c("i", req={"cpu": 1})], KubeQoS.BURSTABLE),
        (
            [_c(req={"cpu": 1, "memory": 1}, lim={"cpu": 1, "memory": 1})],
            [_c("i", lim={"cpu": 1, "memory": 1})],
            KubeQoS.GUARANTEED,
        ),
        # a zero limit is no limit (Kubernetes skips zero quantities)
        (
            [_c(req={"cpu": 1, "memory": 1}, lim={"cpu": 1, "memory": 1}), _c("b", lim={"cpu": 0, "memory": 0})],
            [],
            KubeQoS.BURSTABLE,
        ),
    ],
)
def test_computed_kube_qos(containers, init, kube):
    pod = PodRecord("ns", "p", "u", containers=containers, init_containers=init)
    assert pod.computed_kube_qos() is kube


def test_reported_kube_qos_wins_and_unknown_is_ignored():
    pod = PodRecord("ns", "p", "u", containers=[_c()], kube_qos="Guaranteed")
    assert pod.computed_kube_qos() is KubeQoS.GUARANTEED
    pod.kube_qos = "Gold"
    assert pod.computed_kube_qos() is KubeQoS.BEST_EFFORT


@pytest.mark.parametrize(
    "labels,priority,containers,qos,cls",
    [
        ({}, None, [_c(req={"cpu": 1, "memory": 1}, lim={"cpu": 1, "memory": 1})], QoSClass.LSR, P),
        ({}, None, [_c()], QoSClass.BE, B),
        ({LABEL_QOS_CLASS: "BE"}, 5000, [_c(req={"kubernetes.io/batch-cpu": 1000})], QoSClass.BE, B),
        ({LABEL_QOS_CLASS: "LS"}, 7100, [_c(req={"cpu": 100})], QoSClass.LS, M),
        ({LABEL_PRIORITY_CLASS: "koord-free"}, 9000, [_c()], QoSClass.BE, F),
    ],
)
def test_pod_qos_and_priority_class(labels, priority, containers, qos, cls):
    pod = PodRecord("ns", "p", "u", labels=labels, priority=priority, containers=containers)
    assert pod.qos is qos
    assert pod.priority_class is cls


def test_batch_requests_under_both_prefixes():
    pod = PodRecord(
        "ns",
        "p",
        "u",
        containers=[
            _c(req={"koordinator.sh/batch-cpu": 500, "koordinator.sh/batch-memory": GI}),
            _c("b", req={"kubernetes.io/batch-cpu": 1500, "kubernetes.io/batch-memory": GI, "cpu": 7}),
        ],
    )
    assert pod.batch_requests() == Resources(2000, 2 * GI)


def test_pod_flags():
    pod = PodRecord(
        "ns",
        "p",
        "u",
        owners=[OwnerRef("DaemonSet", "ds", controller=True)],
        annotations={"kubernetes.io/config.source": "file"},
        volume_kinds=["configMap", "hostPath"],
        phase="Running",
    )
    assert pod.is_daemonset and pod.is_mirror_or_static and pod.has_local_storage and pod.is_active
    assert pod.key == "ns/p" and pod.controller.name == "ds"
    pod = PodRecord(
        "ns",
        "p",
        "u",
        annotations={"kubernetes.io/config.source": "api"},
        volume_kinds=["persistentVolumeClaim"],
        phase="Succeeded",
    )
    assert not (pod.is_daemonset or pod.is_mirror_or_static or pod.has_local_storage or pod.is_active)
    assert pod.is_terminal and pod.controller is None
    assert PodRecord("ns", "p", "u", annotations={"kubernetes.io/config.mirror": "x"}).is_mirror_or_static
    assert not PodRecord("ns", "p", "u", phase="Running", deletion_ms=5).is_active


def test_controller_prefers_the_controller_ref():
    pod = PodRecord("ns", "p", "u", owners=[OwnerRef("Node", "n", controller=False), OwnerRef("ReplicaSet", "rs")])
    assert pod.controller.kind == "ReplicaSet"
    pod = PodRecord("ns", "p", "u", owners=[OwnerRef("Node", "n", controller=False)])
    assert pod.controller.kind == "Node"


@pytest.mark.parametrize(
    "allocatable,batch,mid",
    [
        ({"cpu": 1000}, None, None),
        ({"koordinator.sh/batch-cpu": 50_000, "koordinator.sh/batch-memory": GI}, Resources(50_000, GI), None),
        ({"kubernetes.io/batch-cpu": 8000}, Resources(8000, 0), None),
        ({"kubernetes.io/mid-memory": 5, "koordinator.sh/mid-cpu": 7}, None, Resources(7, 5)),
    ],
)
def test_node_tiers(allocatable, batch, mid):
    node = NodeRecord("n", allocatable=allocatable, capacity={"cpu": 4000, "memory": 8 * GI})
    assert node.batch_allocatable() == batch
    assert node.mid_allocatable() == mid
    assert node.capacity_resources() == Resources(4000, 8 * GI)
    assert node.allocatable_resources() == Resources(allocatable.get("cpu", 0), 0)
