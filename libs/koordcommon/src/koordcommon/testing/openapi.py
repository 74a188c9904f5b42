"""Drive a service's HTTP server with generated requests and require that none causes a server
error: every operation of its own OpenAPI with schemathesis (generated paths, queries and
bodies), and requests off the description (any method, paths near and far from its routes,
bodies of any bytes) with hypothesis."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["assert_no_server_errors", "assert_stray_requests_answered"]


def assert_no_server_errors(app: Any, min_operations: int = 1, max_examples: int = 15,
                            headers: dict[str, str] | None = None) -> list[str]:
    """Every operation of `app`'s /openapi.json, `max_examples` generated requests each; a 5xx,
    or an error without a body, fails. `headers` go with every request (e.g. the bearer token,
    so writes reach their handlers instead of the guard's 401). Returns the operations driven."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= min_operations, [op.label for op in operations]

    def fuzzer(op):
        @given(case=op.as_strategy())
        @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case):
            response = case.call(headers=headers)
            case.validate_response(response, checks=(not_a_server_error,))
            if response.status_code >= 400:
                assert response.content, f"{op.label}: an error must say what was wrong"

        return fuzz

    for op in operations:
        fuzzer(op)()
    return [op.label for op in operations]


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def assert_stray_requests_answered(app: Any, max_examples: int = 150, headers: dict[str, str] | None = None) -> None:
    """Requests the description does not promise an answer to: any method, on paths made of the
    app's own path segments and arbitrary text (so some land on real routes with the wrong method
    or a bad parameter), with a body of any bytes, JSON or not. Each is answered below 500."""
    from urllib.parse import quote

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from starlette.testclient import TestClient

    client = TestClient(app, raise_server_exceptions=False)
    spec = client.get("/openapi.json")
    described = list((spec.json().get("paths") or {}) if spec.status_code == 200 else {})
    known = sorted({seg for p in described for seg in p.strip("/").split("/") if seg and "{" not in seg}
                   | {"healthz", "readyz", "metrics", "api", "v1"})  # fmt: skip
    segment = st.one_of(st.sampled_from(known), st.text(min_size=1, max_size=12).map(lambda t: quote(t, safe="")))
    paths = st.one_of(st.sampled_from(described or ["/"]), st.lists(segment, min_size=0, max_size=5).map(
        lambda segs: "/" + "/".join(segs)))
    bodies = st.one_of(st.just(b""), st.binary(max_size=200), st.sampled_from([b"{}", b"[]", b"null", b'{"a":'])
                       | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                                         max_size=3),
                                      max_leaves=8).map(lambda v: json.dumps(v).encode()))  # fmt: skip
    query = st.dictionaries(st.sampled_from(["limit", "offset", "from", "to", "step", "nodes", "node", "x"]),
                            st.text(max_size=8), max_size=3)  # fmt: skip

    @given(method=st.sampled_from(METHODS), path=paths, body=bodies, params=query)
    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def stray(method, path, body, params):
        response = client.request(method, path, content=body if method not in ("GET", "HEAD") else None,
                                  params=params, headers={"content-type": "application/json", **(headers or {})})  # fmt: skip
        assert response.status_code < 500, f"{method} {path} {params} {body[:80]!r}: {response.status_code} {response.text[:300]}"

    stray()
