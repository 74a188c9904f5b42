"""The custom resources the system reads and writes: kind -> API coordinates.

Scopes follow Koordinator's CRDs: NodeSLO, NodeMetric, ClusterColocationProfile, Reservation and
NodeResourceTopology are cluster-scoped; Recommendation is namespaced (it targets a workload).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CustomResource:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection or of one object."""
        base = f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


CRDS: dict[str, CustomResource] = {
    c.kind: c
    for c in (
        CustomResource("NodeSLO", "slo.koordinator.sh", "v1alpha1", "nodeslos", False),
        CustomResource("NodeMetric", "slo.koordinator.sh", "v1alpha1", "nodemetrics", False),
        CustomResource(
            "ClusterColocationProfile", "config.koordinator.sh", "v1alpha1", "clustercolocationprofiles", False
        ),
        CustomResource("Reservation", "scheduling.koordinator.sh", "v1alpha1", "reservations", False),
        CustomResource("Recommendation", "analysis.koordinator.sh", "v1alpha1", "recommendations", True),
        # the node's NUMA zones; the slo-controller writes each zone's batch resources into it
        CustomResource("NodeResourceTopology", "topology.node.k8s.io", "v1alpha1", "noderesourcetopologies", False),
    )
}


def crd(kind: str) -> CustomResource:
    """The coordinates of `kind`; ValueError naming the known kinds otherwise."""
    try:
        return CRDS[kind]
    except KeyError:
        raise ValueError(f"unknown custom object kind {kind!r} (known: {', '.join(CRDS)})") from None
