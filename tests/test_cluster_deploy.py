"""The clustered deployment: docker-compose's cluster profile and the chart's values-cluster.yaml
run a 3-server NATS cluster with streams replicated 3 times, the collector as replicas of one
durable consumer and the slo-controller as a consumer group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from slo_controller.settings import SLOSettings

sys.path.insert(0, str(Path(__file__).parent))  # the chart's render helpers and helm fixture
from test_helm_chart import by_kind, helm, one, render  # noqa: F401  (helm is a fixture)

ROOT = Path(__file__).resolve().parents[1]
BASE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
CLUSTER = yaml.safe_load((ROOT / "deploy" / "compose" / "cluster.yml").read_text())
VALUES = ROOT / "deploy" / "helm" / "koord" / "values-cluster.yaml"


def test_compose_cluster_profile_runs_three_routed_servers():
    servers = {"nats": "nats-1", "nats-2": "nats-2", "nats-3": "nats-3"}
    for svc, name in servers.items():
        cmd = CLUSTER["services"][svc]["command"]
        assert cmd[cmd.index("-n") + 1] == name and "-js" in cmd
        routes = set(cmd[cmd.index("--routes") + 1].split(","))
        assert routes == {f"nats://{s}:6222" for s in servers if s != svc}  # each routes to the two others
        assert cmd[:2] == ["-c", "/etc/koord/secrets/nats-server.conf"]  # TLS and the identities, as one server has
    hosts = CLUSTER["services"]["secrets-init"]["command"]
    assert {hosts[i + 1] for i, a in enumerate(hosts) if a == "--host"} == set(servers)  # the certificate names all
    assert {s for s, v in CLUSTER["services"].items() if "cluster" in v.get("profiles", [])} >= {"nats-2", "nats-3"}


def test_compose_cluster_services_use_every_server_and_replicated_streams():
    for name in BASE["services"]:
        if name in ("nats", "postgres", "secrets-init"):
            continue
        env = CLUSTER["services"][name]["environment"]
        assert env["NATS_URL"].split(",") == ["tls://nats:4222", "tls://nats-2:4222", "tls://nats-3:4222"], name
        assert env["NATS_STREAM_REPLICAS"] == "3", name
    groups = []
    for name in ("slo-controller", "slo-controller-2"):
        env = {k: str(v) for k, v in CLUSTER["services"][name]["environment"].items()}
        groups.append(SLOSettings(group_members=int(env["KOORD_SLO_GROUP_MEMBERS"]),
                                  group_member=int(env["KOORD_SLO_GROUP_MEMBER"])).group())  # fmt: skip
    assert sorted(groups) == [(0, 2), (1, 2)]
    assert CLUSTER["services"]["metrics-collector-2"]["extends"]["service"] == "metrics-collector"


@pytest.fixture(scope="module")
def cluster_docs(helm) -> list[dict]:  # noqa: F811
    return render(helm, "-f", str(VALUES))


def env_of(doc: dict) -> dict:
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_chart_cluster_values(cluster_docs):
    slo = one(cluster_docs, "StatefulSet", "koord-slo-controller")
    assert slo["spec"]["replicas"] == 3 and slo["spec"]["podManagementPolicy"] == "Parallel"
    env = env_of(slo)
    assert env["KOORD_SLO_GROUP_MEMBERS"] == "3"
    assert env["KOORD_SLO_GROUP_MEMBER"] == {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}
    assert "koord-slo-controller" not in by_kind(cluster_docs, "Deployment")
    assert one(cluster_docs, "Deployment", "koord-metrics-collector")["spec"]["replicas"] == 3
    workloads = [*by_kind(cluster_docs, "Deployment").values(), *by_kind(cluster_docs, "StatefulSet").values(),
                 *by_kind(cluster_docs, "DaemonSet").values()]  # fmt: skip
    for doc in workloads:
        env = env_of(doc)
        assert env["NATS_STREAM_REPLICAS"] == "3", doc["metadata"]["name"]
        assert len(env["NATS_URL"].split(",")) == 3, doc["metadata"]["name"]


def test_chart_default_keeps_one_slo_controller_deployment(helm):  # noqa: F811
    docs = render(helm)
    assert one(docs, "Deployment", "koord-slo-controller")["spec"]["replicas"] == 1
    assert "NATS_STREAM_REPLICAS" not in env_of(one(docs, "Deployment", "koord-slo-controller"))
