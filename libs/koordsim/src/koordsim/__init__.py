"""The simulated cluster: a ClusterPort backend (`sim`) driven by real traces.

`cluster.SimCluster` is the backend (registered in the `koord.cluster_backends` entry-point
group); `spec`, `genesis`, `usage`, `state`, `batch` and `codec` are its parts; `scheduler`
drives a scheduler extender as kube-scheduler does, `fit` holds kube-scheduler's in-tree
filter and score, `reservations` places Reservations as koord-scheduler would, and `traces`
reads the trace files.
"""

from .cluster import PDB_KIND, MutationError, SimClock, SimCluster, SimSpec, UsageSnapshot

__all__ = ["PDB_KIND", "MutationError", "SimClock", "SimCluster", "SimSpec", "UsageSnapshot"]
