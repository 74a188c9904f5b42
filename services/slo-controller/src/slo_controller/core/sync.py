"""When to write node status: Koordinator's IsResourceDiff and update-time threshold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def is_quantity_diff(old: int | None, new: int | None, threshold: float) -> bool:
    """Present in only one -> diff; in neither -> no diff; else |new - old| > old x threshold.

    The comparison is strict, so two zeros are never a diff.
    """
    if old is None and new is None:
        return False
    if old is None or new is None:
        return True
    return abs(new - old) > old * threshold


def is_resource_diff(
    old: Mapping[str, int], new: Mapping[str, int | None], names: Iterable[str], threshold: float
) -> bool:
    """Koordinator's util.IsResourceDiff over the named resources (a None value means absent)."""
    return any(is_quantity_diff(old.get(n), new.get(n), threshold) for n in names)


def sync_decision(
    old_allocatable: Mapping[str, int],
    new_values: Mapping[str, int | None],
    last_sync_ms: int | None,
    now_ms: int,
    update_threshold_ms: int,
    diff_threshold: float,
) -> tuple[bool, str]:
    """(write?, why): the last write is older than the update threshold, or a value moved.

    A node never written counts as expired, as Koordinator's zero lastSyncTime does.
    """
    if last_sync_ms is None or now_ms - last_sync_ms > update_threshold_ms:
        return True, "expired"
    for name, value in new_values.items():
        if is_quantity_diff(old_allocatable.get(name), value, diff_threshold):
            return True, f"diff:{name}"
    return False, "unchanged"
