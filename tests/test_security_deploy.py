"""Security as deployed: the Helm chart renders the NATS server's authorization from the one
permissions table (equal to what koordcommon.natsauth gives for the same identities), wires each
service's bus identity, the NATS CA, TokenReview and the extender's TLS; the deploy examples
choose deliberately what happens when the extender or the webhook is down."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from koordcommon import natsauth


def _chart_tests():
    """tests/test_helm_chart.py, for its helm fixture (found or installed once) and renderer."""
    spec = importlib.util.spec_from_file_location("koord_chart_tests", Path(__file__).with_name("test_helm_chart.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_chart = _chart_tests()
helm = _chart.helm
render = _chart.render

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "koord"


def test_the_charts_permissions_file_is_the_roles_table():
    on_disk = json.loads((CHART / "files" / "nats-permissions.json").read_text())
    assert on_disk == natsauth.permissions_table(), (
        "regenerate deploy/helm/koord/files/nats-permissions.json from koordcommon.natsauth.permissions_table()")


@pytest.mark.parametrize("namespace", ["", "prod"])
def test_the_chart_renders_the_same_authorization_as_the_code(helm, namespace):
    keys = {"metrics-collector": "UCOLLECTOR", "scheduler-extender": "UEXTENDER", "slo-controller": "USLO"}
    agents = {"node.a": "UNODEA", "b": "UNODEB"}
    sets = ["--set", "nats.auth.enabled=true", "--set", f"busNamespace={namespace}"]
    for k, v in keys.items():
        sets += ["--set", f"nats.auth.publicKeys.{k}={v}"]
    for k, v in agents.items():
        sets += ["--set", f"nats.auth.nodeAgents.{k.replace('.', chr(92) + '.')}={v}"]
    docs = render(helm, *sets)
    cm = next(d for d in docs if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("nats-authorization"))
    rendered = json.loads(cm["data"]["authorization.conf"])
    identities = [natsauth.Identity(r, k) for r, k in keys.items()]
    identities += [natsauth.Identity("node-agent", k, node) for node, k in agents.items()]
    expected = natsauth.server_config(identities, namespace=namespace)
    by_key = {u["nkey"]: u["permissions"] for u in rendered["authorization"]["users"]}
    assert by_key == {u["nkey"]: u["permissions"] for u in expected["authorization"]["users"]}


def test_every_service_gets_its_identity_the_ca_tokenreview_and_the_extender_tls(helm):
    docs = render(helm, "--set", "nats.auth.enabled=true", "--set", "nats.tlsCASecret=nats-ca",
                  "--set", "schedulerExtender.tlsSecret=extender-tls", "--set", "schedulerExtender.bindVerb=true")
    workloads = [d for d in docs if d and d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workloads) == 6
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["NATS_NKEY_SEED_FILE"] == "/etc/koord/nats/identity.nk"
        assert env["NATS_CA_FILE"] == "/etc/koord/nats-ca/ca.crt"
        assert any(k.endswith("API_AUTH") and v == "tokenreview" for k, v in env.items())
        volumes = {v["name"]: v for v in pod["volumes"]}
        name = w["metadata"]["labels"]["app.kubernetes.io/name"]
        if w["kind"] == "DaemonSet":  # the agent's own identity lives on its node
            assert volumes["nats-identity"]["hostPath"]["type"] == "File"
        else:  # only this service's seed is mounted, not the others'
            assert volumes["nats-identity"]["secret"]["items"] == [{"key": f"{name}.nk", "path": "identity.nk"}]
        if name == "scheduler-extender":
            assert env["KOORD_EXTENDER_HTTP_TLS_CLIENT_CA_FILE"] == "/etc/koord/extender-tls/ca.crt"
            assert env["KOORD_EXTENDER_BIND_VERB"] == "true"


def test_the_production_example_is_locked_down(helm, tmp_path):
    """values-production.yaml: TLS to NATS and one identity per service, the NATS authorization
    rendered from the installation's public keys, TokenReview on the APIs, and kube-scheduler
    calling the extender over HTTPS with its client certificate."""
    keys = tmp_path / "nats-keys.yaml"
    keys.write_text(yaml.safe_dump({"nats": {"auth": {
        "publicKeys": {s: f"U{s.upper().replace('-', '')}" for s in API_SERVICES},
        "nodeAgents": {"node-1": "UNODE1"}}}}))  # fmt: skip
    docs = render(helm, "-f", str(CHART / "values-production.yaml"), "-f", str(keys))
    pods = _pod_specs(docs)
    assert set(pods) == API_SERVICES | {"node-agent"}
    for name, pod in pods.items():
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["NATS_URL"].startswith("tls://"), name
        assert env["NATS_NKEY_SEED_FILE"] == "/etc/koord/nats/identity.nk", name
        assert env["NATS_CA_FILE"] == "/etc/koord/nats-ca/ca.crt", name
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["nats-ca"]["secret"]["secretName"] == "koord-nats-ca", name
        if name != "node-agent":
            assert any(k.endswith("API_AUTH") and v == "tokenreview" for k, v in env.items()), name
            assert volumes["nats-identity"]["secret"]["secretName"] == "koord-nats-identities", name
    ext_env = {e["name"]: e.get("value") for e in pods["scheduler-extender"]["containers"][0]["env"]}
    assert ext_env["KOORD_EXTENDER_HTTP_TLS_CLIENT_CA_FILE"] == "/etc/koord/extender-tls/ca.crt"
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("nats-authorization"))
    users = json.loads(cm["data"]["authorization.conf"])["authorization"]["users"]
    assert len(users) == len(API_SERVICES) + 1
    sched = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("kube-scheduler-config"))
    (ext,) = yaml.safe_load(sched["data"]["kube-scheduler-config.yaml"])["extenders"]
    assert ext["urlPrefix"].startswith("https://") and ext["enableHTTPS"] is True
    assert ext["tlsConfig"]["certFile"] and ext["tlsConfig"]["keyFile"] and ext["tlsConfig"]["caFile"]
    assert ext["ignorable"] is True


def test_extender_and_webhook_outages_are_chosen_deliberately():
    """kube-scheduler goes on without the extender (ignorable: load-aware placement is an
    optimisation; the in-tree fit still holds batch pods to the batch-* allocatable the
    slo-controller published, so nothing can overcommit); the webhook fails open (Ignore: a pod
    created while it is down misses its profile and runs as what it asked for, never as more
    batch). Both are in the examples and the chart's defaults."""
    example = yaml.safe_load((ROOT / "deploy" / "scheduler" / "kube-scheduler-config.yaml").read_text())
    ext = example["extenders"][0]
    assert ext["ignorable"] is True and ext["httpTimeout"] == "5s"
    assert ext["enableHTTPS"] is True and ext["tlsConfig"]["certFile"] and ext["tlsConfig"]["caFile"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["schedulerConfig"]["ignorable"] is True
    assert values["webhook"]["failurePolicy"] == "Ignore"


API_SERVICES = {"metrics-collector", "slo-controller", "scheduler-extender", "descheduler", "recommender"}


def _pod_specs(docs) -> dict[str, dict]:
    return {d["metadata"]["labels"]["app.kubernetes.io/name"]: d["spec"]["template"]["spec"]
            for d in docs if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")}  # fmt: skip


@pytest.mark.parametrize("auth", ["tokenreview", "token"])
def test_services_that_review_tokens_are_auth_delegators_with_their_token_mounted(helm, auth):
    """With api.auth tokenreview (the default) every service that serves an API reviews its
    callers' bearer tokens as itself: its service account is bound to system:auth-delegator (the
    ClusterRole that may create tokenreviews) and its token is mounted, the collector's too,
    which has no cluster access of its own. The node agent serves only probes: no binding. With
    a static token nothing is bound and the collector mounts no token."""
    docs = render(helm, "--set", f"api.auth={auth}")
    delegators = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRoleBinding"
                  and d["roleRef"]["name"] == "system:auth-delegator"}  # fmt: skip
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    pods = _pod_specs(docs)
    reviewing = API_SERVICES if auth == "tokenreview" else set()
    assert set(delegators) == {f"koord-{s}-auth-delegator" for s in reviewing}
    for service in reviewing:
        binding = delegators[f"koord-{service}-auth-delegator"]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                      "name": "system:auth-delegator"}  # fmt: skip
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"koord-{service}", "namespace": "koord-system"}]
        assert accounts[f"koord-{service}"]["automountServiceAccountToken"] is True
        assert pods[service].get("automountServiceAccountToken", True) is True, service
        assert pods[service]["serviceAccountName"] == f"koord-{service}"
    collector_mounts = auth == "tokenreview"
    assert accounts["koord-metrics-collector"]["automountServiceAccountToken"] is collector_mounts
    assert pods["metrics-collector"]["automountServiceAccountToken"] is collector_mounts
    env = {e["name"]: e.get("value") for e in pods["metrics-collector"]["containers"][0]["env"]}
    assert env["KOORD_COLLECTOR_API_AUTH"] == auth

