"""The cluster port (DESIGN.md section 4) and its backends: `sim` and `kubernetes`."""

from .port import (  # noqa: F401
    ClusterEvent,
    ClusterPort,
    EvictionOutcome,
    EvictionResult,
    open_cluster,
)
