"""The cluster port (DESIGN.md section 4) and how a backend is opened by name.

The `kubernetes` backend is `kube.py`; the simulated one is the koordsim package's.
"""

from .backends import BackendNotFound, open_cluster  # noqa: F401
from .port import (  # noqa: F401
    ClusterEvent,
    ClusterPort,
    EvictionOutcome,
    EvictionResult,
)
