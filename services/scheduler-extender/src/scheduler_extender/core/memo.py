"""Verdicts kept per (node list, pod shape) and brought up to date row by row.

kube-scheduler places the pods of a burst one after another: pods of one shape (a ReplicaSet's,
a Job's) over the same candidate list, with only a few rows changed between two of them (the
node the last pod was assumed on, a metric that arrived). As kube-scheduler's former
equivalence cache did, the verdicts over a list are kept per pod shape; unlike it, a node's
change does not throw them away: only the candidates whose rows changed since are judged
again, by the same vectorised code on those rows alone.

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

PATCH_LIMIT = 64  # more changed rows than this: judging the whole list again is as cheap


@dataclass(slots=True)
class Verdict:
    version: int  # the table version it holds for
    until: int  # it holds while now < until
    values: np.ndarray  # one per candidate (filter codes; scores 0-100, -1 where not valid)
    reply: Any  # what the verb answered from the values


def verdict(
    cand: Candidates,
    key: Any,
    t: NodeTable,
    now: int,
    judge_row: Callable[[list[int], list[bool]], int],
    judge_all: Callable[[], np.ndarray],
    answer: Callable[[np.ndarray], Any],
) -> Any:
    """The answer over `cand` for the verdict kept under `key`: reused when no candidate's value
    changed, else answered again from the values, patched row by row (`judge_row`) where that
    is possible and judged whole (`judge_all`) where not; then kept for the next request."""
    kept = cand.verdicts.get(key)
    values = None if kept is None else brought_up_to_date(kept, t, cand, now, judge_row)
    if kept is not None and values is kept.values:
        return kept.reply
    version = t.version()
    if values is None:
        values = judge_all()
        until = horizon(t, cand.rows, now)
    else:
        until = kept.until
    reply = answer(values)
    cand.keep(key, Verdict(version, until, values, reply))
    return reply


def horizon(t: NodeTable, rows: np.ndarray, now: int) -> int:
    """The earliest metric expiry after `now` among `rows` (NEVER when none is to come)."""
    expiry = t.expire_at.take(rows)
    later = expiry[expiry > now]
    return int(later.min()) if len(later) else NEVER


def brought_up_to_date(
    kept: Verdict, t: NodeTable, cand: Candidates, now: int, judge: Callable[[list[int], list[bool]], int]
) -> np.ndarray | None:
    """The kept values as of now: `kept.values` itself when no candidate's value changed (`kept`
    then holds for the current version), a patched copy when some did, None when the kept
    verdict cannot be brought up to date (its time is up, or too many rows changed).
    `judge(ints, bools)` gives one row's value from its columns."""
    if now >= kept.until:
        return None
    changed = t.changed_since(kept.version)
    if changed is None or len(changed) > PATCH_LIMIT:
        return None
    version = t.version()
    at = cand.positions_of(changed) if changed else {}
    if not at:
        kept.version = version
        return kept.values
    until = kept.until
    fresh = []
    for r in at.values():
        ints, bools = t.row_values(r)
        expiry = ints[_EXPIRE_AT]
        if now < expiry < until:
            until = expiry
        fresh.append(judge(ints, bools))
    kept.until = until
    positions = list(at)
    if kept.values.take(positions).tolist() == fresh:
        kept.version = version
        return kept.values
    values = kept.values.copy()
    values[positions] = fresh
    return values
