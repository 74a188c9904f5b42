"""Verdicts kept per (node list, pod shape) and brought up to date row by row.

kube-scheduler places the pods of a burst one after another: pods of one shape (a ReplicaSet's,
a Job's) over the same candidate list, with only a few rows changed between two of them (the
node the last pod was assumed on, a metric that arrived). As kube-scheduler's equivalence-class
cache did (Kubernetes 1.8 to 1.12), the verdicts over a list are kept per pod shape and only
the candidates whose nodes changed since are judged again, one row at a time. That cache was
dropped because its locks and three-level lookups cost more than the predicates it saved;
here requests run on one thread and a lookup is one dict get on a list already found.

Besides rows, a verdict depends on the time only through metric expiry: it holds until the
earliest expiry among its candidates that is still to come (`horizon`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .candidates import Candidates
from .table import INT_INDEX, NEVER, NodeTable

_EXPIRE_AT = INT_INDEX["expire_at"]

PATCH_LIMIT = 64  # more row writes than this (a refresh writes a row thrice): judge the whole list again


@dataclass(slots=True)
class Verdict:
    version: int  # the table version it holds for
    until: int  # it holds while now < until
    values: np.ndarray  # one per candidate (filter codes; scores 0-100, -1 where not valid)
    reply: Any  # what the verb answered from the values (None: not answered yet)


def verdict(
    cand: Candidates,
    key: Any,
    t: NodeTable,
    now: int,
    judge_row: Callable[[list[int], list[bool]], int],
    judge_all: Callable[[], np.ndarray],
    answer: Callable[[np.ndarray, Any, list[int] | None], Any],
) -> Any:
    """The answer over `cand` for the verdict kept under `key`: reused when no candidate's value
    changed, else answered again from the values, patched row by row (`judge_row`) where that
    is possible and judged whole (`judge_all`) where not; then kept for the next request.
    `answer(values, previous answer, positions changed since)` may reuse the previous answer
    (None, None: there is none to reuse)."""
    kept = cand.verdicts.get(key)
    if kept is None and cand.parent is not None:
        kept = inherited(cand, key, t, now, judge_row)
    patched = None if kept is None else brought_up_to_date(kept, t, cand, now, judge_row)
    if patched is not None and not patched[1] and kept.reply is not None:
        return kept.reply
    version = t.version()
    if patched is None:
        values = judge_all()
        until = horizon(t, cand.rows, now)
        reply = answer(values, None, None)
    else:
        values, changed = patched
        until = kept.until
        reply = answer(values, kept.reply, changed)
    cand.keep(key, Verdict(version, until, values, reply))
    return reply


def inherited(
    cand: Candidates, key: Any, t: NodeTable, now: int, judge_row: Callable[[list[int], list[bool]], int]
) -> Verdict | None:
    """A first verdict over `cand` from the one kept over its parent list, with no answer yet:
    the values of the rows both lists hold are carried over (brought up to date), the others
    judged one by one. None when the parent has nothing usable."""
    parent, cand.parent = cand.parent, None  # used once: the parent list may go
    kept = parent.verdicts.get(key) if parent is not None else None
    got = None if kept is None else brought_up_to_date(kept, t, parent, now, judge_row)
    if got is None:
        return None
    at = cand.positions_in(parent)
    values = got[0].take(at)
    until = kept.until
    fresh = (at < 0).nonzero()[0].tolist()
    if len(fresh) > PATCH_LIMIT:
        return None
    for i in fresh:
        ints, bools = t.row_values(int(cand.rows[i]))
        expiry = ints[_EXPIRE_AT]
        if now < expiry < until:
            until = expiry
        values[i] = judge_row(ints, bools)
    return Verdict(t.version(), until, values, None)


def horizon(t: NodeTable, rows: np.ndarray, now: int) -> int:
    """The earliest metric expiry after `now` among `rows` (NEVER when none is to come).

    Filter and score both change with time only there: `derive_row` ends a row's score
    validity when its metric expires, and a row without a metric never changes with time."""
    expiry = t.expire_at.take(rows)
    later = expiry[expiry > now]
    return int(later.min()) if len(later) else NEVER


def brought_up_to_date(
    kept: Verdict, t: NodeTable, cand: Candidates, now: int, judge: Callable[[list[int], list[bool]], int]
) -> tuple[np.ndarray, list[int]] | None:
    """The kept values as of now, with the positions whose value changed: (`kept.values`, [])
    when none did (`kept` then holds for the current version), a patched copy otherwise; None
    when the kept verdict cannot be brought up to date (its time is up, or too many rows
    changed). `judge(ints, bools)` gives one row's value from its columns."""
    if now >= kept.until:
        return None
    changed = t.changed_since(kept.version)
    if changed is None or len(changed) > PATCH_LIMIT:
        return None
    version = t.version()
    at = cand.positions_of(changed) if changed else {}
    until = kept.until
    moved: list[tuple[int, int]] = []
    old = kept.values
    for i, r in at.items():
        ints, bools = t.row_values(r)
        expiry = ints[_EXPIRE_AT]
        if now < expiry < until:
            until = expiry
        value = judge(ints, bools)
        if value != old[i]:
            moved.append((i, value))
    kept.until = until
    if not moved:
        kept.version = version
        return old, []
    values = old.copy()
    positions = [i for i, _ in moved]
    values[positions] = [v for _, v in moved]
    return values, positions
