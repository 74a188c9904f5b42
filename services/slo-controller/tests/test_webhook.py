"""The admission webhook over HTTP, with AdmissionReview requests built from the real fixtures
in koordcommon.testing.fixtures (the fuzzed AdmissionReview envelope, the website example Pods)."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
from pathlib import Path

import httpx
import jsonpatch
import pytest
import yaml
from cryptography import x509
from koordcommon.testing.fixtures import fixtures_dir
from koordcommon.testing.net import free_port
from slo_controller.certs import generate
from slo_controller.config_source import load_documents
from slo_controller.profiles import ProfileStore
from slo_controller.webhook import create_app, serve_tls

PREFIX = "koordinator.sh/"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SPARK_LABEL = "sparkoperator.k8s.io/launched-by-spark-operator"


def fixture(name: str):
    d = fixtures_dir()
    text = (d / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def review(pod: dict, namespace: str, operation: str = "CREATE", old: dict | None = None, uid: str | None = None):
    """The fixture's AdmissionReview envelope, turned into a Pod request."""
    body = fixture("admission.k8s.io.v1.AdmissionReview.json")
    body.pop("response")
    req = body["request"]
    if uid is not None:
        req["uid"] = uid
    req["kind"] = req["requestKind"] = {"group": "", "version": "v1", "kind": "Pod"}
    req["resource"] = req["requestResource"] = {"group": "", "version": "v1", "resource": "pods"}
    req.pop("subResource")
    req.pop("requestSubResource")
    req["operation"] = operation
    req["namespace"] = namespace
    req["name"] = pod["metadata"].get("name", "")
    req["object"] = pod
    req["oldObject"] = old
    req["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    return body


def spark_pod() -> dict:
    """The website's cpu-request-limit Pod (cpu 0.5 / 1), with memory and the Spark operator label."""
    pod = fixture("cpu-request-limit.yaml")
    pod["metadata"].pop("namespace")  # controllers create pods without it; the request carries it
    pod["metadata"]["labels"] = {SPARK_LABEL: "true", "spark-role": "executor"}
    res = pod["spec"]["containers"][0]["resources"]
    res["requests"]["memory"] = "1Gi"
    res["limits"]["memory"] = "2Gi"
    return pod


@pytest.fixture
def store() -> ProfileStore:
    s = ProfileStore()
    assert s.load_documents(load_documents(EXAMPLES / "spark-colocation-profile.yaml")) == []
    return s


@pytest.fixture
async def client(store):
    app = create_app(store, prefix=PREFIX, rand_intn=lambda n: 0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
        yield c


def decode_patch(resp: dict) -> list:
    assert resp["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(resp["patch"]))


async def test_spark_pod_becomes_be_batch_with_batch_resources(client):
    pod = spark_pod()
    r = await client.post("/mutate-pod?timeout=10s", json=review(pod, "spark-demo"))
    assert r.status_code == 200
    out = r.json()
    assert (out["apiVersion"], out["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    resp = out["response"]
    assert resp["uid"] == "uidValue" and resp["allowed"] is True
    mutated = jsonpatch.apply_patch(pod, decode_patch(resp))

    assert mutated["metadata"]["labels"] == {
        SPARK_LABEL: "true",
        "spark-role": "executor",
        "koordinator.sh/qosClass": "BE",
        "koordinator.sh/priority": "1000",
        "koordinator.sh/mutated": "true",
    }
    spec = mutated["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "koord-batch", 5000, "PreemptLowerPriority")
    assert 5000 <= spec["priority"] <= 5999
    assert spec["schedulerName"] == "koord-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 30  # the profile's strategic merge patch
    # cpu 0.5 / 1 -> 500 / 1000 milli-cores (canonical "1k"); memory keeps its quantity
    assert spec["containers"][0]["resources"] == {
        "requests": {"koordinator.sh/batch-cpu": "500", "koordinator.sh/batch-memory": "1Gi"},
        "limits": {"koordinator.sh/batch-cpu": "1k", "koordinator.sh/batch-memory": "2Gi"},
    }
    ann = mutated["metadata"]["annotations"]
    assert ann["koordinator.sh/intercepted"] == "true"
    assert json.loads(ann["node.koordinator.sh/extended-resource-spec"]) == {
        "containers": {"cpu-demo-ctr": spec["containers"][0]["resources"]}
    }
    # the untouched parts stay as they were
    assert spec["containers"][0]["args"] == ["-cpus", "2"]

    # the mutated pod passes validation
    v = (await client.post("/validate-pod", json=review(mutated, "spark-demo", uid="v-1"))).json()["response"]
    assert v == {"uid": "v-1", "allowed": True}


async def test_kubernetes_io_prefix(store):
    app = create_app(store, prefix="kubernetes.io/")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
        pod = spark_pod()
        resp = (await c.post("/mutate-pod", json=review(pod, "spark-demo"))).json()["response"]
    mutated = jsonpatch.apply_patch(pod, decode_patch(resp))
    assert mutated["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}


@pytest.mark.parametrize(
    "namespace, labels",
    [
        ("default", {SPARK_LABEL: "true"}),  # namespace not labelled for colocation
        ("spark-demo", {"app": "web"}),  # pod not launched by the Spark operator
        ("spark-demo", {SPARK_LABEL: "false"}),
    ],
)
async def test_non_matching_pod_is_allowed_untouched(client, namespace, labels):
    pod = fixture("high-priority-pod.yaml")
    pod["metadata"]["labels"] = labels
    resp = (await client.post("/mutate-pod", json=review(pod, namespace, uid="u-2"))).json()["response"]
    assert resp == {"uid": "u-2", "allowed": True}


@pytest.mark.parametrize(
    "labels, priority, message",
    [
        ({"koordinator.sh/qosClass": "BE"}, 9500,
         "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"),
        ({"koordinator.sh/qosClass": "LSR"}, 5000,
         "koordinator.sh/qosClass=LSR and priorityClass=koord-batch cannot be used in combination"),
        ({"koordinator.sh/qosClass": "LSE"}, 7000,
         "koordinator.sh/qosClass=LSE and priorityClass=koord-mid cannot be used in combination"),
        ({"koordinator.sh/qosClass": "LSR"}, 9999,
         'Invalid value: "500m": the requested CPUs of LSR Pod must be integer'),
    ],
)
async def test_invalid_combination_is_denied_with_a_message(client, labels, priority, message):
    pod = fixture("high-priority-pod.yaml")  # cpu 500m, memory 10Gi
    pod["metadata"]["labels"] = labels
    pod["spec"]["priority"] = priority
    resp = (await client.post("/validate-pod", json=review(pod, "default", uid="u-3"))).json()["response"]
    assert resp["uid"] == "u-3" and resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert message in resp["status"]["message"]
    assert "patch" not in resp and "patchType" not in resp  # a validating answer never patches


@pytest.mark.parametrize(
    "labels, priority",
    [
        ({"koordinator.sh/qosClass": "BE"}, 5000),
        ({"koordinator.sh/qosClass": "LS"}, 7000),
        ({"koordinator.sh/qosClass": "SYSTEM"}, 9999),
        ({}, None),  # a plain Kubernetes pod
    ],
)
async def test_valid_combinations_are_allowed(client, labels, priority):
    pod = fixture("high-priority-pod.yaml")
    pod["metadata"]["labels"] = labels
    if priority is not None:
        pod["spec"]["priority"] = priority
    resp = (await client.post("/validate-pod", json=review(pod, "default"))).json()["response"]
    assert resp["allowed"] is True


async def test_batch_resources_require_be(client):
    pod = fixture("extended-resource-pod.yaml")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"koordinator.sh/batch-cpu": "1k"},
                                                 "limits": {"koordinator.sh/batch-cpu": "1k"}}
    resp = (await client.post("/validate-pod", json=review(pod, "default"))).json()["response"]
    assert resp["allowed"] is False
    assert "must specify koordinator QoS BE with koordinator colocation resources" in resp["status"]["message"]


async def test_update_may_not_change_qos_or_priority(client):
    old = fixture("high-priority-pod.yaml")
    old["metadata"]["labels"] = {"koordinator.sh/qosClass": "LS"}
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
    new["spec"]["priority"] = 5000
    resp = (await client.post("/validate-pod", json=review(new, "default", "UPDATE", old))).json()["response"]
    assert resp["allowed"] is False
    msg = resp["status"]["message"]
    assert 'labels.koordinator.sh/qosClass: Invalid value: "BE": field is immutable' in msg
    assert 'spec.priority: Invalid value: "koord-batch": field is immutable' in msg


async def test_profile_that_produces_an_invalid_pod_is_denied(store):
    store.load_documents(load_documents(EXAMPLES / "spark-colocation-profile.yaml") + [{
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": "zz-prod"},
        "spec": {"selector": {"matchLabels": {SPARK_LABEL: "true"}}, "priorityClassName": "koord-prod"},
    }])
    app = create_app(store, prefix=PREFIX)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
        resp = (await c.post("/mutate-pod", json=review(spark_pod(), "spark-demo"))).json()["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert "colocation-profile-example, zz-prod produce an invalid pod" in resp["status"]["message"]
    assert "qosClass=BE and priorityClass=koord-prod" in resp["status"]["message"]


async def test_unknown_priority_class_is_denied(store):
    store.load_documents([{
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": "p"}, "spec": {"priorityClassName": "koord-gold"},
    }])
    app = create_app(store, prefix=PREFIX)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
        resp = (await c.post("/mutate-pod", json=review(spark_pod(), "default"))).json()["response"]
    assert resp["allowed"] is False
    assert "no PriorityClass with name koord-gold was found" in resp["status"]["message"]


@pytest.mark.parametrize(
    "body, status",
    [
        (b"not json", 400),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}', 400),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', 400),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', 400),
    ],
)
async def test_malformed_reviews_get_400(client, body, status):
    r = await client.post("/mutate-pod", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    assert "not an AdmissionReview v1 request" in r.json()["error"]


async def test_other_resources_and_operations_pass(client):
    body = review(spark_pod(), "spark-demo", operation="DELETE", uid="d")
    assert (await client.post("/mutate-pod", json=body)).json()["response"] == {"uid": "d", "allowed": True}
    body = review(spark_pod(), "spark-demo", uid="s")
    body["request"]["subResource"] = "status"
    assert (await client.post("/mutate-pod", json=body)).json()["response"] == {"uid": "s", "allowed": True}


async def test_tls_with_generated_certificates(tmp_path, store):
    paths = generate(tmp_path, "slo-controller", "koordinator-system")
    cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert "slo-controller.koordinator-system.svc" in sans
    assert oct(paths.key.stat().st_mode & 0o777) == "0o600"

    port = free_port()
    stopping = asyncio.Event()
    server = asyncio.create_task(
        serve_tls(create_app(store, prefix=PREFIX), "127.0.0.1", port, str(paths.cert), str(paths.key), stopping))
    ctx = ssl.create_default_context(cafile=str(paths.ca_cert))
    try:
        async with httpx.AsyncClient(verify=ctx) as c:
            for _ in range(100):
                try:
                    r = await c.post(f"https://localhost:{port}/mutate-pod", json=review(spark_pod(), "spark-demo"))
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
        assert r.status_code == 200 and r.json()["response"]["allowed"] is True
        assert decode_patch(r.json()["response"])
        # a client that does not trust our CA is refused
        async with httpx.AsyncClient() as c:
            with pytest.raises(httpx.ConnectError):
                await c.post(f"https://localhost:{port}/mutate-pod", json={})
    finally:
        stopping.set()
        await server


async def test_namespace_labels_come_from_the_cluster():
    """With the kubernetes or sim backend the namespace selector reads the cluster's namespaces."""
    from koordsim.cluster import SimCluster, SimSpec

    docs = [d for d in load_documents(EXAMPLES / "spark-colocation-profile.yaml") if d.get("kind") != "Namespace"]
    s = ProfileStore()
    assert s.load_documents(docs) == []
    app = create_app(s, prefix=PREFIX, rand_intn=lambda n: 0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://webhook") as c:
        untouched = (await c.post("/mutate-pod", json=review(spark_pod(), "spark-cluster"))).json()["response"]
        assert untouched["allowed"] is True and "patch" not in untouched

        sim = SimCluster(SimSpec(nodes=1, online_pods_per_node=0))
        await sim.apply_custom("Namespace", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "spark-cluster", "labels": {"koordinator.sh/enable-colocation": "true"}},
        })
        await s.refresh_from_cluster(sim)
        assert s.namespace_labels("spark-cluster")["koordinator.sh/enable-colocation"] == "true"
        mutated = (await c.post("/mutate-pod", json=review(spark_pod(), "spark-cluster"))).json()["response"]
        assert mutated["allowed"] is True
        ops = {op["path"]: op.get("value") for op in decode_patch(mutated)}
        assert ops["/spec/priorityClassName"] == "koord-batch"
