"""The three verbs over the in-memory state: request bytes in, reply bytes out.

Each verb decodes the request, runs the plugins (`framework.run_filter` / `run_score`) over the
candidates and writes the reply in the request's form: `filter` keeps the nodes every plugin
passed; `prioritize` maps the plugins' weighted score to 0-10; `preempt` keeps the candidate
nodes where the pod would pass every plugin once the proposed victims are gone.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from koordcommon import cpus as kc
from koordcommon.kube_codec import pod_from_k8s
from koordcommon.records import PodRecord

from .framework import FilterOutcome, PodInfo, ScoreOutcome, run_filter, run_score, to_extender_scores
from .plugins import numa
from .state import ClusterState
from .wire import (
    ExtenderArgs,
    ExtenderPreemptionArgs,
    MetaVictims,
    WireError,
    encode_filter_result,
    encode_host_priority_list,
    encode_preemption_result,
    go_json,
)
from .wire import (
    ExtenderBindingArgs as BindingArgs,
)


@dataclass(slots=True)
class VerbResult:
    body: bytes
    reasons: dict[str, int] = field(default_factory=dict)  # nodes filtered, by reason
    candidates: int | None = None  # nodes judged (filter, prioritize)
    # what explanations remember of the request (core.explain.Decisions): the pod, the
    # candidates' rows and names, and how many passed the filter
    pod: PodInfo | None = None
    rows: np.ndarray | None = None
    names: list[str] | None = None
    passed: int | None = None


def parse_pod(pod: dict) -> PodRecord:
    try:
        return pod_from_k8s(pod)
    except ValueError as exc:
        raise WireError(f"Pod: {exc}") from None


def judged_pod(state: ClusterState, pod: dict) -> PodInfo:
    """The request's pod as the plugins judge it. kube-scheduler sends one pod to filter, then
    to prioritize, and again on each retry: a version already judged is not parsed again."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if isinstance(meta, dict):
        known = state.known_pod_info(meta.get("uid"), meta.get("resourceVersion"))
        if known is not None:
            return known
    return state.pod_info(parse_pod(pod))


def _rows(state: ClusterState, names: list) -> np.ndarray:
    try:
        return state.rows_of(names)
    except TypeError:
        raise WireError("NodeNames must be an array of node names") from None


def filter_nodes(state: ClusterState, pod: PodInfo, names: list[str], now_ms: int | None = None,
                 rows: np.ndarray | None = None) -> FilterOutcome:  # fmt: skip
    """Every filter plugin over `names` (whose `rows` may be given), in the registry's order."""
    now = state.clock() if now_ms is None else now_ms
    return run_filter(state.plugins, pod, _rows(state, names) if rows is None else rows, now)


@dataclass(slots=True)
class Scores:
    mapped: np.ndarray  # 0-10 per candidate, what kube-scheduler gets
    outcome: ScoreOutcome  # the weighted 0-100 behind it, and each plugin's part


def score_nodes(state: ClusterState, pod: PodInfo, names: list[str], now_ms: int | None = None,
                rows: np.ndarray | None = None) -> Scores:  # fmt: skip
    """Every scoring plugin over `names` (whose `rows` may be given), weighted, mapped to
    kube-scheduler's 0-10."""
    now = state.clock() if now_ms is None else now_ms
    outcome = run_score(state.plugins, pod, _rows(state, names) if rows is None else rows, now)
    cfg = state.config
    return Scores(to_extender_scores(outcome.total, cfg.score_mapping, cfg.score_min_span), outcome)


def _filter_reply(args: ExtenderArgs, names: list[str], outcome: FilterOutcome) -> bytes:
    """The reply in the form(s) the request used: NodeNames for nodeCacheCapable, Nodes
    otherwise. A reply with both null would filter out every node, so the form the scheduler
    reads is always present. The NodeList keeps the request's list metadata."""
    passed = outcome.passed.tolist()
    node_names = [names[i] for i in passed] if args.node_names is not None else None
    nodes = None
    if args.nodes is not None:
        items = args.nodes["items"]
        if args.node_names is None:
            kept = [items[i] for i in passed]
        else:  # both forms: NodeNames decided, the NodeList follows it
            keep = set(node_names or ())
            kept = [n for n in items if (n.get("metadata") or {}).get("name") in keep]
        nodes = {**args.nodes, "items": kept}
    return encode_filter_result(
        nodes, node_names, outcome.failed(names) or None, outcome.unresolvable(names) or None
    )


# filter and prioritize change nothing: whoever can reach the extender could otherwise steer it
# (60 prioritize calls for made-up 32-CPU pods once made every node fail the filter for a real
# 2-CPU pod). Placements are learnt from what is bound: the bind verb when kube-scheduler is
# configured to call it (`bind_request`), else the pod watch.


def filter_request(state: ClusterState, args: ExtenderArgs, now: int | None = None) -> VerbResult:
    info = judged_pod(state, args.pod)
    names = args.candidate_names()
    rows = _rows(state, names)
    outcome = filter_nodes(state, info, names, now, rows)
    return VerbResult(_filter_reply(args, names, outcome), outcome.counts(), len(names), info, rows, names,
                      len(outcome.passed))  # fmt: skip


def prioritize_request(state: ClusterState, args: ExtenderArgs, now: int | None = None) -> VerbResult:
    info = judged_pod(state, args.pod)
    names = args.candidate_names()
    if not names:
        return VerbResult(b"[]", candidates=0)
    rows = _rows(state, names)
    scores = score_nodes(state, info, names, now, rows)
    return VerbResult(encode_host_priority_list(names, scores.mapped.tolist()), candidates=len(names), pod=info,
                      rows=rows, names=names)  # fmt: skip


def cpu_allocation(state: ClusterState, pod: PodInfo, node: str) -> dict[str, str] | str:
    """The annotations that record the CPUs `pod` gets on `node` (NodeNUMAResource's allocation,
    `scheduling.koordinator.sh/resource-status`, as koord-scheduler writes it at PreBind); {} when
    the pod binds none; the reason when it cannot be placed there."""
    plugin = state.plugin(numa.NAME)
    if plugin is None:
        return {}
    state.flush()
    got = plugin.placement(pod, state.view(node))
    if got is None:
        return {}
    if isinstance(got, str):
        return got
    topo = kc.Topology(tuple(kc.CPU(c.id, c.core, c.socket, c.node) for c in state.topologies[node].cpus))
    return {kc.ANNOTATION_RESOURCE_STATUS: numa.resource_status(topo, got.allocation.cpus).encode()}


async def bind_request(state: ClusterState, cluster, args: BindingArgs) -> bytes:
    """kube-scheduler's bind verb: allocate the pod's exclusive CPUs on the node (LSE / LSR pods),
    bind through the cluster port with the allocation as the Binding's annotations (the API server
    sets them on the pod), then count the pod on its node at once (a burst of pods must not all
    see the node empty until the watch reports them).
    ExtenderBindingResult: `{"Error": ""}`, or the reason the binding was refused."""
    info = state.known_pod_by_uid(args.pod_uid)
    annotations: dict[str, str] = {}
    if info is not None:
        got = cpu_allocation(state, info, args.node)
        if isinstance(got, str):
            return go_json({"Error": f"binding {args.pod_namespace}/{args.pod_name} to {args.node} failed: {got}"})
        annotations = got
    try:
        await cluster.bind_pod(args.pod_namespace, args.pod_name, args.node, args.pod_uid,
                               annotations=annotations or None)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the refusal goes back to kube-scheduler, which retries the pod
        return go_json({"Error": f"binding {args.pod_namespace}/{args.pod_name} to {args.node} failed: {exc}"})
    if info is not None:
        if annotations:
            record = dataclasses.replace(info.record, annotations={**info.record.annotations, **annotations})
            info = dataclasses.replace(info, record=record)
        state.assume(info, args.node)
    return go_json({"Error": ""})


# --------------------------------------------------------------------------- preempt


def _victim_keys(state: ClusterState, node: str, uids: list[str]) -> list[str] | None:
    """Keys of the victims on `node`; None when one of them is unknown here."""
    by_uid = {state.pods[k].uid: k for k in state.assigned.get(node, {}) if k in state.pods}
    keys = [by_uid.get(uid) for uid in uids]
    return None if None in keys else keys  # type: ignore[return-value]


def passes_without(state: ClusterState, pod: PodInfo, node: str, victims: list[str], now: int) -> str | None:
    """The first filter reason left on `node` once `victims` (pod keys) are gone, None when the
    pod would pass. Every plugin judges the node as it would be, from its own rule."""
    view = state.view(node, without=victims)
    stores = [p.scratch([view]) for p in state.plugins]
    rows = np.zeros(1, dtype=np.intp) if node in state.rows else np.full(1, -1, dtype=np.intp)
    outcome = run_filter(state.plugins, pod, rows, now, stores)
    rejection = outcome.rejected.get(0)
    return None if rejection is None else rejection.reason


def preempt_request(state: ClusterState, args: ExtenderPreemptionArgs, now: int | None = None) -> VerbResult:
    """Keep the candidates on which the pod would pass our filter after the victims leave.

    Victims are returned as given (same order: kube-scheduler treats the first as the
    highest-priority one). A node whose victims this extender does not know is kept: the
    scheduler's own dry run chose them and there is nothing to judge them by.
    """
    now = state.clock() if now is None else now
    info = judged_pod(state, args.pod)
    meta: dict[str, MetaVictims] = {}
    if args.node_to_meta_victims is not None:
        meta = dict(args.node_to_meta_victims)
    elif args.node_to_victims is not None:
        for node, v in args.node_to_victims.items():
            uids = [str(((p.get("metadata") or {}).get("uid")) or "") for p in v.pods]
            meta[node] = MetaVictims(uids, v.num_pdb_violations)
    kept: dict[str, MetaVictims] = {}
    counts: Counter = Counter()
    for node, victims in meta.items():
        keys = _victim_keys(state, node, victims.uids)
        if keys is None:
            kept[node] = victims
            continue
        reason = passes_without(state, info, node, keys, now)
        if reason is None:
            kept[node] = victims
        else:
            counts[reason] += 1
    return VerbResult(encode_preemption_result(kept), counts)


__all__ = [
    "Scores",
    "VerbResult",
    "bind_request",
    "cpu_allocation",
    "filter_nodes",
    "filter_request",
    "parse_pod",
    "passes_without",
    "preempt_request",
    "prioritize_request",
    "score_nodes",
]
