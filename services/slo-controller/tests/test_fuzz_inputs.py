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

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slo_controller.core.admission import AdmissionError, MutationContext, mutate_review, parse_review, validate_review
from slo_controller.core.configmap import ConfigState

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON values of any shape, a few levels deep
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)

CONFIG_KEYS = ["colocation-config", "resource-threshold-config", "resource-qos-config", "cpu-burst-config",
               "system-config", "host-application-config", "unknown-key"]


@FAST
@given(data=st.dictionaries(st.sampled_from(CONFIG_KEYS),
                            st.one_of(st.text(max_size=40), json_values.map(json.dumps),
                                      st.dictionaries(st.sampled_from(["enable", "clusterStrategy", "nodeConfigs",
                                                                       "cpuReclaimThresholdPercent", "degradeTimeMinutes"]),
                                                      json_values, max_size=3).map(json.dumps)),
                            max_size=3))
def test_configmap_parser_refuses_keys_by_name_and_never_crashes(data):
    state = ConfigState()
    result = state.apply(data)
    for key, err in result.errors.items():
        assert key in data and err  # a refusal names a key it was given, with the reason
    assert state.apply(data).changed == ()  # the same ConfigMap again changes nothing


CONTEXT = MutationContext(profiles=list, namespace_labels=lambda ns: {}, priority_classes=dict)


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
    json_values,
    st.fixed_dictionaries({"apiVersion": st.just("admission.k8s.io/v1"), "kind": st.just("AdmissionReview")},
                          optional={"request": st.fixed_dictionaries(
                              {"uid": st.text(max_size=8)},
                              optional={"operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", 3]),
                                        "namespace": json_values, "object": _pod_like() | json_values,
                                        "resource": json_values, "oldObject": json_values})}),
))
def test_admission_review_decoder_raises_only_admission_error(body):
    try:
        req = parse_review(body)
    except (AdmissionError, ValueError):
        return
    for answer in (validate_review, lambda r: mutate_review(r, CONTEXT)):
        out = answer(req)
        assert out["response"]["uid"] == req.uid
