"""The collector's REST API driven from its own OpenAPI by schemathesis, through the whole
chassis (guard, app), and by requests off the description: no generated request causes a
server error; a bad one gets a 4xx that says what was wrong."""

from __future__ import annotations

from koordcommon.testing.openapi import assert_no_server_errors, assert_stray_requests_answered


def test_no_generated_request_causes_a_server_error(tmp_path):
    from metrics_collector.main import build
    from metrics_collector.settings import Settings
    from metrics_collector.store import Store

    url = f"sqlite:///{tmp_path / 'c.db'}"
    Store.open(url, tmp_path, migrate=True).close()  # main migrates before it serves
    svc, store = build(Settings(database_url=url, data_dir=str(tmp_path)))
    svc.mark_started()
    try:
        assert_no_server_errors(svc.asgi(), min_operations=10)
        assert_stray_requests_answered(svc.asgi())
    finally:
        store.close()
