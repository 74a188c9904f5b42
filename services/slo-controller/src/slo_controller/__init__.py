"""koord slo-controller: batch/mid overcommit into node status, NodeSLO distribution and the
ClusterColocationProfile admission webhook (Koordinator's koord-manager)."""
