"""The three verbs over the in-memory state: request bytes in, reply bytes out.

`filter` = LoadAwareScheduling filter + batch fit + reservations; `prioritize` = least-used
score mapped to 0-10, with reservation owners steered to their reservation; `preempt` keeps
only the candidate nodes where evicting the proposed victims would let the pod pass our filter.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from koordcommon.kube_codec import pod_from_json, pod_from_k8s
from koordcommon.records import PodRecord
from koordcommon.resources import ZERO, sum_resources

from . import loadaware as la
from . import memo
from . import reservation as rsv
from .batchfit import BATCH_CPU_SHORT, BATCH_MEM_SHORT, batch_codes, batch_names, row_batch_code
from .candidates import Candidates
from .loadaware import PASS, map_scores, node_load, score_table
from .state import ClusterState, PodInfo
from .table import BOOL_INDEX, NodeTable
from .wire import (
    MAX_EXTENDER_PRIORITY,
    CodedFailures,
    ExtenderArgs,
    ExtenderPreemptionArgs,
    FilterOutcome,
    MetaVictims,
    WireError,
    assemble_filter_names_reply,
    encode_filter_names_reply,
    encode_filter_outcome,
    encode_host_priority_list,
    encode_names,
    encode_preemption_result,
    pick,
)

UNKNOWN = 20
BATCH_BASE = 10  # batch codes are stored as BATCH_BASE + batchfit code
_KNOWN = BOOL_INDEX["known"]
REASON_UNKNOWN = "node(s) unknown to the extender: no node, NodeMetric or NodeResource seen for it"


@dataclass(slots=True)
class VerbResult:
    body: bytes
    reasons: dict[str, int] = field(default_factory=dict)  # nodes filtered, by reason
    candidates: int | None = None  # nodes judged (filter, prioritize)


def parse_pod(pod: dict) -> PodRecord:
    try:
        return pod_from_k8s(pod)
    except ValueError as exc:
        raise WireError(f"Pod: {exc}") from None


def parse_pod_json(raw: bytes) -> PodRecord:
    try:
        return pod_from_json(raw)
    except ValueError as exc:
        raise WireError(f"Pod: {exc}") from None


def _reason_table(info: PodInfo) -> dict[int, str]:
    if info.reasons is None:
        reasons = {UNKNOWN: REASON_UNKNOWN, **la.REASONS}
        if not info.batch.is_zero():
            cpu_name, mem_name = batch_names(info.record)
            reasons[BATCH_BASE + BATCH_CPU_SHORT] = f"node(s) Insufficient {cpu_name}"
            reasons[BATCH_BASE + BATCH_MEM_SHORT] = f"node(s) Insufficient {mem_name}"
        info.reasons = reasons
    return info.reasons


def _judge_reservations(state: ClusterState, info: PodInfo, node: str, now: int) -> rsv.ReservationVerdict:
    room = rsv.NodeRoom(state.allocatable(node), state.requested(node))
    return rsv.judge(room, state.node_reservations(node), info.record, info.request, now)


def _rows(state: ClusterState, names: list) -> tuple[np.ndarray, list[int]]:
    try:
        return state.table.rows_of(names)
    except TypeError:
        raise WireError("NodeNames must be an array of node names") from None


def _pod_info(state: ClusterState, args: ExtenderArgs) -> PodInfo:
    if args.pod_raw is not None:
        return state.pod_info_raw(args.pod_raw, parse_pod_json)
    return state.pod_info_json(args.pod, parse_pod)


def _candidates(state: ClusterState, args: ExtenderArgs) -> Candidates:
    """The candidate names with their rows, recognised by their bytes when seen lately."""
    raw = args.names_raw
    if raw is not None and (hit := state.recent.find(raw, len(state.table))) is not None:
        return state.recent.remember(hit)  # the newest again: lists in use are the last dropped
    names = args.candidate_names()
    ix, missing = _rows(state, names)
    c = Candidates(names, ix, missing, raw, len(state.table))
    return state.recent.remember(c) if raw is not None else c


def _memo_key(state: ClusterState, info: PodInfo, cand: Candidates, verb: str) -> tuple | None:
    """Where a verdict of `verb` for this pod over `cand` is kept; None when it cannot be kept
    (reservation verdicts depend on who the pod is, not only on its shape)."""
    if info.shape is None or not cand.memoizable:
        return None
    if state.resv_by_node and state.table.has_resv.take(cand.rows).any():
        return None
    return (verb, info.shape)


def _codes(state: ClusterState, info: PodInfo, ix: np.ndarray, missing: list[int], now: int) -> np.ndarray:
    """Load-aware, batch and unknown-node codes per candidate row (0 = pass)."""
    t = state.table
    cfg = state.config
    if info.daemonset:
        codes = np.zeros(len(ix), dtype=np.int8)  # Koordinator lets DaemonSet pods through load checks
    else:
        codes = la.filter_codes(t, ix, info.estimate, info.is_prod, now, cfg.load)
    if not info.batch.is_zero():
        b = batch_codes(t, ix, info.batch)
        codes = np.where((codes == 0) & (b > 0), b + BATCH_BASE, codes)
    if cfg.fail_unknown_nodes and (missing or not t.all_known()):
        unknown = ~t.known.take(ix)
        if missing:
            unknown[missing] = True
        codes[unknown] = UNKNOWN
    elif missing:
        codes[missing] = 0
    return codes


def _row_load_code(state: ClusterState, info: PodInfo, ints: list[int], bools: list[bool], now: int) -> int:
    """The load-aware and batch code of one row, from its columns (`NodeTable.row_values`)."""
    code = 0 if info.daemonset else la.row_code(ints, bools, info.estimate, info.is_prod, now, state.config.load)
    if code == 0 and not info.batch.is_zero():
        short = row_batch_code(ints, info.batch)
        code = BATCH_BASE + short if short else 0
    return code


def _row_code(state: ClusterState, info: PodInfo, ints: list[int], bools: list[bool], now: int) -> int:
    """`_codes` for one row, from its columns (`NodeTable.row_values`)."""
    if state.config.fail_unknown_nodes and not bools[_KNOWN]:
        return UNKNOWN
    return _row_load_code(state, info, ints, bools, now)


def _reservation_verdicts(
    state: ClusterState, info: PodInfo, names: list[str], ix: np.ndarray, codes: np.ndarray, now: int
) -> tuple[dict[int, str], dict[int, str]]:
    """(failed, unresolvable) reasons by position from the reservations on the candidates."""
    t = state.table
    unresolvable: dict[int, str] = {}
    failed_extra: dict[int, str] = {}
    required = info.reservation_affinity
    # has_resv is only ever set on nodes some Reservation names
    if required or (state.resv_by_node and t.has_resv.take(ix).any()):
        check = range(len(names)) if required else t.has_resv.take(ix).nonzero()[0].tolist()
        for i in check:
            if codes[i] != 0:
                continue
            if required and not state.resv_by_node.get(names[i]):
                unresolvable[i] = "node(s) didn't match the pod's reservation affinity"
                continue
            verdict = _judge_reservations(state, info, names[i], now)
            if not verdict.fits:
                (unresolvable if required and not verdict.matched else failed_extra)[i] = verdict.reason
    return failed_extra, unresolvable


def _outcome(
    info: PodInfo,
    names: list[str],
    ix: np.ndarray,
    missing: list[int],
    codes: np.ndarray,
    failed_extra: dict[int, str],
    unresolvable: dict[int, str],
) -> tuple[FilterOutcome, dict[str, int]]:
    outcome = FilterOutcome()
    counts: dict[str, int] = {}
    bad = codes.nonzero()[0]
    bad_codes = codes.take(bad)
    reason_of = _reason_table(info)
    if len(bad):
        for code, k in enumerate(np.bincount(bad_codes).tolist()):
            if k:
                counts[reason_of[code]] = counts.get(reason_of[code], 0) + k
    for i, reason in failed_extra.items():
        outcome.extra_failed[names[i]] = reason
        counts[reason] = counts.get(reason, 0) + 1
    for i, reason in unresolvable.items():
        outcome.unresolvable[names[i]] = reason
        counts[reason] = counts.get(reason, 0) + 1
    passed = (codes == 0).nonzero()[0]
    if failed_extra or unresolvable:
        drop = set(failed_extra) | set(unresolvable)
        passed = np.array([i for i in passed.tolist() if i not in drop], dtype=np.intp)
    outcome.coded = CodedFailures(names, bad, None if missing else ix.take(bad), bad_codes, reason_of)
    outcome.positions = passed
    return outcome, counts


def filter_nodes(
    state: ClusterState, info: PodInfo, names: list[str], now: int, rows: tuple[np.ndarray, list[int]] | None = None
) -> tuple[FilterOutcome, dict[str, int], np.ndarray, list[int]]:
    ix, missing = _rows(state, names) if rows is None else rows
    codes = _codes(state, info, ix, missing, now)
    failed_extra, unresolvable = _reservation_verdicts(state, info, names, ix, codes, now)
    outcome, counts = _outcome(info, names, ix, missing, codes, failed_extra, unresolvable)
    return outcome, counts, ix, missing


@dataclass(slots=True)
class _FilterReply:
    """A NodeNames filter answer and what answering it does besides."""

    result: VerbResult
    passed: Candidates | None  # the passed list, which the pod's prioritize call will carry
    single: str | None  # the only node that passed: kube-scheduler binds it without prioritize
    # What the next answer over the same candidates can be spliced from (kept verdicts only):
    codes: np.ndarray | None = None  # the codes it was written from
    positions: np.ndarray | None = None  # the positions that passed
    groups: dict[int, tuple[bytes, int]] | None = None  # code -> (its FailedNodes entries, entry width)


def _names_reply(
    state: ClusterState,
    cand: Candidates,
    outcome: FilterOutcome,
    counts: dict[str, int],
    before: _FilterReply | None = None,
    codes: np.ndarray | None = None,
) -> _FilterReply:
    """The reply to a NodeNames filter. `before`, the previous reply of the pod shape over the
    same candidates, hands its passed list on as the new one's parent; with the `codes` of a
    kept verdict, the parts the next reply can be spliced from are kept too."""
    t = state.table
    names = cand.names
    single = names[int(outcome.positions[0])] if len(outcome.positions) == 1 else None
    if cand.missing:
        passed_raw = encode_names(pick(names, outcome.passed))
        passed = None
    else:
        # kube-scheduler's prioritize call for this pod carries exactly these names (when this
        # is the last filtering extender): their rows are kept for it.
        if len(outcome.positions) == len(names) and cand.raw is not None:
            passed, passed_raw = cand, cand.raw  # every candidate passed: the same list
        else:
            passed_rows = cand.rows.take(outcome.positions)
            passed_names = t.name_array().take(passed_rows).tolist()
            passed_raw = encode_names(passed_names)
            passed = _passed_list(cand, passed_names, passed_rows, passed_raw, before, len(t))
    c = outcome.coded
    if codes is None or c is None or c.rows is None or outcome.extra_failed or outcome.unresolvable:
        reply = encode_filter_names_reply(passed_raw, outcome, state.failed_nodes, t.names)
        return _FilterReply(VerbResult(reply, counts, len(names)), passed, single)
    groups = {}
    present = np.bincount(c.codes).nonzero()[0].tolist() if len(c.at) else []
    for code in present:
        col = state.failed_nodes.column(t.names, c.reasons[code])
        groups[code] = (col.gather(c.rows if len(present) == 1 else c.rows[c.codes == code]), col.width)
    reply = assemble_filter_names_reply(passed_raw, [g for g, _ in groups.values()])
    return _FilterReply(VerbResult(reply, counts, len(names)), passed, single, codes, outcome.positions, groups)


def _passed_list(
    cand: Candidates, names: list[str], rows: np.ndarray, raw: bytes, before: _FilterReply | None, table_size: int
) -> Candidates:
    passed = cand.subset(names, rows, raw, table_size)
    if before is not None and before.passed is not None and before.passed is not cand:
        before.passed.parent = None  # one generation back at most
        passed.parent = before.passed
    return passed


SPLICE_LIMIT = 4  # changed candidates a reply is spliced for; more are written whole


def _spliced(
    state: ClusterState, info: PodInfo, cand: Candidates, codes: np.ndarray, before: _FilterReply, changed: list[int]
) -> _FilterReply | None:
    """The reply over `cand` for `codes`, from `before`, written for codes that differ at the
    positions `changed` (ascending): each such candidate leaves or joins the passed list and
    its FailedNodes group, at the place a reply written whole gives it, so the bytes are the
    same. None when `before` cannot be spliced."""
    if before.groups is None or before.codes is None or before.positions is None or len(changed) > SPLICE_LIMIT:
        return None
    t = state.table
    reasons = _reason_table(info)
    work = before.codes.copy()
    positions, passed = before.positions, before.passed
    names, rows = list(passed.names), passed.rows
    groups = dict(before.groups)
    counts = dict(before.result.reasons)
    for i in changed:
        old, new, row = int(work[i]), int(codes[i]), int(cand.rows[i])
        if old == PASS:
            j = int(np.searchsorted(positions, i))
            positions, rows = _without(positions, j), _without(rows, j)
            del names[j]
        else:
            entries, w = groups.pop(old)
            k = int(np.count_nonzero(work[:i] == old))  # its place in the group
            if len(entries) > w:
                groups[old] = (entries[: k * w] + entries[(k + 1) * w :], w)
            if counts[reasons[old]] == 1:
                del counts[reasons[old]]
            else:
                counts[reasons[old]] -= 1
        work[i] = new
        if new == PASS:
            j = int(np.searchsorted(positions, i))
            positions, rows = _with(positions, j, i), _with(rows, j, row)
            names.insert(j, cand.names[i])
        else:
            col = state.failed_nodes.column(t.names, reasons[new])
            entries, w = groups.get(new, (b"", col.width))
            if w != col.width:  # entries widened since: written whole
                return None
            k = int(np.count_nonzero(work[:i] == new))
            groups[new] = (entries[: k * w] + col.entry(row) + entries[k * w :], w)
            counts[reasons[new]] = counts.get(reasons[new], 0) + 1
    groups = dict(sorted(groups.items()))
    if len(positions) == len(cand.names):
        passed = cand
    elif len(positions) != len(before.positions) or (positions != before.positions).any():
        raw = encode_names(names)
        passed = _passed_list(cand, names, rows, raw, before, len(t))
    single = cand.names[int(positions[0])] if len(positions) == 1 else None
    reply = assemble_filter_names_reply(passed.raw, [g for g, _ in groups.values()])
    return _FilterReply(VerbResult(reply, counts, len(cand.names)), passed, single, codes, positions, groups)


def _without(a: np.ndarray, j: int) -> np.ndarray:
    return np.concatenate((a[:j], a[j + 1 :]))


def _with(a: np.ndarray, j: int, value: int) -> np.ndarray:
    return np.concatenate((a[:j], np.array((value,), dtype=a.dtype), a[j:]))


def _filter_answer(
    state: ClusterState,
    info: PodInfo,
    cand: Candidates,
    codes: np.ndarray,
    before: _FilterReply | None,
    changed: list[int] | None,
) -> _FilterReply:
    """The reply for a kept verdict's `codes`: spliced from `before` when few changed."""
    if before is not None and changed:
        spliced = _spliced(state, info, cand, codes, before, changed)
        if spliced is not None:
            return spliced
    outcome, counts = _outcome(info, cand.names, cand.rows, [], codes, {}, {})
    return _names_reply(state, cand, outcome, counts, before, codes)


def filter_request(state: ClusterState, args: ExtenderArgs, now: int | None = None) -> VerbResult:
    now = state.clock() if now is None else now
    info = _pod_info(state, args)
    cand = _candidates(state, args)
    names, ix, missing = cand.names, cand.rows, cand.missing
    if args.nodes is not None:
        outcome, counts, ix, missing = filter_nodes(state, info, names, now, (ix, missing))
        if len(outcome.positions) == 1:
            state.assume(info, names[int(outcome.positions[0])])
        return VerbResult(encode_filter_outcome(args, names, outcome), counts, len(names))
    key = _memo_key(state, info, cand, "filter")
    if key is None:
        codes = _codes(state, info, ix, missing, now)
        failed_extra, unresolvable = _reservation_verdicts(state, info, names, ix, codes, now)
        reply = _names_reply(state, cand, *_outcome(info, names, ix, missing, codes, failed_extra, unresolvable))
    else:  # no unknown names, no reservations: the verdict is the pod shape's
        reply = memo.verdict(
            cand,
            key,
            state.table,
            now,
            lambda ints, bools: _row_code(state, info, ints, bools, now),
            lambda: _codes(state, info, ix, missing, now),
            lambda codes, before, changed: _filter_answer(state, info, cand, codes, before, changed),
        )
    if reply.single is not None:
        # kube-scheduler skips prioritize when one node is left and binds it directly.
        state.assume(info, reply.single)
    if reply.passed is not None:
        state.recent.remember(reply.passed)
    return reply.result


def score_nodes(
    state: ClusterState, info: PodInfo, names: list[str], now: int, rows: tuple[np.ndarray, list[int]] | None = None
):
    """(0-10 scores, 0-100 scores, rows, positions of unknown names), in the request's order."""
    t = state.table
    cfg = state.config
    ix, missing = _rows(state, names) if rows is None else rows
    raw, valid = la.scores(t, ix, info.estimate, info.is_prod, now, cfg.load)
    if missing:
        valid = valid.copy()
        valid[missing] = False
        raw[missing] = 0
    mapped = la.to_extender_scores(raw, valid, cfg.score_mapping, cfg.score_min_span)
    if state.resv_by_node and (resv := t.has_resv.take(ix)).any():
        steer = [
            i
            for i in resv.nonzero()[0].tolist()
            if (v := _judge_reservations(state, info, names[i], now)).fits and v.matched
        ]
        if steer:
            # A reservation owner belongs on its reservation: those nodes get the top score,
            # every other node none (Koordinator gives the reservation plugin weight 5000).
            mapped[:] = 0
            mapped[steer] = MAX_EXTENDER_PRIORITY
    return mapped, raw, ix, missing


def _score_values(state: ClusterState, info: PodInfo, rows: np.ndarray, now: int) -> np.ndarray:
    """Scores 0-100 of `rows`, -1 where a row is not valid (no metric, or an expired one)."""
    raw, valid = la.scores(state.table, rows, info.estimate, info.is_prod, now, state.config.load)
    return raw if valid.all() else np.where(valid, raw, -1)


@dataclass(slots=True)
class _Scored:
    body: bytes  # the HostPriorityList
    best: str  # the node the pod is assumed on
    mapped: np.ndarray  # 0-10 per candidate
    table: np.ndarray | None  # the 0-100 -> 0-10 table they were mapped by
    width: int  # the encoder's entry width the body was written at


def _scored(
    state: ClusterState, cand: Candidates, values: np.ndarray, before: _Scored | None, changed: list[int] | None
) -> _Scored:
    """The HostPriorityList of `values` (0-100, -1 where not valid). From `before` (over the same
    candidates, with the values at `changed` since changed): when the mapping table is the same,
    only those candidates' levels can differ, and only their entries are rewritten."""
    cfg = state.config
    enc = state.host_priorities
    enc.ensure(state.table.names)
    lo = int(values.min())
    if lo >= 0:
        raw, valid, hi = values, None, int(values.max())
    else:
        valid = values >= 0
        raw = np.maximum(values, 0)
        scored = values[valid]
        hi, lo = (int(scored.max()), int(scored.min())) if len(scored) else (-1, -1)
    table = score_table(hi, lo, cfg.score_mapping, cfg.score_min_span) if hi >= 0 else None
    if table is not None and before is not None and changed and table is before.table and enc.width == before.width:
        mapped = before.mapped.copy()
        mapped[changed] = [int(table[raw[i]]) if values[i] >= 0 else 0 for i in changed]
        body = enc.patch(before.body, cand.rows, mapped, changed)
    else:
        mapped = map_scores(raw, valid, table, valid is None)
        body = enc.encode(cand.rows, mapped)
    # the highest mapped score, then the highest 0-100 one, then the first such node: the tables
    # never decrease, so that is the first valid node with the highest 0-100 score
    best = cand.names[int(np.argmax(values))]
    return _Scored(body, best, mapped, table, enc.width)


def prioritize_request(state: ClusterState, args: ExtenderArgs, now: int | None = None) -> VerbResult:
    now = state.clock() if now is None else now
    info = _pod_info(state, args)
    cand = _candidates(state, args)
    names = cand.names
    if not names:
        return VerbResult(b"[]", candidates=0)
    t = state.table
    key = _memo_key(state, info, cand, "prioritize")
    if key is None:
        mapped, raw, ix, missing = score_nodes(state, info, names, now, (cand.rows, cand.missing))
        # the highest mapped score, then the highest raw one (0-100), then the first such node
        state.assume(info, names[int(np.argmax(mapped * 128 + raw))])
        if missing:
            return VerbResult(encode_host_priority_list(names, mapped.tolist()), candidates=len(names))
        enc = state.host_priorities
        enc.ensure(t.names)
        return VerbResult(enc.encode(ix, mapped), candidates=len(names))
    scored = memo.verdict(
        cand,
        key,
        t,
        now,
        lambda ints, bools: la.row_score(ints, bools, info.estimate, info.is_prod, now, state.config.load),
        lambda: _score_values(state, info, cand.rows, now),
        lambda values, before, changed: _scored(state, cand, values, before, changed),
    )
    state.assume(info, scored.best)
    return VerbResult(scored.body, candidates=len(names))


# --------------------------------------------------------------------------- preempt


def _victim_keys(state: ClusterState, node: str, uids: list[str]) -> list[str] | None:
    """Keys of the victims on `node`; None when one of them is unknown here."""
    by_uid = {state.pods[k].uid: k for k in state.assigned.get(node, {}) if k in state.pods}
    keys = []
    for uid in uids:
        key = by_uid.get(uid)
        if key is None:
            return None
        keys.append(key)
    return keys


def _passes_without(state: ClusterState, info: PodInfo, node: str, victims: list[str], now: int) -> str | None:
    """The filter reason still left on `node` once `victims` are gone, or None when it passes."""
    t = state.table
    r = t.index.get(node)
    if r is None:
        return REASON_UNKNOWN if state.config.fail_unknown_nodes else None
    tmp = NodeTable(capacity=1)
    tmp.row(node)
    tmp.copy_row(t, r, 0)
    pods = state.assigned.get(node, {})
    gone = set(victims)
    metric = state.metrics.get(node)
    if metric is not None:
        remaining = [p for k, p in pods.items() if k not in gone]
        load = node_load(metric, remaining, state.config.load)
        reported = {f"{pm.namespace}/{pm.name}": pm.usage for pm in metric.pods}
        freed = sum_resources(reported.get(k, ZERO) for k in gone)
        # Node usage still holds the victims' usage; prod usage sums only the remaining pods.
        load.exist = (load.exist - freed).clamp0()
        load.agg_filter = (load.agg_filter - freed).clamp0()
        la.write_load(tmp, 0, load)
    breq = sum_resources(p.batch for k, p in pods.items() if k not in gone)
    tmp.set(0, breq_cpu=breq.cpu_milli, breq_mem=breq.memory_bytes)
    la.derive_row(tmp, 0, state.config.load)
    code = _row_load_code(state, info, *tmp.row_values(0), now)
    return _reason_table(info)[code] if code else None


def preempt_request(state: ClusterState, args: ExtenderPreemptionArgs, now: int | None = None) -> VerbResult:
    """Keep the candidates on which the pod would pass our filter after the victims leave.

    Victims are returned as given (same order: kube-scheduler treats the first as the
    highest-priority one). A node whose victims this extender does not know is kept: the
    scheduler's own dry run chose them and there is nothing to judge them by.
    """
    now = state.clock() if now is None else now
    info = state.pod_info_json(args.pod, parse_pod)
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
        reason = _passes_without(state, info, node, keys, now)
        if reason is None:
            kept[node] = victims
        else:
            counts[reason] += 1
    return VerbResult(encode_preemption_result(kept), counts)


__all__ = [
    "VerbResult",
    "filter_nodes",
    "filter_request",
    "parse_pod",
    "preempt_request",
    "prioritize_request",
    "score_nodes",
]
