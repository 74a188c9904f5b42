"""Message schemas of the bus (DESIGN.md section 2).

Every message carries `schema` (name and version), `ts` (UTC epoch milliseconds),
`source` and a per-source sequence number `seq`. Unknown fields are ignored; anything
that fails validation raises `SchemaError`, the one error type consumers dead-letter on.

The metric streams (`NodeMetricSample`, `NodeMetric`) carry almost all of the bytes on the
bus, so they are msgspec Structs: validating a 30-pod sample takes about a fifth of the
time pydantic needs, and decoding was what bounded every consumer. The other messages are
small and rare and keep pydantic, whose validation the NodeSLO configuration reuses.
"""

from __future__ import annotations

import re
import time
from typing import Any, ClassVar, TypeVar

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .cpus import CPUListError, parse_cpuset
from .model import PriorityClass, QoSClass
from .resources import Resources


class SchemaError(ValueError):
    """A message that cannot be decoded or does not match its schema."""


def now_ms() -> int:
    return int(time.time() * 1000)


class SchemaId(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str
    version: int


class Payload(BaseModel):
    """Base of nested payload parts: unknown fields ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Message(Payload):
    SCHEMA: ClassVar[str] = "Message"
    VERSION: ClassVar[int] = 1

    schema_: SchemaId | None = Field(default=None, alias="schema")
    ts: int = Field(default_factory=now_ms, description="UTC epoch milliseconds")
    source: str = ""
    seq: int = 0

    @model_validator(mode="after")
    def _check_schema(self):
        if self.schema_ is None:
            self.schema_ = SchemaId(name=self.SCHEMA, version=self.VERSION)
        elif self.schema_.name != self.SCHEMA:
            raise ValueError(f"schema {self.schema_.name!r} is not {self.SCHEMA!r}")
        elif self.schema_.version > self.VERSION:
            raise ValueError(f"{self.SCHEMA} version {self.schema_.version} is newer than supported {self.VERSION}")
        return self

    @property
    def msg_id(self) -> str:
        """Idempotency key: JetStream de-duplicates publishes and stores key rows on it."""
        return f"{self.source}:{self.seq}"

    def encode(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


class _SchemaTag(msgspec.Struct, frozen=True):
    name: str
    version: int


class FastPayload(msgspec.Struct, kw_only=True, gc=False):
    """Base of the metric messages' parts: msgspec Structs, unknown fields ignored."""


class FastMessage(FastPayload, kw_only=True):
    """A Message for the high-volume metric streams (same envelope, same wire format)."""

    SCHEMA: ClassVar[str] = "Message"
    VERSION: ClassVar[int] = 1

    schema_: _SchemaTag | None = msgspec.field(default=None, name="schema")
    ts: int = msgspec.field(default_factory=now_ms)
    source: str = ""
    seq: int = 0

    def __post_init__(self) -> None:
        if self.schema_ is None:
            self.schema_ = _SchemaTag(self.SCHEMA, self.VERSION)
        elif self.schema_.name != self.SCHEMA:
            raise ValueError(f"schema {self.schema_.name!r} is not {self.SCHEMA!r}")
        elif self.schema_.version > self.VERSION:
            raise ValueError(f"{self.SCHEMA} version {self.schema_.version} is newer than supported {self.VERSION}")

    @property
    def msg_id(self) -> str:
        return f"{self.source}:{self.seq}"

    def encode(self) -> bytes:
        return _ENCODER.encode(self)


_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[type, msgspec.json.Decoder] = {}
_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")

M = TypeVar("M", bound=Message | FastMessage)


def _readable(exc: msgspec.ValidationError) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.pods[0].usage`" as "pods.0.usage: Expected ..."."""
    m = _AT.match(str(exc))
    msg, path = m.group("msg"), (m.group("path") or "")
    parts = [p for p in re.split(r"[.\[\]]+", path) if p]
    missing = _MISSING.match(msg)
    if missing:
        parts.append(missing.group("field"))
        msg = "Field required"
    return f"{'.'.join(parts) or '<root>'}: {msg}"


def to_builtins(obj: Any) -> Any:
    """A message or part as plain JSON-ready data (dicts, lists, numbers, strings)."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True)
    return msgspec.to_builtins(obj)


def decode(cls: type[M], data: bytes | str) -> M:
    """Decode one message; raise SchemaError with a readable reason on any failure."""
    if issubclass(cls, FastMessage):
        decoder = _DECODERS.get(cls)
        if decoder is None:
            decoder = _DECODERS[cls] = msgspec.json.Decoder(cls)
        try:
            return decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise SchemaError(f"invalid {cls.SCHEMA}: {_readable(exc)}") from None
        except msgspec.DecodeError:
            raise SchemaError(f"invalid {cls.SCHEMA}: <root>: Invalid JSON") from None
    try:
        return cls.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "<root>"
        raise SchemaError(f"invalid {cls.SCHEMA}: {where}: {first.get('msg')}") from None
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"undecodable {cls.SCHEMA}: {exc}") from None


# --------------------------------------------------------------------------- metrics


class Owner(FastPayload, kw_only=True):
    kind: str = ""
    name: str = ""


class ContainerUsage(FastPayload, kw_only=True):
    name: str
    requests: Resources = Resources()
    limits: Resources = Resources()
    usage: Resources = Resources()
    last_oom_ms: int | None = None  # the container's most recent OOM kill (recommender bumps memory)


class PodIdentity(FastPayload, kw_only=True):
    """Which pod, its classes and what it declared: the fields every per-pod entry starts with."""

    uid: str
    namespace: str
    name: str
    owner: Owner | None = None
    qos: QoSClass = QoSClass.NONE
    priority_class: PriorityClass = PriorityClass.NONE
    priority: int | None = None
    requests: Resources = Resources()
    limits: Resources = Resources()


class PodUsage(PodIdentity, kw_only=True):
    batch_requests: Resources = Resources()  # koordinator.sh/batch-cpu (milli) / batch-memory
    usage: Resources = Resources()
    containers: list[ContainerUsage] = []


class NodeMetricSample(FastMessage, kw_only=True):
    """Node and pod usage averaged over the last report interval."""

    SCHEMA: ClassVar[str] = "NodeMetricSample"
    node: str
    window_s: float = 10.0
    capacity: Resources = Resources()
    allocatable: Resources = Resources()
    node_usage: Resources
    system_usage: Resources = Resources()
    pods: list[PodUsage] = []
    extensions: dict[str, Any] = {}  # psi, throttling: optional, collector stores as-is


class AggregatedUsage(FastPayload, kw_only=True):
    """avg/p50/p90/p95/p99 over one window; None when samples cover less than half of it."""

    duration_s: int
    avg: Resources | None = None
    p50: Resources | None = None
    p90: Resources | None = None
    p95: Resources | None = None
    p99: Resources | None = None


class PodMetric(PodIdentity, kw_only=True):
    usage: Resources  # average over the aggregate window


class HostApplicationMetric(FastPayload, kw_only=True):
    name: str
    priority_class: PriorityClass = PriorityClass.PROD
    qos: QoSClass = QoSClass.LS
    usage: Resources = Resources()


class NUMAZone(FastPayload, kw_only=True):
    """One NUMA node of the node (a NodeResourceTopology zone, `node-<id>`): what it holds.

    capacity = its CPUs and MemTotal (/sys/devices/system/node/node<id>); allocatable is what
    the node lets pods use of it, as koordlet reports the zone (the capacity unless told otherwise).
    """

    name: str
    capacity: Resources = Resources()
    allocatable: Resources = Resources()


class NodeMetric(FastMessage, kw_only=True):
    """Koordinator's NodeMetric status: what the slo-controller, extender and descheduler read."""

    SCHEMA: ClassVar[str] = "NodeMetric"
    node: str
    aggregate_duration_s: int = 300
    report_interval_s: int = 60
    capacity: Resources = Resources()
    allocatable: Resources = Resources()
    node_usage: Resources  # average over aggregate_duration_s
    system_usage: Resources = Resources()  # node usage - pods - host apps, not below 0
    aggregated_node_usages: list[AggregatedUsage] = []
    aggregated_system_usages: list[AggregatedUsage] = []
    pods: list[PodMetric] = []
    host_applications: list[HostApplicationMetric] = []
    prod_reclaimable: Resources | None = None
    prod_peak: Resources | None = None
    numa_zones: list[NUMAZone] = []  # empty: the node reports no NUMA topology

    @property
    def update_time_ms(self) -> int:
        return self.ts


# --------------------------------------------------------------------------- node resources


class NodeResource(Message):
    """Batch and mid allocatable the slo-controller computed for a node, with its inputs."""

    SCHEMA: ClassVar[str] = "NodeResource"
    node: str
    batch: Resources | None = None  # None: removed (degraded or disabled)
    mid: Resources | None = None
    degraded: bool = False
    reason: str = ""
    written: bool = False  # node status was patched in this round
    metric_ts: int | None = None  # ts of the NodeMetric used
    inputs: dict[str, Any] = {}
    messages: list[str] = []


# --------------------------------------------------------------------------- CPU topology


class CPUInfo(Payload):
    """One logical CPU (koordlet's `node.koordinator.sh/cpu-topology` detail): core unique on the node."""

    id: int = Field(ge=0, lt=8192)
    core: int = Field(ge=0)
    socket: int = Field(0, ge=0)
    node: int = Field(0, ge=0)


class CPUSharedPool(Payload):
    """One NUMA node's part of a pool (koordlet's cpu-shared-pools entry)."""

    socket: int = Field(ge=0)
    node: int = Field(ge=0)
    cpuset: str


class PodCPUAlloc(Payload):
    """CPUs a pod holds exclusively (koordlet's pod-cpu-allocs entry)."""

    namespace: str = ""
    name: str = ""
    uid: str = ""
    cpuset: str
    managedByKubelet: bool = False


class NodeTopology(Message):
    """A node's CPU topology and pools, as koordlet reports them on its NodeResourceTopology:
    every logical CPU, the kubelet CPU manager policy, the CPUs pods hold exclusively (bound by
    the scheduler or pinned by the kubelet's static policy), the share pool (LS) and the BE pool
    per NUMA node. Published by the node agent when it changes; the extender allocates from it."""

    SCHEMA: ClassVar[str] = "NodeTopology"
    node: str
    cpus: list[CPUInfo] = []
    kubelet_cpu_policy: str = "none"
    pod_cpu_allocs: list[PodCPUAlloc] = []
    cpu_shared_pools: list[CPUSharedPool] = []
    be_cpu_shared_pools: list[CPUSharedPool] = []

    @model_validator(mode="after")
    def _check_cpus(self):
        ids = [c.id for c in self.cpus]
        if len(set(ids)) != len(ids):
            raise ValueError("a CPU id appears twice")
        known = set(ids)
        for text in [a.cpuset for a in self.pod_cpu_allocs] + [p.cpuset for p in self.cpu_shared_pools
                                                                + self.be_cpu_shared_pools]:
            try:
                cpus = parse_cpuset(text)
            except CPUListError as exc:
                raise ValueError(str(exc)) from None
            if not known.issuperset(cpus):
                raise ValueError(f"cpuset {text!r} names CPUs the topology does not have")
        return self


# --------------------------------------------------------------------------- NodeSLO
# Field names are Koordinator's (camelCase) so users can bring their ConfigMaps as-is.


class ResourceThresholdStrategy(Payload):
    enable: bool = False
    cpuSuppressThresholdPercent: int = 65
    cpuSuppressPolicy: str = "cpuset"  # cpuset | cfsQuota
    memoryEvictThresholdPercent: int = 70
    memoryEvictLowerPercent: int | None = None  # threshold - 2 when unset
    cpuEvictPolicy: str = "evictByRealLimit"
    cpuEvictBESatisfactionUpperPercent: int | None = None
    cpuEvictBESatisfactionLowerPercent: int | None = None
    cpuEvictBEUsageThresholdPercent: int | None = None  # 90 when unset
    cpuEvictTimeWindowSeconds: int | None = None
    cpuSuppressMinPercent: int | None = None  # floor of BE cpu under suppress, % of capacity
    cpuEvictThresholdPercent: int | None = None  # CPUEvict: node cpu usage %
    cpuEvictLowerPercent: int | None = None  # threshold - 2 when unset
    cpuAllocatableEvictThresholdPercent: int | None = None  # CPUAllocatableEvict: batch/mid requested %
    cpuAllocatableEvictLowerPercent: int | None = None
    memoryAllocatableEvictThresholdPercent: int | None = None  # MemoryAllocatableEvict
    memoryAllocatableEvictLowerPercent: int | None = None
    evictEnabledPriorityThreshold: int | None = None  # CPUEvict / MemoryEvict: highest priority evicted
    allocatableEvictPriorityThreshold: int | None = None  # *AllocatableEvict: highest priority evicted (<= 7999)


class CPUQOS(Payload):
    enable: bool = False
    groupIdentity: int | None = None
    schedIdle: int | None = None  # cpuPolicy coreSched only
    coreExpeller: bool | None = None  # cpuPolicy coreSched only


class MemoryQOS(Payload):
    enable: bool = False
    minLimitPercent: int = 0
    lowLimitPercent: int = 0
    throttlingPercent: int = 0
    wmarkRatio: int = 0
    wmarkScalePermill: int = 0
    wmarkMinAdj: int = 0
    priorityEnable: int = 0
    priority: int = 0
    oomKillGroup: int = 0
    pageCacheEnable: bool | None = None
    pageCacheLimitPercent: int | None = None
    pageCacheLimitSize: int | None = None
    pageCacheReclaimSync: bool | None = None


class ResourceQOS(Payload):
    cpuQOS: CPUQOS = CPUQOS()
    memoryQOS: MemoryQOS = MemoryQOS()
    # accepted so a Koordinator config parses; the node-agent reports them as not supported when enabled
    blkioQOS: dict[str, Any] | None = None
    resctrlQOS: dict[str, Any] | None = None
    networkQOS: dict[str, Any] | None = None


def _qos(gi: int, wmark_ratio: int, permill: int, min_adj: int) -> ResourceQOS:
    return ResourceQOS(
        cpuQOS=CPUQOS(groupIdentity=gi),
        memoryQOS=MemoryQOS(wmarkRatio=wmark_ratio, wmarkScalePermill=permill, wmarkMinAdj=min_adj),
    )


class ResourceQOSStrategy(Payload):
    policies: dict[str, str] = {"cpuPolicy": "groupIdentity"}
    lsrClass: ResourceQOS = Field(default_factory=lambda: _qos(2, 95, 20, -25))
    lsClass: ResourceQOS = Field(default_factory=lambda: _qos(2, 95, 20, -25))
    beClass: ResourceQOS = Field(default_factory=lambda: _qos(-1, 95, 20, 50))
    systemClass: ResourceQOS = Field(default_factory=lambda: _qos(0, 0, 50, 0))
    cgroupRoot: ResourceQOS | None = None


class CPUBurstStrategy(Payload):
    policy: str = "none"  # none | cpuBurstOnly | cfsQuotaBurstOnly | auto
    cpuBurstPercent: int = 1000
    cfsQuotaBurstPercent: int = 300
    cfsQuotaBurstPeriodSeconds: int = -1
    sharePoolThresholdPercent: int = 50


class SystemStrategy(Payload):
    """Node-wide kernel settings (sysctls); every field unset by default."""

    minFreeKbytesFactor: int | None = None
    watermarkScaleFactor: int | None = None
    memcgReapBackGround: int | None = None
    schedGroupIdentityEnabled: int | None = None
    schedIdleSaverWmark: int | None = None
    schedFeatures: dict[str, bool] | None = None
    pageCacheLimitEnabled: int | None = None
    totalNetworkBandwidth: str | int | None = None  # a Quantity


class CgroupPath(Payload):
    base: str = ""  # "" / CgroupRoot | Kubepods | KubepodsBurstable | KubepodsBesteffort
    parentDir: str = ""
    relativePath: str = ""


class HostApplicationSpec(Payload):
    """A process outside any pod that QoS and the batch formula account for."""

    name: str = ""
    priority: str = ""  # koord-prod | koord-mid | koord-batch | koord-free | "" (none)
    qos: str = ""  # SYSTEM | LSE | LSR | LS | BE | "" (none)
    cgroupPath: CgroupPath | None = None
    strategy: dict[str, Any] | None = None


class NodeSLOSpec(Payload):
    resourceUsedThresholdWithBE: ResourceThresholdStrategy = ResourceThresholdStrategy()
    resourceQOSStrategy: ResourceQOSStrategy = ResourceQOSStrategy()
    cpuBurstStrategy: CPUBurstStrategy = CPUBurstStrategy()
    systemStrategy: SystemStrategy | None = None
    hostApplications: list[HostApplicationSpec] = []
    extensions: dict[str, Any] = {}


class NodeSLO(Message):
    SCHEMA: ClassVar[str] = "NodeSLO"
    node: str
    spec: NodeSLOSpec = NodeSLOSpec()


# --------------------------------------------------------------------------- recommendations


class UsageProfile(Payload):
    """Percentiles of usage over one window (1h, 1d, 7d)."""

    window_s: int
    p50: Resources | None = None
    p90: Resources | None = None
    p95: Resources | None = None
    p99: Resources | None = None
    max: Resources | None = None


class ContainerRecommendation(Payload):
    container: str
    target: Resources
    lower_bound: Resources
    upper_bound: Resources
    current_requests: Resources | None = None
    profiles: list[UsageProfile] = []
    diurnal_cpu_milli: list[int] = []  # 24 hourly p90 buckets
    diurnal_memory_bytes: list[int] = []
    # the recommender method whose recommendation the target is ("": not said, as in messages
    # from before the field); the service's API has the whole explanation
    method: str = ""


class Recommendation(Message):
    SCHEMA: ClassVar[str] = "Recommendation"
    namespace: str
    owner_kind: str
    owner_name: str
    containers: list[ContainerRecommendation] = []


# --------------------------------------------------------------------------- events, dead letters


class Event(Message):
    """An auditable action (suppress, evict, burst, deschedule, mutate, schedule)."""

    SCHEMA: ClassVar[str] = "Event"
    kind: str
    node: str = ""
    action: str
    reason: str = ""
    dry_run: bool = False
    target: dict[str, Any] = {}  # pod {namespace, name, uid} or cgroup {path, file}
    details: dict[str, Any] = {}


class DeadLetter(Message):
    SCHEMA: ClassVar[str] = "DeadLetter"
    service: str
    subject: str
    reason: str
    raw_b64: str  # the original bytes, base64
    headers: dict[str, str] = {}


class SimMutation(Message):
    """One change to the simulated cluster; every replica applies them in stream order."""

    SCHEMA: ClassVar[str] = "SimMutation"
    op: str
    payload: dict[str, Any] = {}
