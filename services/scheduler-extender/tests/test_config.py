"""The shipped KubeSchedulerConfiguration, the settings, the metrics and the service wiring."""

import re

import pytest
import yaml
from koordcommon.paths import repo_root
from prometheus_client import REGISTRY
from scheduler_extender.core import wire
from scheduler_extender.core.state import ClusterState
from scheduler_extender.main import build
from scheduler_extender.settings import Settings

CONFIG = repo_root() / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_extended_resource_name(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName as kube-scheduler's config validation applies it."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain, _, short = name.partition("/")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return False  # native resources, not extended ones
    return bool(_DNS1123.match(domain)) and len(domain) <= 253 and bool(_QUALIFIED.match(short)) and len(short) <= 63


@pytest.mark.parametrize(
    "name, valid",
    [
        ("koordinator.sh/batch-cpu", True),
        ("koordinator.sh/batch-memory", True),
        ("example.com/foo", True),
        ("kubernetes.io/batch-cpu", False),
        ("cpu", False),
        ("requests.example.com/foo", False),
    ],
)
def test_extended_resource_names(name, valid):
    assert is_extended_resource_name(name) is valid


def test_kube_scheduler_config():
    text = CONFIG.read_text()
    cfg = yaml.safe_load(text)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    [ext] = cfg["extenders"]
    assert ext["urlPrefix"].endswith(":10262")
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"]) == ("filter", "prioritize", "preempt")
    assert "bindVerb" not in ext
    assert ext["weight"] > 0  # required when prioritizeVerb is set
    assert re.fullmatch(r"\d+(ms|s|m)", ext["httpTimeout"])
    assert isinstance(ext["nodeCacheCapable"], bool) and isinstance(ext["ignorable"], bool)
    for r in ext.get("managedResources") or []:
        assert is_extended_resource_name(r["name"]), r
    # the documented example (commented out) names a valid extended resource, and the text says why
    # the kubernetes.io name is not allowed there
    example = re.search(r"#\s*- name: (\S+)", text).group(1)
    assert is_extended_resource_name(example)
    assert "kubernetes.io/batch-cpu does not" in text


def test_settings_defaults_and_env(monkeypatch):
    s = Settings()
    assert s.http_port == 10262
    cfg = s.extender_config()
    assert (cfg.load.usage_thresholds.cpu, cfg.load.usage_thresholds.memory) == (65, 95)
    assert (cfg.estimator.cpu_factor, cfg.estimator.memory_factor) == (85, 70)
    assert cfg.load.node_metric_expiration_s == 180 and cfg.load.filter_expired_node_metrics
    monkeypatch.setenv("KOORD_EXTENDER_USAGE_THRESHOLDS", '{"cpu": 70, "memory": 90}')
    monkeypatch.setenv("KOORD_EXTENDER_SCORE_MAPPING", "absolute")
    s = Settings()
    assert s.extender_config().load.usage_thresholds.cpu == 70 and s.score_mapping == "absolute"
    monkeypatch.setenv("KOORD_EXTENDER_USAGE_THRESHOLDS", '{"cpu": 170}')
    with pytest.raises(ValueError, match="0..100"):
        Settings()


def test_service_routes():
    svc, _ = build(Settings())
    paths = {getattr(r, "path", "") for r in svc.app.routes}
    assert {"/healthz", "/readyz", "/metrics", "/api/v1/summary"} <= paths
    # the verbs are answered by the front the server runs, ahead of the app
    assert set(svc.post_routes.routes) == {"/filter", "/prioritize", "/preempt"}
    svc2, _ = build(Settings(url_prefix="/scheduler/"))
    assert set(svc2.post_routes.routes) == {"/scheduler/filter", "/scheduler/prioritize", "/scheduler/preempt"}


async def test_filtered_nodes_are_counted_by_reason():
    import httpx
    from scheduler_extender import api

    reason = "node(s) unknown to the extender: no node, NodeMetric or NodeResource seen for it"
    before = REGISTRY.get_sample_value("koord_extender_nodes_filtered_total", {"reason": reason}) or 0
    ok_before = REGISTRY.get_sample_value("koord_extender_requests_total", {"verb": "filter", "outcome": "ok"}) or 0
    app = api.create_app(ClusterState())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender") as client:
        r = await client.post(
            "/filter", content=wire.encode_extender_args({"metadata": {"name": "p"}}, None, ["x", "y"])
        )
    assert r.status_code == 200
    assert REGISTRY.get_sample_value("koord_extender_nodes_filtered_total", {"reason": reason}) == before + 2
    assert (
        REGISTRY.get_sample_value("koord_extender_requests_total", {"verb": "filter", "outcome": "ok"}) == ok_before + 1
    )
    assert REGISTRY.get_sample_value("koord_extender_request_seconds_count", {"verb": "filter"}) >= 1


@pytest.mark.parametrize(
    "values, cumulative",
    [
        ([], [0, 0, 0, 0]),
        ([0.5, 1.0, 1.5, 2.0, 9.0], [2, 3, 4, 5]),  # le 1: 0.5 and 1.0 (bounds are inclusive)
        ([3.0, 3.0], [0, 0, 0, 2]),
    ],
)
def test_plain_histogram_buckets(values, cumulative):
    from scheduler_extender.metrics import Histogram

    h = Histogram((1, 1.5, 2))
    for v in values:
        h.observe(v)
    assert [n for _, n in h.buckets()] == cumulative
    assert [le for le, _ in h.buckets()] == ["1.0", "1.5", "2.0", "+Inf"]
    assert h.total == sum(values)


def test_plugins_run_in_the_configured_order_and_unknown_names_are_refused():
    s = Settings(plugins=["Reservation", "LoadAwareScheduling"], plugin_weights={"LoadAwareScheduling": 3})
    st = ClusterState(s.extender_config())
    # NodeKnown always first: the others judge only names that have data
    assert [p.name for p in st.plugins] == ["NodeKnown", "Reservation", "LoadAwareScheduling"]
    assert st.plugin("LoadAwareScheduling").weight == 3 and st.plugin("Reservation").weight == 5000
    assert [p.name for p in ClusterState().plugins] == ["NodeKnown", "LoadAwareScheduling", "BatchMidFit",
                                                   "NodeNUMAResource", "Reservation"]
    with pytest.raises(ValueError, match="unknown plugin.*Gang.*known: NodeKnown"):
        Settings(plugins=["LoadAwareScheduling", "Gang"])
    with pytest.raises(ValueError, match="weight for unknown plugin 'Quota'"):
        Settings(plugin_weights={"Quota": 1})
