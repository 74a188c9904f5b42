"""The core's inputs built from records: workload names (koordcommon's one rule) and prod usage."""

from __future__ import annotations

import pytest
from descheduler.core.lownodeload import Load
from descheduler.snapshot import node_states, pod_states, replicas_by_workload
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric

GI = 1 << 30


def record(name, owner=None, labels=None, priority=None, qos=None):
    return PodRecord(
        namespace="shop", name=name, uid=f"uid-{name}", node_name="n1", phase="Running",
        labels={**(labels or {}), **({"koordinator.sh/qosClass": qos} if qos else {})},
        owners=[owner] if owner else [], priority=priority,
        containers=[ContainerSpec("c", requests={"cpu": 500, "memory": GI})],
    )


@pytest.mark.parametrize(
    "owner,labels,workload",
    [
        # the pod-template-hash label names the Deployment exactly, whatever the hash looks like
        (OwnerRef("ReplicaSet", "web-abc123", uid="rs1"), {"pod-template-hash": "abc123"}, "shop/Deployment/web"),
        # without the label a suffix that cannot be a hash (vowels) keeps the ReplicaSet
        (OwnerRef("ReplicaSet", "web-abc123", uid="rs1"), {}, "shop/ReplicaSet/web-abc123"),
        (OwnerRef("ReplicaSet", "web-7d9f6b8c5d", uid="rs1"), {}, "shop/Deployment/web"),
        # each run of a CronJob is a Job named <cronjob>-<minutes since the epoch>
        (OwnerRef("Job", "report-28629120", uid="j1"), {}, "shop/CronJob/report"),
        (OwnerRef("StatefulSet", "db", uid="s1"), {}, "shop/StatefulSet/db"),
        (None, {}, "shop/Pod/p"),
    ],
)
def test_workload_is_koordcommons_workload_of(owner, labels, workload):
    (state,) = pod_states([record("p", owner, labels)], {})
    assert state.workload == workload


def test_replicas_count_the_pods_of_one_deployment_across_its_replicasets():
    new, old = OwnerRef("ReplicaSet", "web-5c7b9d", uid="rs-new"), OwnerRef("ReplicaSet", "web-7f8g2h", uid="rs-old")
    pods = [record("a", new), record("b", new), record("c", old), record("bare")]
    assert replicas_by_workload(pods) == {"shop/Deployment/web": 3}


@pytest.mark.parametrize(
    "priority,qos,prod_cpu",
    [
        (9500, None, 700),  # koord-prod
        (None, None, 700),  # a normal Kubernetes pod counts as prod
        (None, "BE", 0),  # ... unless it is BE: batch
        (5500, None, 0),  # koord-batch
        (7500, None, 0),  # koord-mid is not prod
    ],
)
def test_prod_usage_sums_the_metrics_of_prod_pods(priority, qos, prod_cpu):
    pod = record("p", OwnerRef("StatefulSet", "db", uid="s1"), priority=priority, qos=qos)
    metric = NodeMetric(
        node="n1", ts=1_000, node_usage=Resources(2000, 4 * GI), system_usage=Resources(300, GI),
        allocatable=Resources(8000, 16 * GI),
        pods=[PodMetric(uid=pod.uid, namespace=pod.namespace, name=pod.name, usage=Resources(700, GI))],
    )
    node = NodeRecord(name="n1", allocatable={"cpu": 8000, "memory": 16 * GI})
    (state,) = node_states([node], [pod], {"n1": metric}, now_ms=2_000, expiration_s=180)
    assert state.usage == Load(2000, 4 * GI, 1)  # and the one pod on the node
    assert (state.prod_usage.cpu, state.prod_usage.pods) == (prod_cpu, 1 if prod_cpu else 0)


def test_pods_by_node_builds_a_nodes_pods_when_asked_with_its_own_metric():
    from dataclasses import replace

    from descheduler.core.evictable import EvictorRules
    from descheduler.snapshot import PodsByNode

    a, b = record("a"), replace(record("b"), node_name="n2")
    stale = replace(record("b"), uid="uid-old-b")  # the same name reported by n1 before it moved
    metrics = {
        "n1": NodeMetric(node="n1", ts=1, node_usage=Resources(), pods=[PodMetric(uid=a.uid, namespace="shop", name="a", usage=Resources(300, GI)),
                                               PodMetric(uid=stale.uid, namespace="shop", name="b", usage=Resources(900, GI))]),
        "n2": NodeMetric(node="n2", ts=1, node_usage=Resources(), pods=[PodMetric(uid=b.uid, namespace="shop", name="b", usage=Resources(100, GI))]),
    }
    by_node = PodsByNode([a, b], metrics, rules=EvictorRules())
    assert sorted(by_node) == ["n1", "n2"] and by_node.get("n3") is None
    assert by_node._built == {}  # nothing built until a node is asked for
    assert [(p.name, p.usage) for p in by_node["n2"]] == [("b", Resources(100, GI))]  # not n1's stale entry
    assert list(by_node._built) == ["n2"]
    assert [(p.name, p.usage) for p in by_node["n1"]] == [("a", Resources(300, GI))]


def test_facts_of_pods_that_left_are_not_kept_beyond_a_round():
    """A descheduler running for weeks derives facts of every pod it sees: only those of pods
    still there are kept (a round's and the one before it)."""
    from dataclasses import replace

    from descheduler import snapshot

    node = NodeRecord(name="n1", allocatable={"cpu": 8000, "memory": 16 * GI})
    owner = OwnerRef("StatefulSet", "db", uid="s1")
    for r in range(50):  # every round two new pods replace the last round's
        pods = [replace(record(f"p{r}-{i}", owner), resource_version=str(r)) for i in range(2)]
        node_states([node], pods, {}, now_ms=0, expiration_s=180)
        assert replicas_by_workload(pods) == {"shop/StatefulSet/db": 2}
    assert len(snapshot._FACTS) == 4
