"""The node agent's HTTP server driven by generated requests through the whole chassis (guard,
app). It serves no REST API of its own (its OpenAPI lists no operation): only the probes and
/metrics, which generated requests of any method, path and body never make fail with a 5xx."""

from __future__ import annotations

from koordcommon.service import Service
from koordcommon.testing.openapi import assert_no_server_errors, assert_stray_requests_answered
from node_agent.settings import AgentSettings


def test_no_generated_request_causes_a_server_error(tmp_path):
    svc = Service("node-agent", AgentSettings(data_dir=str(tmp_path)))
    svc.mark_started()
    assert assert_no_server_errors(svc.asgi(), min_operations=0) == []
    assert_stray_requests_answered(svc.asgi())
