"""Bus message schemas: round trips, tolerance to unknown fields, readable SchemaErrors."""

from __future__ import annotations

import json

import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import (
    AggregatedUsage,
    ContainerRecommendation,
    DeadLetter,
    Event,
    NodeMetric,
    NodeMetricSample,
    NodeResource,
    NodeSLO,
    NodeSLOSpec,
    Owner,
    PodMetric,
    PodUsage,
    Recommendation,
    ResourceThresholdStrategy,
    SchemaError,
    SimMutation,
    UsageProfile,
    decode,
)

R = Resources

EXAMPLES = [
    NodeMetricSample(
        node="ip-10-0-0-1.ec2.internal",
        capacity=R(8000, 32 << 30),
        allocatable=R(7800, 30 << 30),
        node_usage=R(2500, 12 << 30),
        system_usage=R(300, 1 << 30),
        pods=[
            PodUsage(
                uid="u1", namespace="default", name="web-0", owner=Owner(kind="StatefulSet", name="web"),
                qos=QoSClass.LS, priority_class=PriorityClass.PROD, priority=9000,
                requests=R(1000, 2 << 30), limits=R(2000, 4 << 30), usage=R(700, 1 << 30),
            ),
            PodUsage(uid="u2", namespace="batch", name="job-1", qos=QoSClass.BE, priority_class=PriorityClass.BATCH,
                     batch_requests=R(500, 1 << 30), usage=R(450, 900 << 20)),
        ],
        extensions={"psi": {"cpu_some_avg10": 1.5}},
    ),
    NodeMetric(
        node="n1",
        node_usage=R(3000, 10 << 30),
        aggregated_node_usages=[AggregatedUsage(duration_s=300, avg=R(2900, 10 << 30), p95=R(3500, 11 << 30))],
        pods=[PodMetric(uid="u1", namespace="default", name="web-0", usage=R(700, 1 << 30))],
        prod_reclaimable=R(1200, 4 << 30),
    ),
    NodeResource(node="n1", batch=R(4000, 8 << 30), mid=None, reason="ok", written=True, metric_ts=1_700_000_000_000),
    NodeSLO(node="n1", spec=NodeSLOSpec(resourceUsedThresholdWithBE=ResourceThresholdStrategy(enable=True, cpuSuppressThresholdPercent=60))),
    Recommendation(
        namespace="default", owner_kind="Deployment", owner_name="web",
        containers=[ContainerRecommendation(
            container="app", target=R(250, 256 << 20), lower_bound=R(200, 200 << 20), upper_bound=R(400, 512 << 20),
            profiles=[UsageProfile(window_s=3600, p90=R(240, 250 << 20))], diurnal_cpu_milli=list(range(24)),
            method="autopilot-ml-units",
        )],
    ),
    Event(kind="evict", node="n1", action="evict", reason="memory above 70%", target={"namespace": "b", "name": "p"}),
    DeadLetter(service="collector", subject="koord.metrics.n1", reason="invalid", raw_b64="AAE=", headers={"a": "b"}),
    SimMutation(op="pod_bound", payload={"uid": "u1", "node": "n1"}),
]  # fmt: skip


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    msg.source, msg.seq = "svc/host-1", 42
    data = msg.encode()
    back = decode(type(msg), data)
    assert back == msg
    assert json.loads(data)["schema"] == {"name": type(msg).SCHEMA, "version": type(msg).VERSION}
    assert back.msg_id == "svc/host-1:42"


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_unknown_fields_are_ignored_at_every_level(msg):
    doc = json.loads(msg.encode())
    doc["field_from_the_future"] = {"x": 1}
    doc["schema"]["build"] = "2027"
    if isinstance(msg, NodeMetricSample):
        doc["pods"][0]["new_pod_field"] = [1, 2]
        doc["node_usage"]["gpu"] = 3
    back = decode(type(msg), json.dumps(doc))
    assert back == msg


def test_schema_defaults_to_the_class_and_older_versions_are_accepted():
    assert decode(Event, b'{"kind": "qos", "action": "suppress"}').schema_.name == "Event"
    assert decode(Event, b'{"schema": {"name": "Event", "version": 0}, "kind": "qos", "action": "x"}').kind == "qos"


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (Event, b'{"schema": {"name": "NodeSLO", "version": 1}, "kind": "k", "action": "a"}',
         "invalid Event: <root>: Value error, schema 'NodeSLO' is not 'Event'"),
        (Event, b'{"schema": {"name": "Event", "version": 2}, "kind": "k", "action": "a"}',
         "invalid Event: <root>: Value error, Event version 2 is newer than supported 1"),
        (Event, b'{"kind": "k"}', "invalid Event: action: Field required"),
        (NodeMetricSample, b'{"node": "n1"}', "invalid NodeMetricSample: node_usage: Field required"),
        (NodeMetricSample, b'{"node": "n1", "node_usage": {"cpu_milli": "lots"}}',
         "invalid NodeMetricSample: node_usage.cpu_milli: Expected `int`, got `str`"),
        (NodeMetricSample, b'{"node": "n1", "node_usage": {}, "pods": [{"uid": "u", "namespace": "n", "name": "p", "qos": "XX"}]}',
         "invalid NodeMetricSample: pods.0.qos: Invalid enum value 'XX'"),
        (NodeMetricSample, b'{"schema": {"name": "Event", "version": 1}, "node": "n1", "node_usage": {}}',
         "invalid NodeMetricSample: <root>: schema 'Event' is not 'NodeMetricSample'"),
        (NodeMetric, b'{"schema": {"name": "NodeMetric", "version": 9}, "node": "n1", "node_usage": {}}',
         "invalid NodeMetric: <root>: NodeMetric version 9 is newer than supported 1"),
        (NodeMetricSample, b"[1, 2]", "invalid NodeMetricSample: <root>: Expected `object`, got `array`"),
        (NodeMetricSample, b"{", "invalid NodeMetricSample: <root>: Invalid JSON"),
        (NodeMetricSample, b'{"node": "n1", "node_usage": {}, "pods": [{"uid": "u"}]}',
         "invalid NodeMetricSample: pods.0.namespace: Field required"),
        (Event, b"\xff\xfe", "invalid Event: <root>: Invalid JSON"),
        (Event, b"[1, 2]", "invalid Event: <root>: Input should be an object"),
        (Event, b"", "invalid Event: <root>: Invalid JSON"),
    ],
)  # fmt: skip
def test_bad_input_raises_schema_error_with_readable_reason(cls, data, message):
    with pytest.raises(SchemaError) as err:
        decode(cls, data)
    assert str(err.value).startswith(message)
    assert isinstance(err.value, ValueError)
