"""Retention and downsampling plans: which complete buckets to roll up, which rows to delete.

Raw samples roll into 1-minute buckets, those into 1-hour buckets. A bucket is rolled up
only once it is complete and `lag` has passed (late redeliveries after a collector restart
still land in the raw table in time); each rollup resumes after the newest bucket it holds,
so running the plan twice does nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass

from .series import HOUR_MS, MINUTE_MS, bucket_of


@dataclass(frozen=True)
class RetentionPolicy:
    raw_ms: int = 24 * HOUR_MS
    minute_ms: int = 7 * 24 * HOUR_MS
    hour_ms: int = 90 * 24 * HOUR_MS
    events_ms: int = 30 * 24 * HOUR_MS
    lag_ms: int = 5 * MINUTE_MS
    # At most this much source time is rolled per step, so one run stays short.
    max_span_ms: int = 6 * HOUR_MS


@dataclass(frozen=True)
class Rollup:
    family: str  # "node" | "pod"
    source: str  # "raw" | "1m"
    target: str  # "1m" | "1h"
    start: int  # first bucket start (inclusive)
    end: int  # end of the last complete bucket (exclusive)
    step: int


@dataclass(frozen=True)
class Delete:
    table: str
    before: int  # rows with ts (or bucket) < before go


@dataclass(frozen=True)
class Plan:
    rollups: tuple[Rollup, ...]
    deletes: tuple[Delete, ...]


def rollup_window(
    last_bucket: int | None, first_source_ts: int | None, now: int, step: int, policy: RetentionPolicy
) -> tuple[int, int] | None:
    """[start, end) of complete buckets not yet rolled up, or None when nothing is due."""
    if first_source_ts is None:
        return None
    start = last_bucket + step if last_bucket is not None else bucket_of(first_source_ts, step)
    end = bucket_of(now - policy.lag_ms, step)
    end = min(end, start + max(policy.max_span_ms // step, 1) * step)
    return (start, end) if end > start else None


def plan(
    now: int,
    policy: RetentionPolicy,
    state: dict[tuple[str, str], tuple[int | None, int | None]],
) -> Plan:
    """`state[(family, target)] = (newest bucket in target, oldest ts/bucket in its source)`.

    Source rows are deleted only once they are rolled up, so a collector that was down
    longer than the raw retention does not lose the history of those hours.
    """
    rollups = []
    rolled_through: dict[tuple[str, str], int | None] = {}
    for family in ("node", "pod"):
        source_limit: int | None = None
        for source, target, step in (("raw", "1m", MINUTE_MS), ("1m", "1h", HOUR_MS)):
            last, first = state.get((family, target), (None, None))
            window = rollup_window(last, first, now, step, policy)
            if window and source_limit is not None:
                # 1h buckets only from minutes that are already rolled.
                end = min(window[1], bucket_of(source_limit, step))
                window = (window[0], end) if end > window[0] else None
            if window:
                rollups.append(Rollup(family, source, target, window[0], window[1], step))
            through = window[1] if window else (last + step if last is not None else None)
            rolled_through[(family, source)] = through
            source_limit = through

    def keep_unrolled(cutoff: int, family: str, source: str) -> int:
        through = rolled_through.get((family, source))
        return cutoff if through is None else min(cutoff, through)

    raw_cut, minute_cut, hour_cut = now - policy.raw_ms, now - policy.minute_ms, now - policy.hour_ms
    deletes = (
        Delete("node_samples", keep_unrolled(raw_cut, "node", "raw")),
        Delete("pod_samples", keep_unrolled(raw_cut, "pod", "raw")),
        Delete("container_samples", keep_unrolled(raw_cut, "pod", "raw")),
        Delete("node_metrics", raw_cut),
        Delete("node_usage_1m", keep_unrolled(minute_cut, "node", "1m")),
        Delete("pod_usage_1m", keep_unrolled(minute_cut, "pod", "1m")),
        Delete("node_usage_1h", hour_cut),
        Delete("pod_usage_1h", hour_cut),
        Delete("node_resources", minute_cut),
        Delete("recommendations", hour_cut),
        Delete("events", now - policy.events_ms),
    )
    return Plan(tuple(rollups), deletes)
