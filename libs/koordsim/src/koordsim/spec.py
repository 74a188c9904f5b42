"""What a simulated cluster is made of (`SimSpec`) and how its time runs (`SimClock`)."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field, model_validator

from . import traces

GIB = 1 << 30


class SimSpec(BaseModel):
    """The whole initial cluster is a pure function of this spec (JSON-serialisable).

    `start_ms` and `wall_anchor_ms` are filled at genesis (`resolved()`), so every replica
    computes the same simulated time: sim = start + (wall - anchor) x speed.
    """

    model_config = ConfigDict(extra="ignore")

    # What the cluster is: "vms", Bitbrains VMs packed onto nodes as online pods (genesis.py), or
    # "machines", real Alibaba 2018 machines, one node each (machines.py; `nodes` 0 means their
    # own count, more repeat them shifted in time), or "history", a cluster's own history (history.py:
    # the directory `history` names, in the format of docs/history-format.md; its own nodes; it starts
    # where the history starts, so `start_ms` is given: `history.spec(path)` makes such a spec).
    scenario: str = Field("vms", pattern="^(vms|machines|history)$")
    history: str | None = None
    nodes: int = Field(20, ge=0)
    seed: int = 0
    node_cpu_cores: int = Field(32, ge=1)
    node_memory_gib: int = Field(128, ge=1)
    node_max_pods: int = 110
    kube_reserved_cpu_milli: int = Field(500, ge=0)
    kube_reserved_memory_bytes: int = Field(GIB, ge=0)
    online_pods_per_node: int = Field(8, ge=0)
    mid_pods: int | None = None  # None: one for every fourth node
    prod_fill_min: float = Field(0.6, gt=0, le=1)  # prod requests / allocatable, drawn per node
    prod_fill_max: float = Field(0.8, gt=0, le=1)
    max_pod_fraction: float = Field(0.4, gt=0, le=1)  # one pod's request at most this share of a node
    max_vms: int = Field(200, ge=1)  # distinct Bitbrains VMs; more pods replay them at other offsets
    # Which traces drive the cluster: "auto" (the full set when KOORD_TRACE_DIR names it, else the
    # sample bundled with koordsim), "full" (KOORD_TRACE_DIR or an error), "sample", or
    # "synthetic" (seeded diurnal load, only when asked for). `traces_dir` names a folder instead.
    # Genesis resolves "auto", so every replica reads the same kind.
    trace_set: str = Field("auto", pattern="^(auto|full|sample|synthetic)$")
    traces_dir: str | None = None
    start_ms: int | None = None
    wall_anchor_ms: int | None = None
    speed: float = Field(1.0, ge=0)  # simulated seconds per wall second
    batch_stream: bool = False
    batch_tasks_per_node_hour: float = Field(4.0, ge=0)
    batch_trace_offset_s: int = Field(0, ge=0)  # where in the batch trace simulated time starts
    batch_utilisation: float = Field(0.7, ge=0)  # batch pods use this share of their batch request
    # Batch demand as the mean batch CPU requested / node CPU, over the arrivals' day (overrides
    # batch_tasks_per_node_hour when set); and the largest pod a task's instances are packed into
    # (0: one pod per task, asking one instance's CPU, as the demo does).
    batch_load: float | None = Field(None, ge=0)
    batch_pod_cpu_milli: int = Field(0, ge=0)
    # At most this many batch pods pending in the cluster (0: no limit); the framework holds the
    # rest in its own queue, first in first out, as a Spark or Flink driver asks for executors.
    batch_max_pending: int = Field(0, ge=0)
    online_memory_share: float = Field(1.0, ge=0, le=1)  # machines: the traced memory that is the online pods' 
    system_cpu_fraction: float = Field(0.08, ge=0)  # of capacity at 100% machine utilisation
    system_memory_fraction: float = Field(0.03, ge=0)
    node_name_prefix: str = "sim-node-"

    @model_validator(mode="after")
    def _history_named(self) -> SimSpec:
        if self.scenario == "history" and (not self.history or self.start_ms is None):
            raise ValueError("the history scenario needs `history` (the history's directory) and `start_ms` (where "
                             "it starts): koordsim.history.spec(path) gives both")  # fmt: skip
        return self

    def resolved(self, wall_ms: int | None = None) -> SimSpec:
        wall = int(time.time() * 1000) if wall_ms is None else int(wall_ms)
        update = {}
        if self.wall_anchor_ms is None:
            update["wall_anchor_ms"] = wall
        if self.start_ms is None:
            update["start_ms"] = update.get("wall_anchor_ms", self.wall_anchor_ms)
        if self.trace_set == "auto" and self.traces_dir is None:
            update["trace_set"] = traces.trace_source().kind
        return self.model_copy(update=update) if update else self

    def trace_source(self) -> traces.TraceSource | None:
        """Where the traces are read from; None for synthetic load."""
        if self.traces_dir is not None:
            return traces.as_source(self.traces_dir)
        if self.trace_set == "synthetic":
            return None
        if self.trace_set == "sample":
            return traces.sample_source()
        return traces.trace_source(require_full=self.trace_set == "full")

    def node_name(self, i: int) -> str:
        width = max(3, len(str(max(self.nodes - 1, 0))))
        return f"{self.node_name_prefix}{i:0{width}d}"


class SimClock:
    """Simulated epoch milliseconds; runs `speed` times faster than the wall clock."""

    def __init__(self, start_ms: int, speed: float = 1.0, wall_anchor_ms: int | None = None, wall=time.time):
        self.start_ms = int(start_ms)
        self.speed = float(speed)
        self._wall = wall
        self.wall_anchor_ms = int(wall() * 1000) if wall_anchor_ms is None else int(wall_anchor_ms)

    @classmethod
    def of(cls, spec: SimSpec, wall=time.time) -> SimClock:
        spec = spec.resolved()
        return cls(spec.start_ms or 0, spec.speed, spec.wall_anchor_ms, wall)

    def now_ms(self) -> int:
        return self.start_ms + int((self._wall() * 1000 - self.wall_anchor_ms) * self.speed)

    def sim_to_wall_s(self, sim_ms: int) -> float:
        """The wall time (epoch seconds) at which the clock shows `sim_ms`."""
        if self.speed == 0:
            return float("inf") if sim_ms > self.start_ms else self._wall()
        return (self.wall_anchor_ms + (sim_ms - self.start_ms) / self.speed) / 1000
