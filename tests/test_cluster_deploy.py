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


SERVERS = {"nats": "nats-1", "nats-2": "nats-2", "nats-3": "nats-3"}


def option_values(cmd: list[str], option: str) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd) if a == option]


def test_compose_cluster_profile_runs_three_routed_servers():
    for svc, name in SERVERS.items():
        cmd = CLUSTER["services"][svc]["command"]
        assert cmd[cmd.index("-n") + 1] == name and "-js" in cmd
        # TLS, the identities and the routes, all from the generated configuration: no route on
        # the command line, where it would carry no credential
        assert cmd[:2] == ["-c", "/etc/koord/secrets/nats-server.conf"]
        assert not {"--cluster", "--routes", "--cluster_name", "--cluster_listen"} & set(cmd), svc
    init = CLUSTER["services"]["secrets-init"]["command"]
    assert set(option_values(init, "--host")) == set(SERVERS)  # the certificate names all
    assert option_values(init, "--route") == list(SERVERS)  # the cluster block routes to all
    assert {s for s, v in CLUSTER["services"].items() if "cluster" in v.get("profiles", [])} >= {"nats-2", "nats-3"}


def test_compose_cluster_secrets_close_the_route_port(tmp_path):
    """The cluster's secrets-init command, run here: the configuration every server reads routes
    to all three on 6222 with the generated route password, over TLS verified against the CA with
    a certificate (client and server use) naming every server; the password is not printed."""
    import json
    import os

    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID
    from koordctl.cli import app
    from typer.testing import CliRunner

    cmd = list(CLUSTER["services"]["secrets-init"]["command"])
    out = tmp_path / "secrets"
    cmd[cmd.index("--out") + 1] = str(out)
    cmd[cmd.index("--owner") + 1] = f"{os.getuid()}:{os.getgid()}"
    result = CliRunner().invoke(app, cmd[1:])
    assert result.exit_code == 0, result.output
    password = (out / "nats-route.password").read_text().strip()
    assert len(password) >= 40 and password not in result.output
    assert (out / "nats-route.password").stat().st_mode & 0o777 == 0o600
    cluster = json.loads((out / "nats-server.conf").read_text())["cluster"]
    assert cluster["listen"] == "0.0.0.0:6222"
    assert cluster["authorization"] == {"user": "koord-route", "password": password, "timeout": 2}
    assert cluster["routes"] == [f"tls://koord-route:{password}@{s}:6222" for s in SERVERS]
    tls = cluster["tls"]
    assert tls["verify"] is True and Path(tls["ca_file"]) == out / "ca.crt"
    cert = x509.load_pem_x509_certificate(Path(tls["cert_file"]).read_bytes())
    assert set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)) >= set(SERVERS)  # fmt: skip
    usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert usages == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}  # it dials and is dialled


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


NATS_VALUES = ROOT / "deploy" / "helm" / "koord" / "values-cluster-nats.yaml"


def test_the_nats_chart_closes_the_route_port():
    """values-cluster-nats.yaml (nats/nats 1.x names: config.cluster.tls, config.cluster.merge,
    tlsCA, container.env): TLS on the routes verified both ways against the CA, the route user
    natsauth gives, its password from the Secret through the environment (never a value), and a
    tls:// route with the credential to every server of the StatefulSet."""
    from koordcommon import natsauth

    nats = yaml.safe_load(NATS_VALUES.read_text())
    cluster = nats["config"]["cluster"]
    replicas = cluster["replicas"]
    assert cluster["enabled"] is True and replicas == 3 and nats["config"]["jetstream"]["enabled"] is True
    assert cluster["tls"]["enabled"] is True and cluster["tls"]["secretName"] and cluster["tls"]["merge"]["verify"] is True
    assert nats["tlsCA"]["enabled"] is True and nats["tlsCA"]["secretName"]
    assert nats["config"]["nats"]["tls"]["enabled"] is True  # clients too (the services' tls:// URLs)
    auth = cluster["merge"]["authorization"]
    assert auth["user"] == natsauth.ROUTE_USER and auth["password"] == "<< $CLUSTER_ROUTE_PASSWORD >>"
    assert "routeURLs" not in cluster, "a password value would land in the chart's ConfigMap"
    assert cluster["merge"]["routes"] == [f"<< $ROUTE_{i} >>" for i in range(replicas)]
    env = nats["container"]["env"]
    assert env["CLUSTER_ROUTE_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "password"
    # Kubernetes expands $(VAR) only from variables listed before; the chart lists env by name
    assert min(env) == "CLUSTER_ROUTE_PASSWORD"
    for i in range(replicas):
        assert env[f"ROUTE_{i}"] == f"tls://{natsauth.ROUTE_USER}:$(CLUSTER_ROUTE_PASSWORD)@nats-{i}.nats-headless:6222"
    header = NATS_VALUES.read_text()
    for i in range(replicas):  # the route certificate names each server as the others dial it
        assert f"--route nats-{i}.nats-headless" in header
    # the secrets the header creates are the ones the values read
    for secret in (nats["tlsCA"]["secretName"], cluster["tls"]["secretName"], nats["config"]["nats"]["tls"]["secretName"],
                   env["CLUSTER_ROUTE_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"]):  # fmt: skip
        assert f" {secret} --" in header, secret


def test_chart_cluster_clients_use_tls():
    values = yaml.safe_load(VALUES.read_text())["nats"]
    assert [u.split("://")[0] for u in values["url"].split(",")] == ["tls"] * 3
    assert values["tlsCASecret"]
