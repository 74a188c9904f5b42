"""One interface every service uses to read and change the cluster.

Backends are found by name (`backends.open_cluster`): `kubernetes` (the official client,
here in koordcommon) and `sim` (an in-process cluster driven by traces, in the koordsim
package; every process holds a replica kept in step through the bus). Methods are async;
the kubernetes backend runs the blocking client in a thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from ..records import NodeRecord, PodRecord

# Custom object kinds the system reads and writes (group/version in koordcommon.crds).
CUSTOM_KINDS = ("NodeSLO", "NodeMetric", "ClusterColocationProfile", "Reservation", "Recommendation",
                "NodeResourceTopology")


class EvictionOutcome(StrEnum):
    EVICTED = "evicted"  # 2xx
    BLOCKED = "blocked"  # 429: a PodDisruptionBudget says no; retry later
    NOT_FOUND = "not_found"  # 404
    FORBIDDEN = "forbidden"  # 403 / 500 (several PDBs), not retried blindly
    ERROR = "error"


@dataclass(frozen=True)
class EvictionResult:
    outcome: EvictionOutcome
    message: str = ""
    retry_after_s: float | None = None


@dataclass(frozen=True)
class ClusterEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    kind: Literal["Node", "Pod", "Custom"]
    obj: NodeRecord | PodRecord | dict[str, Any]
    custom_kind: str = ""


@runtime_checkable
class ClusterPort(Protocol):
    async def start(self) -> None:
        """Connect / load; after it returns, reads reflect the cluster."""

    async def close(self) -> None: ...

    # reads
    async def list_nodes(self) -> list[NodeRecord]: ...
    async def get_node(self, name: str) -> NodeRecord | None: ...
    async def list_pods(self, node_name: str | None = None, namespace: str | None = None) -> list[PodRecord]: ...
    async def get_pod(self, namespace: str, name: str) -> PodRecord | None: ...
    def watch(self) -> AsyncIterator[ClusterEvent]:
        """Node and pod changes (and custom objects) from now on; each subscriber gets all."""
        ...

    async def list_namespaces(self) -> dict[str, dict[str, str]]:
        """Every namespace with its labels (profile and descheduler namespace selectors)."""
        ...

    async def resolve_workload(self, pod: PodRecord) -> tuple[str, str]:
        """(kind, name) of the pod's workload: ReplicaSet resolved to its Deployment when known."""
        ...

    # writes
    async def patch_node_status(
        self, name: str, set_resources: dict[str, int], remove_resources: list[str] = ()
    ) -> NodeRecord:
        """Set `status.capacity[k] = status.allocatable[k] = v` for each k (integer internal values),
        and remove the named keys from both."""
        ...

    async def evict_pod(
        self, namespace: str, name: str, reason: str = "", dry_run: bool = False, grace_period_s: int | None = None
    ) -> EvictionResult: ...

    async def create_pod(self, pod: PodRecord) -> PodRecord: ...
    async def bind_pod(self, namespace: str, name: str, node_name: str, uid: str = "",
                       annotations: dict[str, str] | None = None) -> None:
        """Bind through a Binding (pods/binding); its `annotations` are set on the pod with the
        binding (the API server copies them), as a scheduler records what it allocated."""
        ...
    async def delete_pod(self, namespace: str, name: str) -> None: ...

    # custom objects (cluster-scoped unless namespace given); obj is the Kubernetes JSON dict
    async def list_custom(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]: ...
    async def get_custom(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...
    async def apply_custom(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace (by metadata.name / namespace)."""
        ...

    async def delete_custom(self, kind: str, name: str, namespace: str | None = None) -> None: ...

    async def emit_event(
        self, involved: dict[str, str], reason: str, message: str, type_: str = "Normal"
    ) -> None:
        """A Kubernetes Event about `involved` ({kind, name, namespace?, uid?})."""
        ...

