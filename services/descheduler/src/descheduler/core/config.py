"""The descheduler's arguments, in Koordinator's shapes, field names and defaults.

Two shapes are read (`parse_config`): LowNodeLoadArgs on its own (with this descheduler's
`limits` and `migration` blocks), or a whole DeschedulerConfiguration (descheduler/v1alpha2)
whose profile runs LowNodeLoad with the MigrationController.

Nothing a user writes is dropped silently. Every key is honoured, or accepted with a warning
when it only tunes the Go process (leader election, client connection, profiling: `NO_EFFECT`),
or rejected, naming the key and why: an unknown key, a resource the descheduler has no usage
for, or a value that asks for behaviour it does not have (`evictionPolicy: Delete`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from koordcommon.durations import DurationError, parse_duration_ms
from koordcommon.selectors import LabelSelector, parse_selector
from koordcommon.suggest import closest
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .evictable import EvictorRules

API_VERSION = "descheduler/v1alpha2"
DEFAULT_POOL = "__default_node_pool__"
# The resources LowNodeLoad can weigh: the NodeMetric reports cpu and memory, and the pods on a
# node are counted against its allocatable `pods`.
RESOURCE_NAMES = ("cpu", "memory", "pods")
# Koordinator's shipped descheduler-config.yaml; they apply when no threshold is configured at all.
SHIPPED_LOW = {"cpu": 45.0, "memory": 55.0}
SHIPPED_HIGH = {"cpu": 75.0, "memory": 80.0}
THRESHOLD_FIELDS = ("lowThresholds", "highThresholds", "prodLowThresholds", "prodHighThresholds")
# LowNodeLoadArgs' top-level fields that Koordinator's conversion moves into the default pool.
POOL_FIELDS = ("nodeSelector", "useDeviationThresholds", *THRESHOLD_FIELDS, "resourceWeights", "anomalyCondition")
EVICTION_GATES = (
    "MaxMigratingGlobally", "MaxMigratingPerNode", "MaxMigratingPerNamespace", "MaxMigratingPerWorkload",
    "MaxUnavailablePerWorkload", "ExpectedReplicas", "NodeFit", "LabelSelector", "PriorityThreshold",
    "LocalStorage", "SystemCritical", "PVC", "BarePods", "Namespaces",
)
NOT_MOVABLE_BARE = "a bare pod has no controller to recreate it, so its migration could never finish"


# ---------------------------------------------------------------------------------- field types


def _label_selector(value: Any) -> LabelSelector | None:
    """A Kubernetes LabelSelector. A plain label map is refused rather than read as an empty
    selector, which would match every node or pod."""
    if value is None or isinstance(value, LabelSelector):
        return value
    if isinstance(value, dict):
        other = [str(k) for k in value if k not in ("matchLabels", "matchExpressions")]
        if other:
            raise ValueError(
                f"a label selector takes matchLabels and matchExpressions, not {', '.join(map(repr, other))} "
                f"(labels to match go under matchLabels: {{matchLabels: {{{other[0]}: ...}}}})"
            )
    return parse_selector(value)


Selector = Annotated[LabelSelector | None, PlainValidator(_label_selector)]


def _seconds(value: Any, key: str) -> float:
    """A Go duration (`metav1.Duration`: "5m", "1m30s") in seconds."""
    try:
        return parse_duration_ms(value) / 1000
    except DurationError as exc:
        raise ValueError(f"{key}: {exc}") from None


def _int_or_percent(value: Any, key: str) -> int | str | None:
    """Kubernetes IntOrString as Koordinator reads it: an integer, or a percentage "10%"."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d+%", value):
        return value
    raise ValueError(f"{key}: {value!r} is neither a count (>= 0) nor a percentage such as '10%'")


def scaled_limit(limit: int | str | None, replicas: int | None) -> int | None:
    """Koordinator's GetMaxMigrating / GetMaxUnavailable for a workload of `replicas`: the limit
    as a count (a percentage of the replicas, rounded down), 0 read as 1; unset, derived from the
    replicas (more than 10: 10 %, 4..10: 2, fewer: 1). Unknown replicas (None): only an explicit
    count applies.

    Koordinator also caps the result at the controller's spec.replicas. The replicas here are
    the workload's live pods, fewer while its migrations run, so a count is not capped: a cap
    would tighten the limit, and refuse the workload outright, in the middle of a migration."""
    if replicas is None:
        return limit if isinstance(limit, int) else None
    value = 0
    if limit is not None:
        value = replicas * int(limit[:-1]) // 100 if isinstance(limit, str) else limit
        value = value or 1
    if value == 0:
        value = replicas * 10 // 100 if replicas > 10 else 2 if replicas >= 4 else 1
    return value


# ---------------------------------------------------------------------------------- the base


def warn(info: ValidationInfo, message: str) -> None:
    """Record a warning when the caller collects them (`parse_config` does)."""
    if isinstance(info.context, dict) and isinstance(info.context.get("warnings"), list):
        info.context["warnings"].append(message)


class KoordArgs(BaseModel):
    """A Koordinator argument type. A key without a field is rejected, naming it (and the field it
    was probably meant to be); a NO_EFFECT key is accepted with a warning; a DURATIONS key (a Go
    duration) fills its seconds field; KIND names the type's `kind`, checked with `apiVersion`."""

    model_config = ConfigDict(extra="forbid")
    NO_EFFECT: ClassVar[dict[str, str]] = {}
    DURATIONS: ClassVar[dict[str, str]] = {}
    KIND: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any, info: ValidationInfo) -> Any:
        return _checked_keys(cls, data, info)


def _checked_keys(cls: type[KoordArgs], data: Any, info: ValidationInfo, also: tuple[str, ...] = ()) -> Any:
    if not isinstance(data, dict):
        return data
    data = dict(data)
    if cls.KIND:
        _check_type_meta(cls.KIND, data.pop("apiVersion", None), data.pop("kind", None))
    for key, target in cls.DURATIONS.items():
        if key in data:
            if target in data:
                raise ValueError(f"give {key} or {target}, not both")
            data[target] = _seconds(data.pop(key), key)
    for key in [k for k in data if k in cls.NO_EFFECT]:
        del data[key]
        warn(info, f"{cls.__name__}.{key} has no effect here: {cls.NO_EFFECT[key]}")
    known = list(cls.model_fields) + list(cls.DURATIONS) + list(also)
    unknown = [k for k in data if k not in cls.model_fields]
    if unknown:
        hints = []
        for k in unknown:
            close = closest(k, known)
            hints.append(f"{k!r}" + (f" (did you mean {close!r}?)" if close else ""))
        raise ValueError(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(hints)} in {cls.__name__}")
    return data


def _check_type_meta(kind: str, api_version: Any, given_kind: Any) -> None:
    if api_version is not None and api_version != API_VERSION:
        raise ValueError(f"apiVersion {api_version!r} is not supported: {API_VERSION}")
    if given_kind is not None and given_kind != kind:
        raise ValueError(f"kind {given_kind!r} where {kind} was expected")


# ---------------------------------------------------------------------------------- LowNodeLoad


class AnomalyCondition(KoordArgs):
    """When a hot node counts as abnormal (Koordinator's LoadAnomalyCondition). A field left out
    takes its default; Koordinator fills only some of a given condition's empty fields, which
    leaves the others invalid or unset."""

    DURATIONS = {"timeout": "timeoutSeconds"}
    consecutiveAbnormalities: int = Field(5, gt=0)
    consecutiveNormalities: int = Field(3, gt=0)
    timeoutSeconds: float = Field(60.0, ge=0)


class Namespaces(KoordArgs):
    include: list[str] = []
    exclude: list[str] = []

    @model_validator(mode="after")
    def _one_of(self):
        if self.include and self.exclude:
            raise ValueError("set include or exclude, not both")
        return self

    def allows(self, namespace: str) -> bool:
        return namespace in self.include if self.include else namespace not in self.exclude


class PodSelector(KoordArgs):
    name: str = ""
    selector: Selector = None


class NodePool(KoordArgs):
    """One pool of nodes with its own thresholds (Koordinator's LowNodeLoadNodePool), as the
    core uses it: complete. LowNodeLoadArgs builds its pools from the top-level fields and the
    user's pools; a pool built on its own gets the shipped thresholds."""

    name: str = DEFAULT_POOL
    nodeSelector: Selector = None  # None: every node; a selector (even empty) also skips nodes earlier pools drained
    useDeviationThresholds: bool = False
    lowThresholds: dict[str, float] = Field(default_factory=lambda: dict(SHIPPED_LOW))
    highThresholds: dict[str, float] = Field(default_factory=lambda: dict(SHIPPED_HIGH))
    # Thresholds over the usage of prod pods only; the prod pass is on when either is set.
    prodLowThresholds: dict[str, float] = {}
    prodHighThresholds: dict[str, float] = {}
    resourceWeights: dict[str, int] = Field(default_factory=lambda: {"cpu": 1, "memory": 1})
    anomalyCondition: AnomalyCondition = AnomalyCondition()

    @field_validator(*THRESHOLD_FIELDS, "resourceWeights")
    @classmethod
    def _resources(cls, value: dict, info: ValidationInfo) -> dict:
        for r in value:
            if r not in RESOURCE_NAMES:
                raise ValueError(
                    f"resource {r!r} is not supported: usage is known for {', '.join(RESOURCE_NAMES)} only"
                )
        return value

    @model_validator(mode="before")
    @classmethod
    def _check_given(cls, data):
        # Koordinator validates the thresholds as given, then completes them (below).
        if not isinstance(data, dict):
            return data
        name = data.get("name", DEFAULT_POOL)
        maps = {key: data.get(key, cls.model_fields[key].get_default(call_default_factory=True))
                for key in THRESHOLD_FIELDS}
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
        # Koordinator's newThresholds: every resource named in one map is present in all, memory
        # always; a missing value is 100 (%) with absolute thresholds, 0 (no deviation) with
        # deviation thresholds.
        fill = 0.0 if self.useDeviationThresholds else 100.0
        for r in set(self.lowThresholds) | set(self.highThresholds) | {"memory"}:
            self.lowThresholds.setdefault(r, fill)
            self.highThresholds.setdefault(r, fill)
        if self.prod_enabled:
            for r in set(self.prodLowThresholds) | set(self.prodHighThresholds) | {"memory"}:
                self.prodLowThresholds.setdefault(r, fill)
                self.prodHighThresholds.setdefault(r, fill)
        return self

    @property
    def prod_enabled(self) -> bool:
        return bool(self.prodLowThresholds or self.prodHighThresholds)

    @property
    def resources(self) -> tuple[str, ...]:
        """The resources this pool classifies, balances and stops on: those its thresholds name
        (memory always), in a fixed order."""
        return tuple(r for r in RESOURCE_NAMES if r in self.lowThresholds)

    def selects(self, labels: dict[str, str]) -> bool:
        return self.nodeSelector is None or self.nodeSelector.matches(labels)


# ---------------------------------------------------------------------------------- MigrationController


class ObjectLimiter(KoordArgs):
    """At most maxMigrating migrations of one object (a workload, a namespace) per duration,
    in bursts of `burst` (MigrationController's objectLimiters)."""

    DURATIONS = {"duration": "durationSeconds"}
    durationSeconds: float = Field(0.0, ge=0)  # 0 (no duration given): the limiter is off, as in Koordinator
    maxMigrating: int | str | None = None  # unset (workload): maxMigratingPerWorkload's
    burst: int = Field(0, ge=0)  # 0 is 1

    @field_validator("maxMigrating", mode="before")
    @classmethod
    def _count_or_percent(cls, v, info: ValidationInfo):
        return _int_or_percent(v, info.field_name)


class MigrationLimits(KoordArgs):
    """How many migrations may run at once, per round and per object (MigrationController's
    limits; maxMigratingPerRound is this descheduler's; the maxNoOfPodsToEvict* are the
    DeschedulerConfiguration's, counted per round as Koordinator's EvictionLimiter does).

    A maxMigrating* of 0 or less is no limit, as in Koordinator. A per-workload limit is a count
    or a percentage of the workload's replicas; unset, it derives from the replicas
    (`scaled_limit`)."""

    maxMigratingPerNode: int | None = 2
    maxMigratingPerNamespace: int | None = None
    maxMigratingPerWorkload: int | str | None = None
    maxUnavailablePerWorkload: int | str | None = None  # pods of a workload away at once
    maxMigratingGlobally: int | None = None  # jobs in flight, all rounds together
    maxMigratingPerRound: int | None = Field(10, ge=1)
    maxNoOfPodsToEvictPerNode: int | None = Field(None, ge=0)
    maxNoOfPodsToEvictPerNamespace: int | None = Field(None, ge=0)
    maxNoOfPodsToEvictTotal: int | None = Field(None, ge=0)
    skipCheckExpectedReplicas: bool = False
    skipEvictionGates: list[str] = []
    evictQPS: float = Field(10.0, ge=0)  # 0: no rate limit
    evictBurst: int = Field(1, ge=1)
    objectLimiters: dict[str, ObjectLimiter] = {}  # "workload" / "namespace"

    @field_validator("maxMigratingPerNode", "maxMigratingPerNamespace", "maxMigratingGlobally")
    @classmethod
    def _no_limit(cls, v: int | None) -> int | None:
        return v if v is not None and v > 0 else None

    @field_validator("maxMigratingPerWorkload", "maxUnavailablePerWorkload", mode="before")
    @classmethod
    def _per_workload(cls, v, info: ValidationInfo):
        return _int_or_percent(v, info.field_name)

    @field_validator("evictQPS", mode="before")
    @classmethod
    def _float_or_string(cls, v):
        # Koordinator's Float64OrString: "10" and 10 alike.
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                raise ValueError(f"evictQPS {v!r} is not a number") from None
        return v

    @field_validator("skipEvictionGates")
    @classmethod
    def _gates(cls, gates: list[str]) -> list[str]:
        for g in gates:
            if g == "BarePods":
                raise ValueError(f"skipEvictionGates: BarePods is not supported: {NOT_MOVABLE_BARE}")
            if g not in EVICTION_GATES:
                raise ValueError(f"skipEvictionGates: unknown gate {g!r} (one of {', '.join(EVICTION_GATES)})")
        return gates

    @field_validator("objectLimiters")
    @classmethod
    def _limiter_kinds(cls, limiters: dict) -> dict:
        for kind, limiter in limiters.items():
            if kind not in ("workload", "namespace"):
                raise ValueError(f"objectLimiters: unknown object {kind!r} (workload or namespace)")
            if kind == "namespace" and isinstance(limiter.maxMigrating, str):
                raise ValueError("objectLimiters.namespace.maxMigrating must be a count, not a percentage")
        return limiters

    def skips(self, gate: str) -> bool:
        return gate in self.skipEvictionGates


class PriorityThreshold(KoordArgs):
    value: int | None = None
    name: str = ""

    @field_validator("name")
    @classmethod
    def _by_value(cls, v: str) -> str:
        if v:
            raise ValueError(
                f"priorityThreshold.name {v!r} is not supported: give its value (this descheduler does not "
                "read PriorityClass objects)"
            )
        return v


class MigrationOptions(KoordArgs):
    """How a planned migration is carried out and which pods the MigrationController lets go
    (Koordinator's MigrationControllerArgs, with its PodMigrationJob defaults;
    reservationWaitSeconds and retryBackoffSeconds are this descheduler's)."""

    NO_EFFECT = {
        "maxConcurrentReconciles": "one loop advances every migration in flight",
        "arbitrationArgs": "migrations are ordered and filtered when a round plans them, not queued for arbitration",
    }
    DURATIONS = {"defaultJobTTL": "defaultJobTTLSeconds"}
    defaultJobMode: str = "ReservationFirst"
    defaultJobTTLSeconds: float = Field(300.0, gt=0)  # the whole job, reservation wait included
    reservationWaitSeconds: float = Field(60.0, gt=0)  # a reservation not Available by then is rolled back
    retryBackoffSeconds: float = Field(60.0, ge=0)  # a pod whose job failed is not planned again before
    evictionPolicy: str = "Eviction"
    # ReservationFirst moves only pods these schedulers placed. Unset: every pod (Koordinator's
    # default is [koord-scheduler]; here kube-scheduler with the extender honours reservations).
    schedulerNames: list[str] | None = None
    namespaces: Namespaces | None = None
    labelSelector: Selector = None
    priorityThreshold: PriorityThreshold | None = None
    evictSystemCriticalPods: bool = False
    ignorePvcPods: bool = False
    evictFailedBarePods: bool = False
    evictAllBarePods: bool = False
    nodeFit: bool = False  # a pod moves only to a node its requests fit (LowNodeLoad's nodeFit implies it)
    nodeSelector: str = ""
    defaultDeleteOptions: dict | None = None

    @model_validator(mode="after")
    def _mode(self):
        aliases = {"Eviction": "EvictDirectly", "EvictDirectly": "EvictDirectly", "ReservationFirst": "ReservationFirst"}
        if self.defaultJobMode not in aliases:
            raise ValueError(f"defaultJobMode {self.defaultJobMode!r} is not one of ReservationFirst, EvictDirectly")
        self.defaultJobMode = aliases[self.defaultJobMode]
        return self

    @field_validator("evictionPolicy")
    @classmethod
    def _policy(cls, v: str) -> str:
        if v in ("Delete", "SoftEviction"):
            raise ValueError(f"evictionPolicy {v} is not supported: pods leave through the Eviction API (Eviction)")
        if v != "Eviction":
            raise ValueError(f"evictionPolicy {v!r} is not one of Eviction, Delete, SoftEviction")
        return v

    @field_validator("evictFailedBarePods", "evictAllBarePods")
    @classmethod
    def _bare(cls, v: bool, info: ValidationInfo) -> bool:
        if v:
            raise ValueError(f"{info.field_name}: true is not supported: {NOT_MOVABLE_BARE}")
        return v

    @field_validator("nodeSelector")
    @classmethod
    def _node_selector(cls, v: str) -> str:
        if v:
            raise ValueError(
                f"nodeSelector {v!r} is not supported here: select nodes with LowNodeLoad's nodeSelector or nodePools"
            )
        return v

    @field_validator("defaultDeleteOptions")
    @classmethod
    def _delete_options(cls, v: dict | None) -> dict | None:
        if v:
            raise ValueError("defaultDeleteOptions is not supported: evictions use the API server's defaults")
        return v


# ---------------------------------------------------------------------------------- LowNodeLoadArgs


class LowNodeLoadArgs(KoordArgs):
    """Koordinator's LowNodeLoadArgs, plus this descheduler's `limits` and `migration` blocks.

    As Koordinator's conversion does, the top-level pool fields (POOL_FIELDS) make the first
    pool, `__default_node_pool__`, and the given `nodePools` follow it, each taking from the
    top level every field it leaves out except nodeSelector and useDeviationThresholds (a
    NodePool built in code is complete and taken as it is). When no threshold is configured
    anywhere, the top level takes the shipped ones (45/55, 75/80).
    `nodePools` therefore holds the pools as they run, the default one first.
    """

    KIND = "LowNodeLoadArgs"
    DURATIONS = {"detectorCacheTimeout": "detectorCacheTimeoutSeconds"}
    dryRun: bool = False
    paused: bool = False
    numberOfNodes: int = Field(0, ge=0)
    nodeMetricExpirationSeconds: int = Field(180, gt=0)
    nodeFit: bool = True
    evictLocalStoragePods: bool = False
    evictableNamespaces: Namespaces = Namespaces(exclude=["kube-system", "koordinator-system"])
    podSelectors: list[PodSelector] = []  # ORed; none: every pod
    detectorCacheTimeoutSeconds: float = Field(300.0, gt=0)  # a node's detector is forgotten after this
    nodePools: list[NodePool] = Field(default_factory=lambda: [NodePool()])
    limits: MigrationLimits = MigrationLimits()
    migration: MigrationOptions = MigrationOptions()
    # Nodes the descheduler works on at all (the DeschedulerConfiguration's and its profile's
    # nodeSelector); every selector must match.
    _node_scope: list[LabelSelector] = PrivateAttr(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        top = {k: data.pop(k) for k in POOL_FIELDS if k in data}
        data = _checked_keys(cls, data, info, also=POOL_FIELDS)
        data["nodePools"] = _pools(top, data.get("nodePools") or [])
        return data

    def namespace_allowed(self, namespace: str) -> bool:
        return self.evictableNamespaces.allows(namespace)

    def run_every(self, interval_s: float) -> None:
        """The rounds come every `interval_s`: Koordinator raises the detector cache's timeout to
        at least that, or a node's anomaly count would be forgotten between two rounds."""
        self.detectorCacheTimeoutSeconds = max(self.detectorCacheTimeoutSeconds, interval_s)

    def pod_selected(self, labels: dict[str, str]) -> bool:
        """Koordinator's podSelectors: any selector matching lets the pod go; none given, every pod."""
        selectors = [s.selector for s in self.podSelectors if s.selector is not None]
        return not selectors or any(s.matches(labels) for s in selectors)

    @property
    def node_scope(self) -> list[LabelSelector]:
        return self._node_scope

    def in_scope(self, labels: dict[str, str]) -> bool:
        return all(s.matches(labels) for s in self._node_scope)

    def workload_limit(self, limit: int | str | None, replicas: int | None) -> int | None:
        return scaled_limit(limit, replicas)

    def evictor_rules(self) -> EvictorRules:
        """The MigrationController's filter, with the skipped gates left out."""
        lim, mig = self.limits, self.migration
        ns = mig.namespaces if mig.namespaces is not None and not lim.skips("Namespaces") else None
        threshold = mig.priorityThreshold.value if mig.priorityThreshold is not None else None
        reservation_first = mig.defaultJobMode == "ReservationFirst"
        return EvictorRules(
            evict_local_storage=self.evictLocalStoragePods or lim.skips("LocalStorage"),
            evict_system_critical=mig.evictSystemCriticalPods or lim.skips("SystemCritical"),
            ignore_pvc=mig.ignorePvcPods and not lim.skips("PVC"),
            priority_threshold=None if lim.skips("PriorityThreshold") else threshold,
            include_namespaces=frozenset(ns.include) if ns else frozenset(),
            exclude_namespaces=frozenset(ns.exclude) if ns else frozenset(),
            label_selector=None if lim.skips("LabelSelector") else mig.labelSelector,
            scheduler_names=frozenset(mig.schedulerNames) if mig.schedulerNames and reservation_first else None,
        )

    @property
    def requests_must_fit(self) -> bool:
        """The MigrationController's nodeFit (unless its gate is skipped)."""
        return self.migration.nodeFit and not self.limits.skips("NodeFit")


def _anomaly_given(value: Any) -> Any:
    """A condition as the fields given: a mapping as written, a model by the fields set in code."""
    if isinstance(value, BaseModel):
        return {k: getattr(value, k) for k in value.model_fields_set}
    given = dict(value) if isinstance(value, dict) else value
    if isinstance(given, dict) and "timeout" in given and "timeoutSeconds" not in given:
        given["timeoutSeconds"] = _seconds(given.pop("timeout"), "anomalyCondition.timeout")
    return given


def _pools(top: dict, pools: list) -> list:
    """Koordinator's v1alpha2 conversion and defaulting: the default pool from the top-level
    fields first, then the given pools, each mapping inheriting what it leaves out (a NodePool
    built in code is complete: it is taken as it is)."""
    if not isinstance(pools, list):
        return pools  # the field validation names what is wrong
    if not any(isinstance(d, NodePool) or (isinstance(d, dict) and k in d) for d in (top, *pools) for k in THRESHOLD_FIELDS):
        top = {**top, "lowThresholds": dict(SHIPPED_LOW), "highThresholds": dict(SHIPPED_HIGH)}
    # SetDefaults_LowNodeLoadArgs: cpu and memory, and every resource the top-level low or high
    # thresholds name, weigh 1 unless given a positive weight.
    weights = dict(top.get("resourceWeights") or {})
    named = set(top.get("lowThresholds") or {}) | set(top.get("highThresholds") or {})
    for r in {"cpu", "memory"} | named:
        if not isinstance(weights.get(r, 0), int | float) or weights.get(r, 0) <= 0:
            weights[r] = 1
    anomaly = _anomaly_given(top.get("anomalyCondition") or {})
    inherited = {k: top.get(k) or {} for k in THRESHOLD_FIELDS}
    inherited |= {"resourceWeights": weights, "anomalyCondition": anomaly}
    default = {"name": DEFAULT_POOL, "nodeSelector": top.get("nodeSelector"),
               "useDeviationThresholds": top.get("useDeviationThresholds", False), **inherited}
    out: list = [default]
    for p in pools:
        if not isinstance(p, dict):
            out.append(p)
            continue
        pool = {**inherited, **p}
        if "anomalyCondition" in p and isinstance(anomaly, dict):
            own = _anomaly_given(p["anomalyCondition"])
            pool["anomalyCondition"] = {**anomaly, **own} if isinstance(own, dict) else own
        out.append(pool)
    return out


# ---------------------------------------------------------------------------------- DeschedulerConfiguration


class PluginRef(KoordArgs):
    name: str


class PluginSet(KoordArgs):
    enabled: list[PluginRef] = []
    disabled: list[PluginRef] = []


class Plugins(KoordArgs):
    deschedule: PluginSet = PluginSet()
    balance: PluginSet = PluginSet()
    evict: PluginSet = PluginSet()
    filter: PluginSet = PluginSet()


class PluginConfig(KoordArgs):
    name: str
    args: dict = {}


class Profile(KoordArgs):
    name: str = "koord-descheduler"
    pluginConfig: list[PluginConfig] = []
    plugins: Plugins | None = None
    nodeSelector: Selector = None


class DeschedulerConfiguration(KoordArgs):
    """Koordinator's DeschedulerConfiguration (descheduler/v1alpha2), the Go component's own
    settings included: those are accepted with a warning, as they have no counterpart here."""

    KIND = "DeschedulerConfiguration"
    NO_EFFECT = {
        "leaderElection": "run a single replica (there is no leader election)",
        "clientConnection": "the cluster backend has its own connection settings",
        "enableProfiling": "no profiling endpoint",
        "enableContentionProfiling": "no profiling endpoint",
        "healthzBindAddress": "/healthz is served on http_host:http_port",
        "metricsBindAddress": "/metrics is served on http_host:http_port",
    }
    DURATIONS = {"deschedulingInterval": "deschedulingIntervalSeconds"}
    deschedulingIntervalSeconds: float | None = Field(None, gt=0)
    dryRun: bool = False
    profiles: list[Profile] = []
    nodeSelector: Selector = None
    maxNoOfPodsToEvictPerNode: int | None = Field(None, ge=0)
    maxNoOfPodsToEvictPerNamespace: int | None = Field(None, ge=0)
    maxNoOfPodsToEvictTotal: int | None = Field(None, ge=0)


LOW_NODE_LOAD, MIGRATION_CONTROLLER = "LowNodeLoad", "MigrationController"
# Koordinator's default plugins: MigrationController evicts and filters; no balance plugin.
_DEFAULT_PLUGINS = {"deschedule": [], "balance": [], "evict": [MIGRATION_CONTROLLER], "filter": [MIGRATION_CONTROLLER]}


def enabled_plugins(plugins: Plugins | None) -> dict[str, list[str]]:
    """Koordinator's mergePlugins: the defaults minus the disabled ("*": all), then the enabled."""
    out = {}
    for point, defaults in _DEFAULT_PLUGINS.items():
        custom: PluginSet = getattr(plugins, point) if plugins is not None else PluginSet()
        disabled = {p.name for p in custom.disabled}
        names = [] if "*" in disabled else [n for n in defaults if n not in disabled]
        names += [p.name for p in custom.enabled if p.name not in names]
        out[point] = names
    return out


@dataclass
class LoadedConfig:
    """What a configuration file says: the arguments, the round interval when it sets one, and
    the warnings about keys that have no effect here."""

    args: LowNodeLoadArgs
    interval_s: float | None = None
    warnings: list[str] = field(default_factory=list)


def parse_config(data: Any) -> LoadedConfig:
    """Either a DeschedulerConfiguration (kind: DeschedulerConfiguration, or `profiles`) or
    LowNodeLoadArgs; raises ValueError naming every key it cannot honour."""
    warnings: list[str] = []
    data = data or {}
    if not isinstance(data, dict):
        raise ValueError("the configuration must be a mapping of field names to values")  # noqa: TRY004 - a configuration error like any other
    ctx = {"warnings": warnings}
    if data.get("kind") == DeschedulerConfiguration.KIND or "profiles" in data:
        conf = DeschedulerConfiguration.model_validate(data, context=ctx)
        args = _from_configuration(conf, warnings)
        return LoadedConfig(args, conf.deschedulingIntervalSeconds, warnings)
    return LoadedConfig(LowNodeLoadArgs.model_validate(data, context=ctx), None, warnings)


def _from_configuration(conf: DeschedulerConfiguration, warnings: list[str]) -> LowNodeLoadArgs:
    if len(conf.profiles) > 1:
        names = ", ".join(p.name for p in conf.profiles)
        raise ValueError(f"profiles: one profile is supported (LowNodeLoad runs once a round), got {names}")
    profile = conf.profiles[0] if conf.profiles else Profile()
    at = f"profiles[{profile.name}]"
    plugins = enabled_plugins(profile.plugins)
    for point, names in plugins.items():
        allowed = {"balance": [LOW_NODE_LOAD], "evict": [MIGRATION_CONTROLLER], "filter": [MIGRATION_CONTROLLER]}.get(point, [])
        other = [n for n in names if n not in allowed]
        if other:
            raise ValueError(f"{at}.plugins.{point}: {', '.join(other)} not supported: this descheduler runs "
                             "LowNodeLoad, with MigrationController evicting and filtering")
        if point in ("evict", "filter") and MIGRATION_CONTROLLER not in names:
            raise ValueError(f"{at}.plugins.{point}: MigrationController must stay enabled: it is how pods move")
    configs: dict[str, dict] = {}
    for pc in profile.pluginConfig:
        if pc.name in configs:
            raise ValueError(f"{at}.pluginConfig: {pc.name} is configured twice")
        configs[pc.name] = pc.args
    for name in configs:
        if name not in (LOW_NODE_LOAD, MIGRATION_CONTROLLER):
            warnings.append(f"{at}.pluginConfig: the arguments of {name} are ignored: the plugin is not enabled "
                            "and not supported here")
    low = dict(configs.get(LOW_NODE_LOAD) or {})
    for own in ("limits", "migration"):
        if own in low:
            raise ValueError(f"{at}.pluginConfig[LowNodeLoad].args.{own}: not a LowNodeLoadArgs field; in a "
                             "DeschedulerConfiguration the MigrationController's arguments carry the limits")
    limits, migration = _route_migration_controller(configs.get(MIGRATION_CONTROLLER) or {}, low, at)
    for key in ("maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace", "maxNoOfPodsToEvictTotal"):
        if getattr(conf, key) is not None:
            limits[key] = getattr(conf, key)
    if conf.dryRun:
        low["dryRun"] = True
    low["limits"], low["migration"] = limits, migration
    try:
        args = LowNodeLoadArgs.model_validate(low, context={"warnings": warnings})
    except ValidationError as exc:
        raise ValueError(f"{at}.pluginConfig (LowNodeLoad, MigrationController): {exc}") from None
    if LOW_NODE_LOAD not in plugins["balance"]:
        args.paused = True
        warnings.append(f"{at}: LowNodeLoad is not enabled in plugins.balance, so no node is balanced")
    args._node_scope = [s for s in (conf.nodeSelector, profile.nodeSelector) if s is not None]
    return args


def _route_migration_controller(mc: dict, low: dict, at: str) -> tuple[dict, dict]:
    """MigrationControllerArgs split into the `limits` and `migration` blocks by field name; its
    dryRun and evictLocalStoragePods join LowNodeLoad's."""
    mc = dict(mc)
    try:
        _check_type_meta("MigrationControllerArgs", mc.pop("apiVersion", None), mc.pop("kind", None))
    except ValueError as exc:
        raise ValueError(f"{at}.pluginConfig[MigrationController].args: {exc}") from None
    if mc.pop("dryRun", False):
        low["dryRun"] = True
    if mc.pop("evictLocalStoragePods", False):
        low["evictLocalStoragePods"] = True
    limits = {k: v for k, v in mc.items() if k in MigrationLimits.model_fields}
    migration = {k: v for k, v in mc.items() if k not in limits}
    return limits, migration
