"""Kubernetes JSON <-> records, on the real fixtures (fuzzed JSON and realistic YAML)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from koordcommon.kube_codec import (
    format_time_ms,
    node_from_k8s,
    node_to_k8s,
    parse_time_ms,
    pod_from_k8s,
    pod_to_k8s,
)
from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord, Taint
from koordcommon.testing.fixtures import fixtures_dir

GI = 2**30


def _fixture(name: str):
    d = fixtures_dir()
    with open(d / name) as f:
        return json.load(f) if name.endswith(".json") else yaml.safe_load(f)


# fuzzed round-trip fixtures -----------------------------------------------------------


def test_fuzzed_pod_decodes_every_field_we_use():
    pod = pod_from_k8s(_fixture("core.v1.Pod.json"))
    assert (pod.namespace, pod.name, pod.uid) == ("namespaceValue", "nameValue", "uidValue")
    assert pod.node_name == "nodeNameValue"
    assert pod.labels == {"labelsKey": "labelsValue"}
    assert pod.annotations == {"annotationsKey": "annotationsValue"}
    assert pod.owners == [OwnerRef("kindValue", "nameValue", "uidValue", "apiVersionValue", True)]
    assert pod.priority == 25
    assert pod.priority_class_name == "priorityClassNameValue"
    assert pod.preemption_policy == "preemptionPolicyValue"
    assert pod.scheduler_name == "schedulerNameValue"
    assert pod.phase == "phaseValue"
    assert pod.containers == [ContainerSpec("nameValue", {"requestsKey": 0}, {"limitsKey": 0})]
    assert pod.init_containers == [ContainerSpec("nameValue", {"requestsKey": 0}, {"limitsKey": 0})]
    assert pod.overhead == {"overheadKey": 0}
    assert pod.kube_qos == "qosClassValue"
    assert {"hostPath", "emptyDir", "persistentVolumeClaim", "configMap"} <= set(pod.volume_kinds)
    assert pod.has_local_storage
    assert pod.created_ms == 1199149261000  # 2008-01-01T01:01:01Z
    assert pod.deletion_ms == 1230771661000  # 2009-01-01T01:01:01Z
    assert pod.start_ms == 1167613261000  # 2007-01-01T01:01:01Z
    assert pod.resource_version == "resourceVersionValue"
    assert pod.container_ids == {"nameValue": "containerIDValue"}
    # an unknown qosClass falls back to the computed class (no cpu/memory set: BestEffort)
    assert pod.computed_kube_qos() is KubeQoS.BEST_EFFORT


def test_fuzzed_node_decodes():
    node = node_from_k8s(_fixture("core.v1.Node.json"))
    assert node.name == "nameValue"
    assert node.capacity == {"capacityKey": 0}
    assert node.allocatable == {"allocatableKey": 0}
    assert node.taints == [Taint("keyValue", "valueValue", "effectValue")]
    assert node.unschedulable is True
    assert node.ready is True  # the fuzzed conditions have no Ready type
    assert node.created_ms == 1199149261000
    assert node.resource_version == "resourceVersionValue"


def test_fuzzed_pod_round_trips_through_the_codec():
    pod = pod_from_k8s(_fixture("core.v1.Pod.json"))
    again = pod_from_k8s(json.loads(json.dumps(pod_to_k8s(pod))))
    assert again == pod


def test_fuzzed_node_round_trips_through_the_codec():
    node = node_from_k8s(_fixture("core.v1.Node.json"))
    assert node_from_k8s(json.loads(json.dumps(node_to_k8s(node)))) == node


# realistic YAML fixtures ----------------------------------------------------------------


def test_kwok_node_yaml_ints_are_quantities():
    node = node_from_k8s(_fixture("node.yaml"))
    assert node.name == "kwok-node-0"
    assert node.capacity == {"cpu": 32000, "memory": 256 * GI, "pods": 110}
    assert node.allocatable == node.capacity
    assert node.capacity_resources().cpu_milli == 32000
    assert node.allocatable_resources().memory_bytes == 274877906944
    assert node.labels["kubernetes.io/hostname"] == "kwok-node-0"
    assert node.labels["node-role.kubernetes.io/agent"] == ""
    assert node.annotations["node.alpha.kubernetes.io/ttl"] == "0"
    assert node.ready and not node.unschedulable and node.taints == []
    assert node.batch_allocatable() is None
    out = node_to_k8s(node)
    assert out["status"]["capacity"] == {"cpu": "32", "memory": "256Gi", "pods": "110"}


def test_extended_resource_pod():
    pod = pod_from_k8s(_fixture("extended-resource-pod.yaml"))
    assert (pod.namespace, pod.name) == ("default", "extended-resource-demo")
    assert pod.requests() == {"example.com/dongle": 3}
    assert pod.limits() == {"example.com/dongle": 3}
    # no cpu/memory at all: BestEffort -> BE -> batch (Koordinator's default for BE pods)
    assert pod.computed_kube_qos() is KubeQoS.BEST_EFFORT
    assert pod.qos is QoSClass.BE
    assert pod.priority_class is PriorityClass.BATCH
    assert pod_to_k8s(pod)["spec"]["containers"][0]["resources"] == {
        "requests": {"example.com/dongle": "3"},
        "limits": {"example.com/dongle": "3"},
    }


def test_high_priority_pod():
    pod = pod_from_k8s(_fixture("high-priority-pod.yaml"))
    assert pod.priority_class_name == "high"
    assert pod.priority is None
    assert pod.requests() == {"cpu": 500, "memory": 10 * GI}
    assert pod.limits() == pod.requests()
    assert pod.computed_kube_qos() is KubeQoS.GUARANTEED
    assert pod.qos is QoSClass.LSR
    assert pod.priority_class is PriorityClass.PROD  # a normal pod without koord priority
    k8s = pod_to_k8s(pod)
    assert k8s["spec"]["containers"][0]["resources"]["requests"] == {"memory": "10Gi", "cpu": "500m"}
    assert k8s["spec"]["priorityClassName"] == "high"
    assert k8s["status"]["qosClass"] == "Guaranteed"


def test_cpu_request_limit_pod():
    pod = pod_from_k8s(_fixture("cpu-request-limit.yaml"))
    assert (pod.namespace, pod.name) == ("cpu-example", "cpu-demo")
    assert pod.containers[0].requests == {"cpu": 500}  # "0.5"
    assert pod.containers[0].limits == {"cpu": 1000}
    assert pod.computed_kube_qos() is KubeQoS.BURSTABLE
    assert pod.qos is QoSClass.LS
    assert pod.priority_class is PriorityClass.PROD
    res = pod_to_k8s(pod)["spec"]["containers"][0]["resources"]
    assert res == {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}


# derivations from API fields ------------------------------------------------------------


def _pod(spec=None, labels=None, status=None, **meta):
    return {
        "metadata": {"name": "p", "namespace": "ns", "labels": labels or {}, **meta},
        "spec": spec or {},
        "status": status or {},
    }


@pytest.mark.parametrize(
    "priority,labels,resources,want_class,want_qos",
    [
        (9500, {}, {"requests": {"cpu": "1"}}, PriorityClass.PROD, QoSClass.LS),
        (7000, {}, {}, PriorityClass.MID, QoSClass.BE),
        (5999, {"koordinator.sh/qosClass": "BE"}, {}, PriorityClass.BATCH, QoSClass.BE),
        (3000, {}, {}, PriorityClass.FREE, QoSClass.BE),
        (None, {"koordinator.sh/qosClass": "LSE"}, {}, PriorityClass.PROD, QoSClass.LSE),
        (0, {}, {}, PriorityClass.BATCH, QoSClass.BE),
        (
            0,
            {},
            {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            PriorityClass.PROD,
            QoSClass.LSR,
        ),
        (5500, {"koordinator.sh/priority-class": "koord-prod"}, {}, PriorityClass.PROD, QoSClass.BE),
    ],
)
def test_priority_and_qos_derivation(priority, labels, resources, want_class, want_qos):
    spec = {"containers": [{"name": "c", "resources": resources}]}
    if priority is not None:
        spec["priority"] = priority
    pod = pod_from_k8s(_pod(spec, labels))
    assert pod.priority == priority
    assert pod.qos is want_qos
    assert pod.priority_class is want_class


def test_status_qos_class_wins_over_computation():
    pod = pod_from_k8s(_pod({"containers": [{"name": "c"}]}, status={"qosClass": "Guaranteed", "phase": "Running"}))
    assert pod.computed_kube_qos() is KubeQoS.GUARANTEED
    assert pod.phase == "Running"


def test_owner_controller_and_workload_fields():
    owners = [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u0"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f", "uid": "u1", "controller": True},
    ]
    pod = pod_from_k8s(_pod(ownerReferences=owners))
    assert pod.owners[0].controller is False
    assert pod.controller == OwnerRef("ReplicaSet", "web-5d4f", "u1", "apps/v1", True)


def test_init_containers_and_overhead_in_requests():
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "32Mi"}}}],
        "overhead": {"cpu": "100m", "memory": "10Mi"},
    }
    pod = pod_from_k8s(_pod(spec))
    assert pod.requests() == {"cpu": 2100, "memory": 138 * 2**20}


def test_container_ids_from_init_and_regular_statuses():
    status = {
        "initContainerStatuses": [{"name": "init", "containerID": "containerd://aa"}],
        "containerStatuses": [
            {"name": "app", "containerID": "containerd://bb"},
            {"name": "waiting", "state": {"waiting": {}}},
        ],
    }
    pod = pod_from_k8s(_pod({"initContainers": [{"name": "init"}], "containers": [{"name": "app"}]}, status=status))
    assert pod.container_ids == {"init": "containerd://aa", "app": "containerd://bb"}
    out = pod_to_k8s(pod)["status"]
    assert [(c["name"], c["containerID"]) for c in out["initContainerStatuses"]] == [("init", "containerd://aa")]
    assert [(c["name"], c["containerID"]) for c in out["containerStatuses"]] == [("app", "containerd://bb")]
    assert pod_from_k8s(pod_to_k8s(pod)).container_ids == pod.container_ids


def test_minimal_and_empty_objects_decode():
    pod = pod_from_k8s({})
    assert (pod.namespace, pod.name, pod.phase, pod.scheduler_name) == ("default", "", "Pending", "default-scheduler")
    assert pod.node_name is None and pod.priority is None and pod.containers == []
    node = node_from_k8s({"metadata": {"name": "n"}})
    assert node == NodeRecord("n")


def test_wrongly_typed_fields_fall_back_to_defaults():
    pod = pod_from_k8s(
        {
            "metadata": {"name": "p", "labels": ["x"], "ownerReferences": "x"},
            "spec": {"containers": "x", "priority": "high", "nodeName": 7},
        }
    )
    assert pod.labels == {} and pod.owners == [] and pod.containers == []
    assert pod.priority is None and pod.node_name is None


@pytest.mark.parametrize(
    "conditions,ready",
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([], True),
    ],
)
def test_node_ready_condition(conditions, ready):
    assert node_from_k8s({"metadata": {"name": "n"}, "status": {"conditions": conditions}}).ready is ready


def test_node_taints_and_unschedulable():
    node = node_from_k8s(
        {
            "metadata": {"name": "n"},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}, {"key": "k", "value": "v"}],
            },
        }
    )
    assert node.unschedulable
    assert node.taints == [Taint("node.kubernetes.io/not-ready", "", "NoExecute"), Taint("k", "v", "NoSchedule")]
    out = node_to_k8s(node)
    assert out["spec"]["taints"][0] == {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
    assert out["spec"]["unschedulable"] is True


def test_batch_resources_on_nodes():
    node = node_from_k8s(
        {
            "metadata": {"name": "n"},
            "status": {
                "capacity": {
                    "cpu": "16",
                    "memory": "64Gi",
                    "kubernetes.io/batch-cpu": "50k",
                    "kubernetes.io/batch-memory": "120Gi",
                },
                "allocatable": {
                    "cpu": "15500m",
                    "memory": "62Gi",
                    "kubernetes.io/batch-cpu": "50k",
                    "kubernetes.io/batch-memory": "120Gi",
                },
            },
        }
    )
    assert node.allocatable["cpu"] == 15500
    assert node.batch_allocatable().cpu_milli == 50_000
    assert node.batch_allocatable().memory_bytes == 120 * GI
    assert node_to_k8s(node)["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "50k"


@pytest.mark.parametrize(
    "bad",
    [
        {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "one"}}}]}},
        {"spec": {"overhead": {"memory": "1 Gi"}}},
        {"spec": {"initContainers": [{"name": "i", "resources": {"limits": {"memory": "--1"}}}]}},
    ],
)
def test_invalid_pod_quantity_raises_value_error_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"pod p: spec\."):
        pod_from_k8s({"metadata": {"name": "p"}, **bad})


def test_invalid_node_quantity_and_time_raise_value_error():
    with pytest.raises(ValueError, match="status.allocatable"):
        node_from_k8s({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "x"}}})
    with pytest.raises(ValueError, match="creationTimestamp"):
        node_from_k8s({"metadata": {"name": "n", "creationTimestamp": "yesterday"}})


@pytest.mark.parametrize(
    "text,ms",
    [
        ("1970-01-01T00:00:00Z", 0),
        ("2008-01-01T01:01:01Z", 1199149261000),
        ("2008-01-01T01:01:01.250Z", 1199149261250),
        ("2008-01-01T01:01:01.123456789Z", 1199149261123),  # nanoseconds truncate to ms
        ("2008-01-01T03:01:01+02:00", 1199149261000),
        (None, None),
        ("", None),
    ],
)
def test_parse_time_ms(text, ms):
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize(
    "ms,text",
    [(0, "1970-01-01T00:00:00Z"), (1199149261000, "2008-01-01T01:01:01Z"), (1199149261250, "2008-01-01T01:01:01.250Z")],
)
def test_format_time_ms(ms, text):
    assert format_time_ms(ms) == text
    assert parse_time_ms(text) == ms


def test_pod_to_k8s_is_a_valid_v1_pod():
    pod = PodRecord(
        namespace="prod",
        name="web-1",
        uid="u-1",
        node_name="node-a",
        labels={"app": "web"},
        annotations={"a": "b"},
        owners=[OwnerRef("ReplicaSet", "web-5d4f", "u-rs", "apps/v1")],
        priority=9100,
        priority_class_name="koord-prod",
        preemption_policy="PreemptLowerPriority",
        scheduler_name="koord-scheduler",
        phase="Running",
        containers=[ContainerSpec("app", {"cpu": 1500, "memory": 2 * GI}, {"cpu": 1500, "memory": 2 * GI})],
        init_containers=[ContainerSpec("init", {"cpu": 100})],
        overhead={"cpu": 50},
        volume_kinds=["emptyDir", "persistentVolumeClaim"],
        created_ms=1_700_000_000_000,
        start_ms=1_700_000_001_500,
    )
    k8s = pod_to_k8s(pod)
    assert k8s["apiVersion"] == "v1" and k8s["kind"] == "Pod"
    assert k8s["metadata"] == {
        "name": "web-1",
        "namespace": "prod",
        "uid": "u-1",
        "labels": {"app": "web"},
        "annotations": {"a": "b"},
        "creationTimestamp": "2023-11-14T22:13:20Z",
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4f", "uid": "u-rs", "controller": True}
        ],
    }
    spec = k8s["spec"]
    assert spec["nodeName"] == "node-a" and spec["priority"] == 9100
    assert spec["priorityClassName"] == "koord-prod" and spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert spec["schedulerName"] == "koord-scheduler"
    assert spec["containers"][0]["name"] == "app" and spec["containers"][0]["image"]
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "1500m", "memory": "2Gi"},
        "limits": {"cpu": "1500m", "memory": "2Gi"},
    }
    assert spec["initContainers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    assert spec["overhead"] == {"cpu": "50m"}
    assert spec["volumes"] == [
        {"name": "vol-0", "emptyDir": {}},
        {"name": "vol-1", "persistentVolumeClaim": {"claimName": "claim"}},
    ]
    assert k8s["status"] == {"phase": "Running", "qosClass": "Burstable", "startTime": "2023-11-14T22:13:21.500Z"}
    back = pod_from_k8s(copy.deepcopy(k8s))
    assert back.kube_qos == "Burstable"
    back.kube_qos = None  # status.qosClass is what the encoder computed
    assert back == pod


def test_node_to_k8s():
    node = NodeRecord(
        "n1",
        labels={"zone": "a"},
        capacity={"cpu": 16000, "memory": 64 * GI, "kubernetes.io/batch-cpu": 50000},
        allocatable={"cpu": 15500, "memory": 60 * GI, "kubernetes.io/batch-cpu": 50000},
        ready=False,
        created_ms=1000,
    )
    k8s = node_to_k8s(node)
    assert k8s["metadata"] == {"name": "n1", "labels": {"zone": "a"}, "creationTimestamp": "1970-01-01T00:00:01Z"}
    assert k8s["status"]["capacity"] == {"cpu": "16", "memory": "64Gi", "kubernetes.io/batch-cpu": "50k"}
    assert k8s["status"]["allocatable"] == {"cpu": "15500m", "memory": "60Gi", "kubernetes.io/batch-cpu": "50k"}
    assert k8s["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert node_from_k8s(k8s) == node


# pods from JSON bytes ------------------------------------------------------------------

POD_FIXTURES = ["core.v1.Pod.json", "extended-resource-pod.yaml", "high-priority-pod.yaml", "cpu-request-limit.yaml"]


def test_pod_conditions_date_scheduling_and_initialization():
    from koordcommon import kube_codec

    obj = {
        "metadata": {"name": "p"},
        "status": {
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2023-11-14T22:13:30Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2023-11-14T22:13:40Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2023-11-14T22:13:20Z"},
            ]
        },
    }
    pod = kube_codec.pod_from_k8s(obj)
    assert (pod.scheduled_ms, pod.initialized_ms) == (1_700_000_000_000, 1_700_000_010_000)
    assert kube_codec.pod_from_k8s(kube_codec.pod_to_k8s(pod)).initialized_ms == 1_700_000_010_000
    pending = kube_codec.pod_from_k8s({"metadata": {"name": "q"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "lastTransitionTime": "2023-11-14T22:13:20Z"}]}})
    assert (pending.scheduled_ms, pending.initialized_ms) == (None, None)
