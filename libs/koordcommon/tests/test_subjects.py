"""Subjects, streams and buckets: token encoding and the subject <-> stream map."""

from __future__ import annotations

import re

import pytest
from koordcommon import subjects
from koordcommon.subjects import InvalidToken


def matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: `*` one token, `>` one or more trailing tokens."""
    p, s = pattern.split("."), subject.split(".")
    for i, tok in enumerate(p):
        if tok == ">":
            return len(s) > i
        if i >= len(s) or (tok != "*" and tok != s[i]):
            return False
    return len(p) == len(s)


@pytest.mark.parametrize(
    ("name", "token"),
    [
        ("node-1", "node-1"),
        ("worker_7", "worker_7"),
        ("ip-10-0-0-1.ec2.internal", "ip-10-0-0-1_d_ec2_d_internal"),
        ("a.b", "a_d_b"),
        ("UPPER-lower-09", "UPPER-lower-09"),
    ],
)
def test_encode_token_and_back(name, token):
    assert subjects.encode_token(name) == token
    assert subjects.decode_token(token) == name


@pytest.mark.parametrize("name", ["", "a b", "a*", "node>", "a/b", "nöde", "tab\tname", "x:y"])
def test_encode_token_rejects_what_cannot_be_a_token(name):
    with pytest.raises(InvalidToken, match="cannot be a subject token"):
        subjects.encode_token(name)


@pytest.mark.parametrize("token", ["", "a.b", "a b", "*", ">", "ev/ict"])
def test_validate_token_rejects(token):
    with pytest.raises(InvalidToken, match="is not a valid subject token"):
        subjects.validate_token(token)


@pytest.mark.parametrize(
    ("subject", "expected", "stream"),
    [
        (subjects.metrics("node-1"), "koord.metrics.node-1", subjects.METRICS_STREAM),
        (subjects.metrics("n.example.com"), "koord.metrics.n_d_example_d_com", subjects.METRICS_STREAM),
        (subjects.nodemetric("node-1"), "koord.nodemetric.node-1", subjects.NODEMETRIC_STREAM),
        (subjects.noderesource("a.b"), "koord.noderesource.a_d_b", subjects.NODERESOURCE_STREAM),
        (subjects.recommendation("default", "web.v2"), "koord.recommendation.default.web_d_v2", subjects.RECOMMENDATION_STREAM),
        (subjects.event(subjects.EVENT_EVICT, "n1"), "koord.events.evict.n1", subjects.EVENTS_STREAM),
        (subjects.event(subjects.EVENT_QOS, "n.1"), "koord.events.qos.n_d_1", subjects.EVENTS_STREAM),
        (subjects.deadletter("metrics-collector"), "koord.deadletter.metrics-collector", subjects.DEADLETTER_STREAM),
        (subjects.sim("genesis"), "koord.sim.genesis", subjects.SIM_STREAM),
    ],
)  # fmt: skip
def test_subject_builders_and_the_one_stream_that_stores_them(subject, expected, stream):
    assert subject == expected
    holders = [s for s in subjects.ALL_STREAMS if any(matches(p, subject) for p in s.subjects)]
    assert holders == [stream]


def test_nodeslo_subject_is_not_stored_by_any_stream():
    # NodeSLO lives in the KV bucket; its subject is a plain signal.
    subject = subjects.nodeslo("n1")
    assert subject == "koord.nodeslo.n1"
    assert not [s for s in subjects.ALL_STREAMS if any(matches(p, subject) for p in s.subjects)]


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (subjects.event, ("ev.ict", "n1")),
        (subjects.event, ("evict", "n 1")),
        (subjects.deadletter, ("svc.x",)),
        (subjects.sim, ("",)),
        (subjects.metrics, ("n*",)),
        (subjects.recommendation, ("default", "a>b")),
    ],
)
def test_builders_reject_invalid_tokens(call, args):
    with pytest.raises(InvalidToken):
        call(*args)


@pytest.mark.parametrize(
    ("subject", "node"),
    [("koord.metrics.node-1", "node-1"), ("koord.nodemetric.ip-1_d_ec2_d_internal", "ip-1.ec2.internal"),
     ("t1.koord.events.evict.a_d_b", "a.b")],
)  # fmt: skip
def test_node_of(subject, node):
    assert subjects.node_of(subject) == node


def test_streams_have_distinct_valid_names_and_disjoint_subjects():
    names = [s.name for s in subjects.ALL_STREAMS]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Z_]+", n) for n in names)
    patterns = [p for s in subjects.ALL_STREAMS for p in s.subjects]
    assert len(set(patterns)) == len(patterns)
    for s in subjects.ALL_STREAMS:
        assert s.max_age_s == 0 or s.duplicate_window_s <= s.max_age_s
    assert re.fullmatch(r"[A-Za-z0-9_-]+", subjects.NODESLO_BUCKET)
