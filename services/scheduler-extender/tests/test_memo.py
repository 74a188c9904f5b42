"""Kept verdicts (per node list and pod shape, brought up to date row by row) answer exactly as
judging every candidate again would.

The differential test drives two identical states through the same random history: nodes'
metrics arriving and expiring, pods bound, moved and removed, batch room changing, nodes
leaving and coming back, reservations, time passing. Every filter and prioritize goes to both:
one as kube-scheduler's bytes (node lists recognised, verdicts kept and patched), one with the
names already decoded (every candidate judged afresh). The replies must be byte-identical.
"""

import random

import numpy as np
import pytest
from extender_helpers import Gi, guaranteed, metric, node, pod, pod_metric
from koordcommon.kube_codec import format_time_ms, pod_to_k8s
from koordcommon.records import OwnerRef
from koordcommon.resources import Resources
from koordcommon.schemas import NodeResource
from scheduler_extender.core import extender, memo, wire
from scheduler_extender.core import loadaware as la
from scheduler_extender.core.candidates import Candidates, RecentCandidates
from scheduler_extender.core.extender import filter_request, prioritize_request
from scheduler_extender.core.table import NodeTable
from scheduler_extender.core.wire import HostPriorityEncoder
from test_batch_reservation import _reservation_obj
from test_loadaware import make_state

NODES = [f"n{i:02d}" for i in range(24)]


def shapes():
    """Pods of five shapes; each call of a shape gives a new pod (a burst of one workload)."""
    count = iter(range(10**6))

    def web():
        return guaranteed(f"web-{next(count)}", 2000, 4 * Gi, labels={"app": "web"})

    def prod():
        return guaranteed(f"api-{next(count)}", 6000, 12 * Gi, priority=9500)

    def batch():
        req = {"koordinator.sh/batch-cpu": 4000, "koordinator.sh/batch-memory": 8 * Gi}
        return pod(f"job-{next(count)}", priority=5500, extra_requests=req)

    def daemon():
        owner = OwnerRef(kind="DaemonSet", name="agent", uid="uid-agent", api_version="apps/v1", controller=True)
        return guaranteed(f"agent-{next(count)}", 500, Gi, owners=[owner])

    def empty():
        return pod(f"idle-{next(count)}")

    return [web, prod, batch, daemon, empty]


class Twin:
    """The same history applied to two states."""

    def __init__(self) -> None:
        self.states = [make_state(), make_state()]
        self.bound: dict[str, str] = {}

    @property
    def now(self) -> int:
        return self.states[0].clock()

    def each(self, fn) -> None:
        for st in self.states:
            fn(st)

    def tick(self, ms: int) -> None:
        for st in self.states:
            st.clock_box["now"] += ms


def random_step(rng: random.Random, tw: Twin) -> None:
    op = rng.random()
    name = rng.choice(NODES)
    now = tw.now
    if op < 0.25:
        reported = [pod_metric(k.split("/")[1], rng.randint(100, 3000), Gi) for k, n in tw.bound.items() if n == name]
        m = metric(
            name, rng.randint(1000, 30000), rng.randint(4, 63) * Gi, ts=now - rng.randint(0, 200_000), pods=reported
        )
        tw.each(lambda st: st.apply_metric(m))
    elif op < 0.45:
        p = guaranteed(
            f"bound-{rng.randint(0, 40)}", rng.choice([1000, 4000, 8000]), rng.choice([Gi, 8 * Gi]), node=name
        )
        tw.bound[p.key] = name
        tw.each(lambda st: st.apply_pod(p))
    elif op < 0.55 and tw.bound:
        key = rng.choice(sorted(tw.bound))
        del tw.bound[key]
        tw.each(lambda st: st.remove_pod(key))
    elif op < 0.65:
        nr = NodeResource(node=name, ts=now, batch=Resources(rng.randint(0, 16000), rng.randint(0, 40) * Gi))
        tw.each(lambda st: st.apply_node_resource(nr))
    elif op < 0.75:
        tw.tick(rng.choice([1_000, 30_000, 90_000]))
    elif op < 0.8:
        tw.each(lambda st: st.remove_node(name))
    elif op < 0.85:
        tw.each(lambda st: st.apply_node(node(name)))
    elif op < 0.88:
        obj = _reservation_obj(name=f"hold-{name}", node_name=name, ttl="2m", created=format_time_ms(now))
        tw.each(lambda st: st.apply_reservation(obj))
    elif op < 0.9:
        tw.each(lambda st: st.remove_reservation(f"hold-{name}"))
    else:
        tw.each(lambda st: st.prune())


def ask(tw: Twin, verb, p, names: list[str]) -> bytes:
    """The verb on both states; their answers must agree. Returns the answer."""
    obj = pod_to_k8s(p)
    as_sent = wire.decode_extender_args(wire.encode_extender_args(obj, None, names))
    assert as_sent.names_raw is not None  # the form whose lists are recognised
    kept, fresh = verb(tw.states[0], as_sent), verb(tw.states[1], wire.ExtenderArgs(obj, None, list(names)))
    assert kept.body == fresh.body
    assert kept.reasons == fresh.reasons
    return kept.body


@pytest.mark.parametrize("seed", range(6))
def test_kept_verdicts_answer_as_judging_afresh(seed, monkeypatch):
    outcomes = dict.fromkeys(
        ("reused", "patched", "judged whole", "scores rewritten in place", "carried over", "filter reply spliced"), 0
    )
    real, real_patch, real_inherited = memo.brought_up_to_date, HostPriorityEncoder.patch, memo.inherited
    real_spliced = extender._spliced

    def counting(kept, *args):
        got = real(kept, *args)
        outcomes["judged whole" if got is None else "patched" if got[1] else "reused"] += 1
        return got

    def counting_patch(*args):
        outcomes["scores rewritten in place"] += 1
        return real_patch(*args)

    def counting_inherited(*args):
        got = real_inherited(*args)
        outcomes["carried over"] += got is not None
        return got

    def counting_spliced(*args):
        got = real_spliced(*args)
        outcomes["filter reply spliced"] += got is not None
        return got

    monkeypatch.setattr(extender, "_spliced", counting_spliced)
    monkeypatch.setattr(memo, "brought_up_to_date", counting)
    monkeypatch.setattr(memo, "inherited", counting_inherited)
    monkeypatch.setattr(HostPriorityEncoder, "patch", counting_patch)
    rng = random.Random(seed)
    tw = Twin()
    for name in NODES:
        tw.each(lambda st, name=name: st.apply_node(node(name)))
        m = metric(name, rng.randint(1000, 30000), rng.randint(4, 63) * Gi, ts=tw.now - 5_000)
        tw.each(lambda st, m=m: st.apply_metric(m))
    subset = rng.sample(NODES, 12)
    makers = shapes()
    for _ in range(400):
        for _ in range(rng.choice([0, 0, 1, 3])):
            random_step(rng, tw)
        make = rng.choice(makers)
        for _ in range(rng.randint(1, 4)):  # a burst of one shape
            p = make()
            names = rng.choice([NODES, NODES, subset, [*subset, "ghost"]])
            reply = wire.decode_filter_result(ask(tw, filter_request, p, names))
            passed = reply.node_names or []
            if len(passed) > 1:
                ask(tw, prioritize_request, p, passed if rng.random() < 0.8 else passed[::2])
    assert tw.states[0].summary() == tw.states[1].summary()
    # the history took every way through the kept verdicts
    assert min(outcomes.values()) > 0, outcomes


def test_an_unchanged_list_gets_the_same_answer_object():
    st = make_state()
    for name in ("a", "b", "c"):
        st.apply_node(node(name))
        st.apply_metric(metric(name, 1000, Gi, ts=st.clock() - 1000))
    body = wire.encode_extender_args(pod_to_k8s(guaranteed("p", 1000, Gi)), None, ["a", "b", "c"])
    first = filter_request(st, wire.decode_extender_args(body))
    assert filter_request(st, wire.decode_extender_args(body)) is first  # nothing changed in between
    st.apply_metric(metric("b", 31000, Gi, ts=st.clock()))  # b now over 65 % cpu
    second = filter_request(st, wire.decode_extender_args(body))
    assert wire.decode_filter_result(second.body).node_names == ["a", "c"]
    assert second.reasons == {"node(s) cpu usage exceed threshold": 1}


def test_a_kept_verdict_expires_with_the_metrics_it_judged():
    st = make_state()
    for name, age in (("a", 1_000), ("b", 100_000)):
        st.apply_node(node(name))
        st.apply_metric(metric(name, 1000, Gi, ts=st.clock() - age))
    body = wire.encode_extender_args(pod_to_k8s(guaranteed("p", 1000, Gi)), None, ["a", "b"])
    assert wire.decode_filter_result(filter_request(st, wire.decode_extender_args(body)).body).node_names == ["a", "b"]
    st.clock_box["now"] += 80_000  # b's metric is now 180 s old; no row changed
    reply = wire.decode_filter_result(filter_request(st, wire.decode_extender_args(body)).body)
    assert reply.node_names == ["a"] and reply.failed_nodes == {"b": "node(s) nodeMetric expired"}


# --------------------------------------------------------------------------- the parts


def test_table_version_counts_row_writes_and_the_log_forgets_old_ones():
    t = NodeTable(capacity=4)
    t.CHANGE_LOG = 3
    a, b = t.row("a"), t.row("b")
    v0 = t.version()
    assert t.changed_since(v0) == []
    t.set(a, alloc_cpu=1)
    t.add(b, np.ones(len(la.INT_INDEX), dtype=np.int64))
    t.set_derived(a, [0] * 14, [False, False])
    assert t.changed_since(v0) == [a, b, a]
    v1 = t.version()
    for _ in range(4):
        t.set(b, alloc_cpu=2)
    assert t.changed_since(v1) == [b, b, b, b]
    assert t.changed_since(v0) is None  # more than twice CHANGE_LOG writes since: forgotten
    assert t.changed_since(t.version()) == []


@pytest.mark.parametrize(
    "rows, memoizable, asked, expected",
    [
        ([4, 0, 2], True, [2, 3, 2, 9, 4], {2: 2, 0: 4}),  # 3 is not in the list, 9 is newer than it
        ([4, 0, 4], False, [4], {2: 4}),  # a row twice: verdicts are not kept
        ([], True, [1], {}),
    ],
)
def test_candidate_positions(rows, memoizable, asked, expected):
    c = Candidates([f"x{r}" for r in rows], np.array(rows, dtype=np.intp), [], b"[...]", 5)
    assert c.memoizable is memoizable
    assert c.positions_of(asked) == expected


def test_candidates_without_bytes_or_with_unknown_names_keep_no_verdicts():
    rows = np.array([0, 1], dtype=np.intp)
    assert not Candidates(["a", "b"], rows, [], None, 2).memoizable
    assert not Candidates(["a", "ghost"], rows, [1], b'["a","ghost"]', 2).memoizable


def test_a_list_keeps_the_newest_verdicts():
    c = Candidates(["a"], np.zeros(1, dtype=np.intp), [], b'["a"]', 1)
    for k in range(Candidates.MAX_VERDICTS + 3):
        c.keep(k, k)
    assert sorted(c.verdicts) == list(range(3, Candidates.MAX_VERDICTS + 3))


def test_recent_lists_are_found_by_their_bytes_while_right():
    recent = RecentCandidates()
    known = recent.remember(Candidates(["a"], np.zeros(1, dtype=np.intp), [], b'["a"]', 1))
    partly = recent.remember(Candidates(["a", "z"], np.zeros(2, dtype=np.intp), [1], b'["a","z"]', 1))
    assert recent.find(b'["a"]', 1) is known
    assert recent.find(b'["a","z"]', 1) is partly
    assert recent.find(b'["a","z"]', 2) is None  # a row was added since: z may have one now
    for i in range(RecentCandidates.LIMIT):
        recent.remember(Candidates([], np.zeros(0, dtype=np.intp), [], b"[%d]" % i, 1))
    assert recent.find(b'["a"]', 1) is None


@pytest.mark.parametrize("at", [[0], [2], [3], [0, 1, 2, 3], []])
def test_host_priorities_rewritten_in_place_equal_a_fresh_encoding(at):
    enc = HostPriorityEncoder()
    enc.ensure(["a", "bb", "node-ccc", "d"])
    rows = np.array([3, 0, 2, 1], dtype=np.intp)
    before = np.array([1, 2, 3, 4])
    after = before.copy()
    after[at] = [10, 0, 7, 9][: len(at)]
    patched = enc.patch(enc.encode(rows, before), rows, after, at)
    assert patched == enc.encode(rows, after)
    assert wire.decode_host_priority_list(patched) == list(zip(["d", "a", "node-ccc", "bb"], after.tolist()))


def test_the_pod_is_assumed_on_a_valid_node_before_one_without_a_metric():
    # a has no metric (not valid, 0); b is full (valid, 0 points): b still ranks first
    for raw_form in (True, False):
        st = make_state()
        st.apply_node(node("a"))
        st.apply_node(node("b"))
        st.apply_metric(metric("b", 32000, 64 * Gi, ts=st.clock() - 1000))
        p = pod_to_k8s(guaranteed("p", 1000, Gi))
        args = wire.decode_extender_args(wire.encode_extender_args(p, None, ["a", "b"]))
        if not raw_form:
            args = wire.ExtenderArgs(p, None, ["a", "b"])
        scores = wire.decode_host_priority_list(prioritize_request(st, args).body)
        assert scores == [("a", 0), ("b", 10)]
        assert st.assumed["default/p"].node == "b"
