"""Why a pod was (not) placed: each candidate node's verdict per plugin, with the plugin's own
numbers, and the score breakdown (`GET /api/v1/explain/pods/{namespace}/{name}`).

The extender remembers, for the last pods it was asked about, when and over which candidate
nodes (`Decisions`: rows, not names, so a 5,000-node request costs 20 kB). An explanation
judges the pod again over those candidates as the nodes are now, through the same plugins and
`run_filter` / `run_score` as the verbs, so it cannot disagree with what the extender would
answer; each shown node is judged on a one-row scratch store of its view (for the node a
scheduled pod is on, the view without that pod, i.e. as it was before it came), and every
plugin says what it compared with what (`Plugin.explain`). A pod the extender was never asked
about but sees bound through the cluster watch is judged over every node it knows.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .extender import filter_nodes, score_nodes
from .framework import NO_SCORE, PodInfo, run_filter, run_score
from .state import ClusterState

MAX_PODS = 512  # pods remembered; the oldest asked about is forgotten first


@dataclass(slots=True)
class Decision:
    """The last verb the extender answered for a pod."""

    verb: str
    ts_ms: int
    pod: PodInfo
    rows: np.ndarray  # candidate rows (int32), -1 for names the extender had no row for
    unknown: list[str] = field(default_factory=list)  # those names
    rejected: dict[str, int] = field(default_factory=dict)  # filter: nodes rejected, by reason
    passed: int | None = None  # filter: nodes passed


class Decisions:
    """The last `MAX_PODS` pods' decisions, by namespace/name."""

    def __init__(self, limit: int = MAX_PODS) -> None:
        self.limit = limit
        self.by_pod: OrderedDict[str, Decision] = OrderedDict()

    def record(self, verb: str, ts_ms: int, pod: PodInfo, rows: np.ndarray, names: list[str],
               rejected: dict[str, int] | None = None, passed: int | None = None) -> None:  # fmt: skip
        unknown = [names[i] for i in np.flatnonzero(rows < 0)[:100].tolist()]
        self.by_pod[pod.key] = Decision(verb, ts_ms, pod, rows.astype(np.int32), unknown, rejected or {}, passed)
        self.by_pod.move_to_end(pod.key)
        while len(self.by_pod) > self.limit:
            self.by_pod.popitem(last=False)

    def get(self, key: str) -> Decision | None:
        return self.by_pod.get(key)


def _node_detail(state: ClusterState, pod: PodInfo, node: str, bound_to: str | None, now: int) -> dict[str, Any]:
    """Every plugin's verdict on one node and its numbers, and the node's score breakdown."""
    view = state.view(node, without=[pod.key] if node == bound_to else ())
    stores = [p.scratch([view]) for p in state.plugins]
    row = np.zeros(1, dtype=np.intp) if node in state.rows else np.full(1, -1, dtype=np.intp)
    first = run_filter(state.plugins, pod, row, now, stores).rejected.get(0)
    plugins = []
    for p, store in zip(state.plugins, stores):
        verdict = p.filter(pod, np.zeros(1, dtype=np.intp), now, store) if row[0] >= 0 else None
        code = int(verdict.codes[0]) if verdict is not None else 0
        entry: dict[str, Any] = {"plugin": p.name, "passed": code == 0,
                                 "reason": verdict.reasons.get(code) if code else None}  # fmt: skip
        if row[0] >= 0:
            entry["numbers"] = p.explain(pod, view, now)
        plugins.append(entry)
    score = run_score(state.plugins, pod, np.zeros(1, dtype=np.intp), now, stores)
    weights = {p.name: p.weight for p in state.plugins if p.weight > 0}
    return {
        "node": node,
        "bound": node == bound_to,
        "passed": first is None,
        "rejected_by": None if first is None else first.plugin,
        "reason": None if first is None else first.reason,
        "plugins": plugins,
        "score": {
            "total": None if int(score.total[0]) == NO_SCORE else int(score.total[0]),
            "by_plugin": {name: (None if int(s[0]) == NO_SCORE else int(s[0])) for name, s in score.by_plugin.items()},
            "weights": weights,
        },
    }


def _shown(names: list[str], passed: list[int], rejected: dict[int, Any], bound_to: str | None,
           order: np.ndarray | None, limit: int) -> list[str]:  # fmt: skip
    """The nodes shown in detail: the bound node, the best-scored passing nodes, then one node
    per rejection reason, then the rest in order."""
    out: list[str] = [bound_to] if bound_to else []
    ranked = [passed[i] for i in order.tolist()] if order is not None else passed
    out += [names[i] for i in ranked]
    seen_reason: set[str] = set()
    firsts, rest = [], []
    for i, r in rejected.items():
        (firsts if r.reason not in seen_reason else rest).append(names[i])
        seen_reason.add(r.reason)
    out += firsts + rest
    return list(dict.fromkeys(n for n in out))[:limit]


def explain_pod(state: ClusterState, decisions: Decisions, key: str, limit: int = 10) -> dict[str, Any] | None:
    """The explanation of pod `key` (namespace/name); None when the extender knows nothing of it."""
    decision = decisions.get(key)
    record = state.pods.get(key)
    if decision is None and record is None:
        return None
    pod = decision.pod if decision is not None else state.pod_info(record)
    bound_to = state.pod_node.get(key)
    now = state.clock()
    if decision is not None:
        names = [state.names[r] if r >= 0 else None for r in decision.rows.tolist()]
        names = [n for n in names if n is not None] + decision.unknown
    else:
        names = list(state.names)
    outcome = filter_nodes(state, pod, names, now)
    passed = outcome.passed.tolist()
    order = None
    mapped: dict[str, int] = {}
    if passed:
        scores = score_nodes(state, pod, [names[i] for i in passed], now)
        order = np.argsort(-(scores.mapped * 1000 + scores.outcome.total), kind="stable")
        mapped = {names[i]: int(m) for i, m in zip(passed, scores.mapped.tolist())}
    shown = _shown(names, passed, outcome.rejected, bound_to, order, limit)
    details = [_node_detail(state, pod, n, bound_to, now) for n in shown]
    for d in details:
        d["score"]["extender"] = mapped.get(d["node"])  # kube-scheduler's 0-10 among the candidates
    rec = pod.record
    return {
        "pod": key,
        "uid": rec.uid,
        "node": bound_to,
        "priority_class": rec.priority_class.value if hasattr(rec.priority_class, "value") else str(rec.priority_class),
        "estimate": {"cpu_milli": pod.estimate.cpu_milli, "memory_bytes": pod.estimate.memory_bytes},
        "batch_request": {"cpu_milli": pod.batch.cpu_milli, "memory_bytes": pod.batch.memory_bytes},
        "judged_at_ms": now,
        "decision": None if decision is None else {
            "verb": decision.verb, "ts_ms": decision.ts_ms, "candidates": len(decision.rows),
            "rejected": decision.rejected, "passed": decision.passed,
        },
        "candidates": len(names),
        "passed": len(passed),
        "rejected": outcome.counts(),
        "rejected_by_plugin": _by_plugin(outcome.rejected),
        "nodes": details,
        "score_mapping": state.config.score_mapping,
        "plugins": [p.name for p in state.plugins],
    }


def _by_plugin(rejected: dict[int, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rejected.values():
        out[r.plugin] = out.get(r.plugin, 0) + 1
    return out


__all__ = ["Decision", "Decisions", "explain_pod"]
