"""The extender JSON against the exact encodings of kube-scheduler's TestCompatibility."""

import re

import numpy as np
import orjson
import pytest
from koordcommon.paths import fixtures_dir
from scheduler_extender.core import wire

CASES = {
    c["type"]: c
    for c in orjson.loads((fixtures_dir() / "kube-scheduler.extender.v1.types_test.compat.json").read_bytes())["cases"]
}


def _text(kind: str) -> bytes:
    return CASES[kind]["jsonText"].encode()


def _reencode(kind: str, body: bytes) -> bytes:
    """Decode with our decoder, then encode with our encoder for the same type."""
    if kind == "ExtenderArgs":
        a = wire.decode_extender_args(body)
        return wire.encode_extender_args(a.pod, a.nodes, a.node_names)
    if kind == "ExtenderFilterResult":
        r = wire.decode_filter_result(body)
        return wire.encode_filter_result(r.nodes, r.node_names, r.failed_nodes, r.failed_and_unresolvable, r.error)
    if kind == "HostPriority":
        [(host, score)] = wire.decode_host_priority_list(b"[" + body + b"]")
        return wire.encode_host_priority(host, score)
    if kind == "ExtenderBindingArgs":
        return wire.encode_binding_args(wire.decode_binding_args(body))
    if kind == "ExtenderBindingResult":
        return wire.encode_binding_result(wire.decode_binding_result(body))
    if kind == "ExtenderPreemptionArgs":
        p = wire.decode_preemption_args(body)
        return wire.encode_preemption_args(p.pod, p.node_to_victims, p.node_to_meta_victims)
    if kind == "ExtenderPreemptionResult":
        return wire.encode_preemption_result(wire.decode_preemption_result(body))
    raise AssertionError(kind)


def test_fixture_has_the_seven_encodings():
    assert sorted(CASES) == sorted(
        [
            "ExtenderArgs",
            "ExtenderFilterResult",
            "HostPriority",
            "ExtenderBindingArgs",
            "ExtenderBindingResult",
            "ExtenderPreemptionArgs",
            "ExtenderPreemptionResult",
        ]
    )


@pytest.mark.parametrize("kind", sorted(CASES))
def test_round_trip_is_byte_exact(kind):
    assert _reencode(kind, _text(kind)) == _text(kind)


def _lower_keys(v):
    """Key-lowercasing of embedded Kubernetes objects: Go decodes those case-insensitively too."""
    if isinstance(v, dict):
        return {k.lower(): _lower_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_lower_keys(x) for x in v]
    return v


@pytest.mark.parametrize("kind", sorted(CASES))
def test_lower_cased_keys_decode_to_the_same_values(kind):
    """The Go test lower-cases the whole JSON and expects the same value back."""
    lower = _text(kind).lower()
    assert _lower_keys(orjson.loads(_reencode(kind, lower))) == _lower_keys(orjson.loads(_text(kind)))


def test_lower_cased_args_decode_fields():
    a = wire.decode_extender_args(_text("ExtenderArgs").lower())
    assert a.node_names == ["node1"]
    assert a.pod["metadata"]["name"] == "podname"
    assert [wire.node_name_of(n) for n in a.nodes["items"]] == ["nodename"]
    p = wire.decode_preemption_args(_text("ExtenderPreemptionArgs").lower())
    assert p.node_to_meta_victims["foo"].uids == ["myuid"]
    assert p.node_to_meta_victims["foo"].num_pdb_violations == 1
    assert p.node_to_victims["foo"].pods[0]["metadata"]["name"] == "podname"


def test_exact_key_wins_over_case_folded_key():
    # Go takes the exact field name first, then a case-insensitive match.
    a = wire.decode_extender_args(
        b'{"pod":{"metadata":{"name":"a"}},"Pod":{"metadata":{"name":"b"}},"nodenames":["x"]}'
    )
    assert a.pod["metadata"]["name"] == "b"
    assert a.node_names == ["x"]


def test_go_html_escaping():
    assert wire.encode_filter_result(failed_nodes={"n<1>": "a & b"}) == (
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":{"n\\u003c1\\u003e":"a \\u0026 b"},'
        b'"FailedAndUnresolvableNodes":null,"Error":""}'
    )


def test_host_priority_list_is_an_array():
    assert wire.encode_host_priority_list(["a", "b"], [10, 0]) == b'[{"Host":"a","Score":10},{"Host":"b","Score":0}]'
    assert wire.encode_host_priority_list([], []) == b"[]"


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{", "not valid JSON"),
        (b"[]", "request body must be a JSON object, got array"),
        (b'{"Nodes":null,"NodeNames":["a"]}', "missing Pod"),
        (b'{"Pod":null,"NodeNames":["a"]}', "missing Pod"),
        (b'{"Pod":"x","NodeNames":["a"]}', "Pod must be a JSON object, got string"),
        (b'{"Pod":{},"Nodes":null,"NodeNames":null}', "neither Nodes nor NodeNames"),
        (b'{"Pod":{},"NodeNames":{"a":1}}', "NodeNames must be an array of node names"),
        (b'{"Pod":{},"Nodes":{"items":[{"metadata":{}}]}}', "metadata.name"),
        (b'{"Pod":{},"Nodes":{"items":"x"}}', "Nodes.items must be an array"),
    ],
)
def test_bad_args_raise_wire_error(body, message):
    with pytest.raises(wire.WireError, match=message):
        wire.decode_extender_args(body)


def test_filter_reply_uses_the_request_form():
    node = {"metadata": {"name": "n1"}, "spec": {}}
    other = {"metadata": {"name": "n2"}}
    by_nodes = wire.ExtenderArgs({}, {"metadata": {"resourceVersion": "7"}, "items": [node, other]}, None)
    out = wire.FilterOutcome(passed=[0], failed={"n2": "why"})
    assert orjson.loads(wire.encode_filter_outcome(by_nodes, ["n1", "n2"], out)) == {
        "Nodes": {"metadata": {"resourceVersion": "7"}, "items": [node]},
        "NodeNames": None,
        "FailedNodes": {"n2": "why"},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    by_names = wire.ExtenderArgs({}, None, ["n1", "n2"])
    assert orjson.loads(wire.encode_filter_outcome(by_names, ["n1", "n2"], out))["NodeNames"] == ["n1"]
    # An empty pass list is still a list: null would mean "every node filtered" only by accident.
    none = wire.encode_filter_outcome(by_names, ["n1", "n2"], wire.FilterOutcome(passed=[]))
    assert orjson.loads(none)["NodeNames"] == []


def _unpadded(out: bytes) -> bytes:
    """The reply without the whitespace that follows pre-encoded members (test names have no spaces)."""
    return re.sub(rb" +(?=[,\]}])", b"", out)


def test_pre_encoded_host_priorities_equal_plain_encoding():
    names = ["node-a", "weird<&>", "ünïcode", 'q"uote']
    enc = wire.HostPriorityEncoder()
    enc.ensure(names)
    rows, scores = [3, 0, 1, 2, 0], [0, 10, 7, 3, 5]
    expected = wire.encode_host_priority_list([names[r] for r in rows], scores)
    out = enc.encode(rows, scores)
    assert orjson.loads(out) == orjson.loads(expected)
    assert _unpadded(out) == expected
    assert _unpadded(enc.encode([1], [4])) == b'[{"Host":"weird\\u003c\\u0026\\u003e","Score":4}]'
    assert enc.encode([], []) == b"[]"
    # rows added later get their entries; a longer name widens every entry
    enc.ensure([*names, "late", "a-much-longer-node-name.example.internal"])
    assert _unpadded(enc.encode([4], [9])) == b'[{"Host":"late","Score":9}]'
    assert orjson.loads(enc.encode([5, 3, 0], [1, 2, 3])) == [
        {"Host": "a-much-longer-node-name.example.internal", "Score": 1},
        {"Host": 'q"uote', "Score": 2},
        {"Host": "node-a", "Score": 3},
    ]


def test_failed_nodes_members_by_reason():
    names = ["n0", "n1", "n2<x>"]
    enc = wire.FailedNodesEncoder()
    body = b"{" + enc.members(names, np.array([2, 0]), "node(s) cpu usage exceed threshold") + b"}"
    assert orjson.loads(body) == {"n2<x>": "node(s) cpu usage exceed threshold", "n0": "node(s) cpu usage exceed threshold"}
    assert b"n2\\u003cx\\u003e" in body  # Go's HTML-safe escaping
    assert enc.members(names, np.array([], dtype=np.intp), "why") == b""


@pytest.mark.parametrize(
    "failed_at, codes, extra, unresolvable",
    [
        ([], [], {}, {}),
        ([1], [2], {}, {}),
        ([0, 2, 3], [2, 3, 2], {}, {}),
        ([], [], {"n1": "reservation full"}, {}),
        ([0, 3], [3, 3], {"n1": "reservation full"}, {"n2": "no affinity match"}),
    ],
)
def test_names_reply_is_the_plain_filter_result(failed_at, codes, extra, unresolvable):
    """The hot-path NodeNames reply decodes to what encode_filter_result writes."""
    names = ["n0", "n1", "n2", "n3<&>"]
    reasons = {2: "node(s) cpu usage exceed threshold", 3: "node(s) memory usage exceed threshold"}
    at = np.array(failed_at, dtype=np.intp)
    coded = wire.CodedFailures(names, at, at, np.array(codes, dtype=np.int8), reasons)
    outcome = wire.FilterOutcome(failed=dict(extra), unresolvable=dict(unresolvable), coded=coded)
    passed = [n for i, n in enumerate(names) if i not in failed_at and n not in extra and n not in unresolvable]
    body = wire.encode_filter_names_reply(wire.encode_names(passed), outcome, wire.FailedNodesEncoder(), names)
    expected = wire.encode_filter_result(None, passed, outcome.failed or None, unresolvable or None)
    assert orjson.loads(body) == orjson.loads(expected)
    assert len(orjson.loads(body)["FailedNodes"] or {}) == len(failed_at) + len(extra)
