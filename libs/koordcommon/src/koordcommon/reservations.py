"""The Reservation's shared vocabulary (Koordinator's scheduling.koordinator.sh/v1alpha1):
its phases and the annotations of the reserve pod it is scheduled as.

What each part does with a reservation stays with that part: the descheduler creates one for
a migration and consumes it, the scheduler-extender counts the room it holds, the simulated
cluster places it and collects ended ones as koord-scheduler would. The words they read from
the object are defined here once.
"""

from __future__ import annotations

from typing import Any

KIND = "Reservation"

PENDING = "Pending"  # Koordinator's default: written, not placed yet
AVAILABLE = "Available"  # placed on status.nodeName, holding its room
WAITING = "Waiting"
SUCCEEDED = "Succeeded"  # consumed (allocateOnce: by its first owner)
FAILED = "Failed"  # unschedulable or expired
ENDED = (SUCCEEDED, FAILED)  # hold nothing any more; koord-scheduler's GC deletes them later

# The reserve pod: the reservation's template as a pod named after its UID.
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"
ANNOTATION_RESERVATION_NAME = "scheduling.koordinator.sh/reservation-name"


def phase(obj: dict[str, Any]) -> str:
    """status.phase, Pending when the object has none (Koordinator's default)."""
    return str((obj.get("status") or {}).get("phase") or PENDING)


__all__ = [
    "ANNOTATION_RESERVATION_NAME", "ANNOTATION_RESERVE_POD", "AVAILABLE", "ENDED", "FAILED", "KIND", "PENDING",
    "SUCCEEDED", "WAITING", "phase",
]
