"""Drive a service's REST API from its own OpenAPI with schemathesis (generated paths, queries
and bodies) and require that no request causes a server error."""

from __future__ import annotations

from typing import Any

__all__ = ["assert_no_server_errors"]


def assert_no_server_errors(app: Any, min_operations: int = 1, max_examples: int = 15) -> list[str]:
    """Every operation of `app`'s /openapi.json, `max_examples` generated requests each; a 5xx,
    or an error without a body, fails. Returns the operations driven."""
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
            response = case.call()
            case.validate_response(response, checks=(not_a_server_error,))
            if response.status_code >= 400:
                assert response.content, f"{op.label}: an error must say what was wrong"

        return fuzz

    for op in operations:
        fuzzer(op)()
    return [op.label for op in operations]
