"""The extender JSON against Go: kube-scheduler's TestCompatibility encodings, and every reply
path held to Go's own json.Marshal of the same values (a Go program in gojson/ decodes each
reply into the k8s.io/kube-scheduler/extender/v1 types and encodes it again)."""

import orjson
import pytest
from koordcommon.testing.fixtures import fixtures_dir
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


def test_empty_pass_list_is_still_a_list():
    """null NodeNames would read as "every node filtered" only by accident: an empty list says it."""
    assert orjson.loads(wire.encode_filter_result(None, [], {"n": "why"}))["NodeNames"] == []


# --------------------------------------------------------------------------- Go's encoding of every reply

def test_go_reencodes_the_compat_fixture_byte_for_byte(go_marshal):
    """The Go program itself: for Go's own encodings it must give them back unchanged."""
    kinds = ["ExtenderFilterResult", "ExtenderPreemptionResult", "ExtenderBindingResult", "ExtenderArgs",
             "ExtenderPreemptionArgs", "ExtenderBindingArgs"]
    assert go_marshal([(k, _text(k)) for k in kinds]) == [_text(k) for k in kinds]
    hp = b"[" + _text("HostPriority") + b"]"
    assert go_marshal([("HostPriorityList", hp)]) == [hp]
