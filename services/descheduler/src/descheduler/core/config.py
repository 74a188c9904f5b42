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
    # Thresholds over the usage of prod pods only; the prod pass is on when either is set.
    prodLowThresholds: dict[str, float] = {}
    prodHighThresholds: dict[str, float] = {}
    resourceWeights: dict[str, int] = {"cpu": 1, "memory": 1}
    anomalyCondition: AnomalyCondition = AnomalyCondition()

    @model_validator(mode="before")
    @classmethod
    def _check_given(cls, data):
        # Koordinator validates the thresholds as given, then completes them (below).
        if not isinstance(data, dict):
            return data
        name = data.get("name", "__default_node_pool__")
        maps = {
            key: data.get(key, cls.model_fields[key].default)
            for key in ("lowThresholds", "highThresholds", "prodLowThresholds", "prodHighThresholds")
        }
        if not all(isinstance(d, dict | None) for d in maps.values()):
            return data  # the field validation names what is wrong
        maps = {k: d or {} for k, d in maps.items()}
        if not all(isinstance(v, int | float) for d in maps.values() for v in d.values()):
            return data
        low, high, prod_low, prod_high = maps.values()
        for key, d in maps.items():
            for r, v in d.items():
                if v < 0:
                    raise ValueError(f"{name}: {key}.{r} must be >= 0")
        pairs = (
            (low, high, "low threshold", "high threshold"),
            (prod_high, high, "prod high threshold", "high threshold"),
            (prod_low, prod_high, "prod low threshold", "prod high threshold"),
        )
        for small, big, what, than in pairs:
            for r, v in small.items():
                if r in big and v > big[r]:
                    raise ValueError(f"{name}: {what} {v:g} of {r} exceeds its {than} {big[r]:g}")
        return data

    @model_validator(mode="after")
    def _complete(self):
        # Koordinator's newThresholds: a resource named in one map but not the other is 100 there;
        # memory is always present.
        for r in set(self.lowThresholds) | set(self.highThresholds) | {"memory"}:
            self.lowThresholds.setdefault(r, 100)
            self.highThresholds.setdefault(r, 100)
        if self.prod_enabled:
            for r in set(self.prodLowThresholds) | set(self.prodHighThresholds) | {"memory"}:
                self.prodLowThresholds.setdefault(r, 100)
                self.prodHighThresholds.setdefault(r, 100)
        for r in self.lowThresholds:
            if self.resourceWeights.get(r, 0) <= 0:
                self.resourceWeights[r] = 1
        return self

    @property
    def prod_enabled(self) -> bool:
        return bool(self.prodLowThresholds or self.prodHighThresholds)

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.nodeSelector.items())


class MigrationLimits(BaseModel):
    """MigrationController limits. A per-workload limit left unset derives from the workload's
    replicas as in Koordinator: more than 10 -> 10 %, 4..10 -> 2, fewer -> 1."""

    model_config = ConfigDict(extra="ignore")
    maxMigratingPerNode: int | None = Field(2, ge=1)
    maxMigratingPerNamespace: int | None = Field(None, ge=1)
    maxMigratingPerWorkload: int | None = Field(None, ge=1)
    maxUnavailablePerWorkload: int | None = Field(None, ge=1)  # pods of a workload away at once
    maxMigratingGlobally: int | None = Field(None, ge=1)  # jobs in flight, all rounds together
    maxMigratingPerRound: int | None = Field(10, ge=1)
    skipCheckExpectedReplicas: bool = False
    evictQPS: float = Field(10.0, ge=0)  # 0: no rate limit
    evictBurst: int = Field(1, ge=1)


class MigrationOptions(BaseModel):
    """How a planned migration is carried out (Koordinator's PodMigrationJob defaults)."""

    model_config = ConfigDict(extra="ignore")
    defaultJobMode: str = "ReservationFirst"
    defaultJobTTLSeconds: float = Field(300.0, gt=0)  # the whole job, reservation wait included
    reservationWaitSeconds: float = Field(60.0, gt=0)  # a reservation not Available by then is rolled back
    retryBackoffSeconds: float = Field(60.0, ge=0)  # a pod whose job failed is not planned again before

    @model_validator(mode="after")
    def _mode(self):
        aliases = {"Eviction": "EvictDirectly", "EvictDirectly": "EvictDirectly", "ReservationFirst": "ReservationFirst"}
        if self.defaultJobMode not in aliases:
            raise ValueError(f"defaultJobMode {self.defaultJobMode!r} is not one of ReservationFirst, EvictDirectly")
        self.defaultJobMode = aliases[self.defaultJobMode]
        return self


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
    migration: MigrationOptions = MigrationOptions()

    @model_validator(mode="after")
    def _namespaces(self):
        if self.evictableNamespaces.get("include") and self.evictableNamespaces.get("exclude"):
            raise ValueError("evictableNamespaces: set include or exclude, not both")
        return self

    def workload_limit(self, limit: int | None, replicas: int) -> int:
        """An explicit limit, else Koordinator's derivation from the expected replicas."""
        if limit is not None:
            return limit
        if replicas > 10:
            return max(replicas * 10 // 100, 1)
        return 2 if replicas >= 4 else 1

    def namespace_allowed(self, namespace: str) -> bool:
        include = self.evictableNamespaces.get("include")
        if include:
            return namespace in include
        return namespace not in self.evictableNamespaces.get("exclude", [])
