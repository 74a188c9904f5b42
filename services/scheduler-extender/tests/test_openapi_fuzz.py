"""The extender's HTTP server driven by generated requests through the whole chassis (guard,
POST front, app): its verbs as its OpenAPI describes them (filter, prioritize, preempt, bind,
with the kube-scheduler extender/v1 bodies), its REST routes, and requests off the description.
No request causes a server error, and no verb fails inside (an internal failure would be
answered 200 with an Error, so the verbs' error count is held to zero as well)."""

from __future__ import annotations

import pytest
from extender_helpers import T0, Gi, metric, node
from koordcommon.testing.openapi import assert_no_server_errors, assert_stray_requests_answered
from scheduler_extender import api
from scheduler_extender.main import build
from scheduler_extender.metrics import METRICS
from scheduler_extender.settings import Settings

NODES = ("n1", "n2", "n3")


class Cluster:
    """The cluster port's bind: accepted for a known node, refused otherwise (as the API server would)."""

    def __init__(self) -> None:
        self.bound: list[tuple[str, str, str]] = []

    async def bind_pod(self, namespace, name, node, uid="", annotations=None):
        if node not in NODES:
            raise LookupError(f'nodes "{node}" not found')
        self.bound.append((namespace, name, node))


@pytest.fixture
def extender():
    svc, state = build(Settings(bind_verb=True))
    state.clock = lambda: T0 + 10_000
    for i, n in enumerate(NODES):
        state.apply_node(node(n))
        state.apply_metric(metric(n, 4000 * (i + 1), 8 * Gi * (i + 1)))
    svc.public_paths.add(api.install_bind(svc.app, state, Cluster()))
    svc.mark_started()
    return svc


def verb_errors() -> int:
    return sum(n for (verb, outcome), n in METRICS.requests.items() if outcome == "error" and verb != "bind")


def test_the_verbs_are_described_in_the_openapi(extender):
    from starlette.testclient import TestClient

    spec = TestClient(extender.asgi()).get("/openapi.json").json()
    for path in ("/filter", "/prioritize", "/preempt", "/bind"):
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert body.rsplit("/", 1)[1] in spec["components"]["schemas"], path
    assert spec["components"]["schemas"]["ExtenderArgs"]["required"] == ["Pod"]
    assert "/api/v1/explain/pods/{namespace}/{name}" in spec["paths"]


def test_no_generated_request_causes_a_server_error_or_a_failed_verb(extender):
    before = verb_errors()
    done = assert_no_server_errors(extender.asgi(), min_operations=6, max_examples=30)
    assert {"POST /filter", "POST /prioritize", "POST /preempt", "POST /bind"} <= set(done), done
    assert verb_errors() == before, dict(METRICS.requests)
    assert_stray_requests_answered(extender.asgi())
    assert verb_errors() == before, dict(METRICS.requests)


def test_the_verbs_stay_public_and_the_rest_needs_the_token(extender, tmp_path):
    """The verbs are open to kube-scheduler (no bearer token; TLS client auth in the deploy
    examples), other writes need the token."""
    from starlette.testclient import TestClient

    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    extender.settings = extender.settings.model_copy(update={"api_token_file": str(token)})
    client = TestClient(extender.asgi())
    body = {"Pod": {"metadata": {"name": "p", "namespace": "d", "uid": "u"}}, "NodeNames": list(NODES)}
    assert client.post("/filter", json=body).status_code == 200
    assert client.post("/prioritize", json=body).status_code == 200
    assert client.post("/api/v1/summary").status_code == 401


def test_generated_pods_on_known_nodes_get_a_verdict_from_every_verb(extender):
    """Hypothesis-generated ExtenderArgs whose candidates are the extender's own nodes, over HTTP:
    filter answers with each candidate passing or failing for a reason, prioritize scores every
    candidate 0-10, preempt keeps only known candidates; never an Error."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from scheduler_extender.core import wire
    from starlette.testclient import TestClient

    client = TestClient(extender.asgi())
    quantity = st.one_of(st.integers(0, 64_000).map(lambda m: f"{m}m"), st.integers(0, 64).map(str),
                         st.integers(0, 128).map(lambda g: f"{g}Gi"))  # fmt: skip
    resources = st.dictionaries(st.sampled_from(["cpu", "memory", "koordinator.sh/batch-cpu",
                                                 "koordinator.sh/batch-memory"]), quantity, max_size=4)  # fmt: skip
    container = st.builds(lambda n, r, lim: {"name": n, "resources": {"requests": r, "limits": lim}},
                          st.sampled_from(["main", "side"]), resources, resources)  # fmt: skip
    pods = st.builds(
        lambda name, prio, labels, containers: {
            "metadata": {"name": name, "namespace": "fuzz", "uid": f"uid-{name}", "labels": labels},
            "spec": {"containers": containers, **({"priority": prio} if prio is not None else {})}},
        st.text("abcdefgh", min_size=1, max_size=6), st.one_of(st.none(), st.sampled_from([3000, 5500, 7500, 9500])),
        st.fixed_dictionaries({}, optional={"koordinator.sh/qosClass": st.sampled_from(["LS", "BE", "LSR", "LSE"])}),
        st.lists(container, min_size=1, max_size=2))  # fmt: skip
    candidates = st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True)
    before = verb_errors()

    @given(pod=pods, names=candidates)
    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def verdicts(pod, names):
        args = {"Pod": pod, "NodeNames": names}
        filtered = client.post("/filter", json=args)
        assert filtered.status_code == 200, filtered.text
        result = wire.decode_filter_result(filtered.content)
        assert result.error == "", result.error
        failed = {**(result.failed_nodes or {}), **(result.failed_and_unresolvable or {})}
        assert sorted([*(result.node_names or []), *failed]) == sorted(names)
        assert all(reason for reason in failed.values())
        scores = wire.decode_host_priority_list(client.post("/prioritize", json=args).content)
        assert sorted(h for h, _ in scores) == sorted(names) and all(0 <= s <= 10 for _, s in scores)
        meta = {n: {"Pods": [], "NumPDBViolations": 0} for n in names}
        kept = client.post("/preempt", json={"Pod": pod, "NodeNameToMetaVictims": meta})
        assert kept.status_code == 200 and set(wire.decode_preemption_result(kept.content)) <= set(names)

    verdicts()
    assert verb_errors() == before, dict(METRICS.requests)
