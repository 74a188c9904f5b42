"""Bad input, generated: hypothesis drives every bus schema, the quantity parser, the ConfigMap
parser and the extender / AdmissionReview decoders with arbitrary and near-valid input.

The property everywhere: no exception but the one each decoder promises escapes (SchemaError /
OutOfRange on the bus, QuantityError, ConfigError, WireError, AdmissionError), so a bad message
is dead-lettered and counted, a bad HTTP body answered 4xx with a message, never a crash. The
bus-level half (dead letter, counter) is test_bounds; the HTTP half is test_openapi_fuzz.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from extender_helpers import T0, Gi, metric, node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduler_extender.core import wire
from scheduler_extender.core.extender import filter_request, preempt_request, prioritize_request
from scheduler_extender.core.state import ClusterState

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON values of any shape, a few levels deep
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)

@pytest.fixture(scope="module")
def extender_state() -> ClusterState:
    st_ = ClusterState(clock=lambda: T0 + 10_000)
    for n in ("n1", "n2"):
        st_.apply_node(node(n))
        st_.apply_metric(metric(n, 1000, Gi))
    return st_


def _pod_like() -> st.SearchStrategy[Any]:
    container = st.fixed_dictionaries({"name": st.text(max_size=5)}, optional={
        "resources": st.fixed_dictionaries({}, optional={
            "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "koordinator.sh/batch-cpu"]), json_values, max_size=2),
            "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), json_values, max_size=2)})})
    return st.fixed_dictionaries({}, optional={
        "metadata": st.fixed_dictionaries({}, optional={"name": json_values, "namespace": json_values, "uid": json_values,
                                                        "labels": json_values, "annotations": json_values}),
        "spec": st.fixed_dictionaries({}, optional={"containers": st.lists(container, max_size=2) | json_values,
                                                    "priority": json_values, "nodeName": json_values}),
    })


@FAST
@given(body=st.one_of(
    st.binary(max_size=100),
    st.builds(lambda pod, names: json.dumps({"Pod": pod, "NodeNames": names}).encode(), _pod_like(),
              st.one_of(st.lists(st.sampled_from(["n1", "n2", "nx"]), max_size=3), json_values)),
    st.builds(lambda pod, nodes: json.dumps({"Pod": pod, "Nodes": nodes}).encode(), _pod_like(), json_values),
))
def test_extender_decoders_raise_only_wire_error(extender_state, body):
    for decode_args, verb in ((wire.decode_extender_args, filter_request), (wire.decode_extender_args, prioritize_request),
                              (wire.decode_preemption_args, preempt_request)):
        try:
            verb(extender_state, decode_args(body))
        except wire.WireError as exc:
            assert str(exc)
        except msgspec.ValidationError:  # pragma: no cover - would be a decoder letting a type error through
            raise


