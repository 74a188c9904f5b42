"""pytest plugin (loaded in every package's tests): the `full_traces` marker.

A test marked `@pytest.mark.full_traces` reads the full trace set. Without it (KOORD_TRACE_DIR
unset) the test is skipped, saying so; with `KOORD_REQUIRE_TRACES=1` (CI where the full set
is present) a missing full set fails the test instead. Every other test runs on the sample
bundled with koordsim, which is always there.
"""

from __future__ import annotations

import os

import pytest

from . import traces

REQUIRE_ENV = "KOORD_REQUIRE_TRACES"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"full_traces: reads the full trace set ({traces.TRACE_DIR_ENV})")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("full_traces") is None:
        return
    try:
        full = traces.full_source()
    except traces.TracesNotFound as exc:
        pytest.fail(str(exc))
    if full is not None:
        return
    why = f"needs the full trace set: set {traces.TRACE_DIR_ENV} to its folder"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_ENV}=1)")
    pytest.skip(why)
