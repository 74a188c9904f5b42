"""LowNodeLoadArgs and migration limits, with Koordinator's field names and defaults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

RESOURCES = ("cpu", "memory")


class AnomalyCondition(BaseModel):
    model_config = ConfigDict(extra="ignore")
    consecutiveAbnormalities: int = Field(5, gt=0)
    consecutiveNormalities: int = Field(3, gt=0)
    timeoutSeconds: float = 60.0


class NodePool(BaseModel):
    """One pool of nodes with its own thresholds (Koordinator's nodePools)."""

    model_config = ConfigDict(extra="ignore")
    name: str = "__default_node_pool__"
    nodeSelector: dict[str, str] = {}
    lowThresholds: dict[str, float] = {"cpu": 45, "memory": 55}
    highThresholds: dict[str, float] = {"cpu": 75, "memory": 80}
    resourceWeights: dict[str, int] = {"cpu": 1, "memory": 1}
    anomalyCondition: AnomalyCondition = AnomalyCondition()

    @model_validator(mode="after")
    def _complete(self):
        # Koordinator's newThresholds: a resource named in one map but not the other is 100 there;
        # memory is always present.
        for r in set(self.lowThresholds) | set(self.highThresholds) | {"memory"}:
            self.lowThresholds.setdefault(r, 100)
            self.highThresholds.setdefault(r, 100)
        for r, low in self.lowThresholds.items():
            if low < 0 or self.highThresholds[r] < 0:
                raise ValueError(f"{self.name}: thresholds must be >= 0 ({r})")
            if low > self.highThresholds[r]:
                raise ValueError(f"{self.name}: low threshold {low} of {r} exceeds its high threshold {self.highThresholds[r]}")
        for r in self.lowThresholds:
            if self.resourceWeights.get(r, 0) <= 0:
                self.resourceWeights[r] = 1
        return self

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.nodeSelector.items())


class MigrationLimits(BaseModel):
    model_config = ConfigDict(extra="ignore")
    maxMigratingPerNode: int | None = 2
    maxMigratingPerNamespace: int | None = None
    maxMigratingPerWorkload: int | None = 1
    maxUnavailablePerWorkload: int | None = 1  # never more than this many pods of a workload away at once
    maxMigratingPerRound: int | None = 10
    evictQPS: float = 10.0


class LowNodeLoadArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    dryRun: bool = False
    paused: bool = False
    numberOfNodes: int = 0
    nodeMetricExpirationSeconds: int = 180
    nodeFit: bool = True
    evictLocalStoragePods: bool = False
    evictableNamespaces: dict[str, list[str]] = {"exclude": ["kube-system", "koordinator-system"]}
    nodePools: list[NodePool] = [NodePool()]
    limits: MigrationLimits = MigrationLimits()

    @model_validator(mode="after")
    def _namespaces(self):
        if self.evictableNamespaces.get("include") and self.evictableNamespaces.get("exclude"):
            raise ValueError("evictableNamespaces: set include or exclude, not both")
        return self

    def namespace_allowed(self, namespace: str) -> bool:
        include = self.evictableNamespaces.get("include")
        if include:
            return namespace in include
        return namespace not in self.evictableNamespaces.get("exclude", [])
