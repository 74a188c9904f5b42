"""The recommender's whole in-memory state: one AggregateState per workload container.

Adapters feed it plain samples (bus), ask it what changed (publisher), what to checkpoint
(store) and what a workload looks like now (API, custom objects).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from .aggregate import AggregateState, AggregationConfig, OOMDiscarded, pod_key
from .estimator import (
    ContainerEstimate,
    Estimate,
    EstimatorConfig,
    _amount,
    changed_beyond,
    container_minimums,
    estimate,
    savings,
)
from .methods import METHODS, VPA, Recommender, Sample
from .profile import Stats
from .workload import ContainerKey, WorkloadKey

# A pod counts as a live replica while it reported within this long.
REPLICA_WINDOW_S = 600.0

# A pod with no controller is its own workload (koordcommon.workload): silent this long, it is
# taken to be deleted and its workload is forgotten. A controller's workload outlives its pods
# (the next pod carries its history on), so it waits for VPA's whole memory window; nothing
# carries a deleted bare pod's on, and a cluster that runs bare batch pods sees thousands a day.
BARE_POD_KIND = "Pod"
BARE_POD_GONE_S = 3600.0

# A checkpoint of a container under another method than VPA: version byte 2, the method's
# name and the aggregate's length, then the aggregate (version 1 on its own) and the method state.
_ENVELOPE = struct.Struct("<BHI")


@dataclass(frozen=True, slots=True)
class UsageSample:
    key: ContainerKey
    pod_uid: str
    t: float  # epoch seconds
    cpu_cores: float | None
    memory_bytes: float | None
    cpu_request_cores: float = 0.0
    memory_request_bytes: float = 0.0


@dataclass(frozen=True)
class ContainerResult:
    container: str
    estimate: ContainerEstimate
    current: Estimate | None  # the latest requests seen (None when the pods request nothing)
    replicas: int
    savings: Estimate | None  # (current - target) x replicas
    windows: dict[int, tuple[Stats | None, Stats | None]]
    diurnal_cpu: list[float | None]
    diurnal_memory: list[float | None]
    total_samples: int
    last_sample_ts: float | None
    # which method's recommendation the target is (the workload's method, or VPA's until that
    # method has samples of its own), the method the workload is set to, and what the
    # recommendation was made of (`Recommender.explain`)
    method: str = "vpa"
    configured_method: str = "vpa"
    explanation: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadResult:
    workload: WorkloadKey
    containers: list[ContainerResult] = field(default_factory=list)

    @property
    def savings(self) -> Estimate | None:
        parts = [c.savings for c in self.containers if c.savings is not None]
        if not parts:
            return None
        return Estimate(sum(p.cpu_milli for p in parts), sum(p.memory_bytes for p in parts))


class RecommenderState:
    def __init__(
        self,
        aggregation: AggregationConfig | None = None,
        estimator: EstimatorConfig | None = None,
        change_threshold: float = 0.1,
        method: str = VPA.name,
        methods: dict[str, Recommender] | None = None,
    ) -> None:
        self.aggregation = aggregation or AggregationConfig()
        self.estimator = estimator or EstimatorConfig()
        self._vpa = VPA(self.aggregation, self.estimator)  # explains VPA's targets
        self.change_threshold = change_threshold
        # The method every workload uses unless its own setting names another. VPA's state (the
        # AggregateState) is always kept: it carries the profile, replicas and requests the API
        # shows; another method keeps its own state beside it.
        self.methods: dict[str, Recommender] = methods or {n: cls() for n, cls in METHODS.items() if n != VPA.name}
        if method != VPA.name and method not in self.methods:
            raise ValueError(f"unknown recommender method {method!r}: one of {', '.join(sorted(METHODS))}")
        self.default_method = method
        self._method_of: dict[WorkloadKey, str] = {}  # workloads whose own setting differs from the default
        self.method_states: dict[ContainerKey, tuple[str, Any]] = {}
        self.containers: dict[ContainerKey, AggregateState] = {}
        # container names per workload, sorted (a tuple is a fifth of a set's size)
        self._by_workload: dict[WorkloadKey, tuple[str, ...]] = {}
        self._published: dict[WorkloadKey, dict[str, Estimate]] = {}
        self.dirty_checkpoint: set[ContainerKey] = set()
        self._dirty_publish: set[WorkloadKey] = set()
        self._retracted: set[WorkloadKey] = set()  # forgotten since the last take_retracted
        self.samples_accepted = 0
        self.samples_discarded = 0
        # Data time: the newest sample seen. Windows and expiry follow the data, so a replay or
        # a simulated cluster running faster than real time sees consistent windows.
        self.now = 0.0

    # ------------------------------------------------------------------ input

    def _state(self, key: ContainerKey) -> AggregateState:
        st = self.containers.get(key)
        if st is None:
            st = self.containers[key] = AggregateState(config=self.aggregation)
            self._add_name(key)
        return st

    def _add_name(self, key: ContainerKey) -> None:
        names = self._by_workload.get(key.workload, ())
        if key.container not in names:
            self._by_workload[key.workload] = tuple(sorted((*names, key.container)))

    def method_of(self, workload: WorkloadKey) -> str:
        return self._method_of.get(workload, self.default_method)

    def set_method(self, workload: WorkloadKey, method: str | None) -> None:
        """The workload's own method (None: the default). A workload moved to another method
        starts that method's state afresh; VPA's is always there."""
        if method is not None and method != VPA.name and method not in self.methods:
            raise ValueError(f"unknown recommender method {method!r}")
        name = method or self.default_method
        if name == self.method_of(workload):
            return
        if name == self.default_method:
            self._method_of.pop(workload, None)
        else:
            self._method_of[workload] = name
        for c in self._by_workload.get(workload, ()):
            self.method_states.pop(ContainerKey(workload, c), None)
        self._dirty_publish.add(workload)

    def _method_state(self, key: ContainerKey) -> tuple[Recommender, Any] | None:
        name = self.method_of(key.workload)
        if name == VPA.name:
            return None
        held = self.method_states.get(key)
        method = self.methods[name]
        if held is None or held[0] != name:
            held = self.method_states[key] = (name, method.new_state())
        return method, held[1]

    def add(self, s: UsageSample) -> bool:
        if s.t > self.now:  # noqa: PLR1730 (per sample: cheaper than max())
            self.now = s.t
        st = self.containers.get(s.key)
        if st is None:
            st = self._state(s.key)
        pk = pod_key(s.pod_uid)
        took = False
        if s.cpu_cores is not None:
            took |= st.add_cpu_sample(pk, s.t, s.cpu_cores, s.cpu_request_cores)
        if s.memory_bytes is not None:
            took |= st.add_memory_sample(pk, s.t, s.memory_bytes, s.memory_request_bytes)
        if took and (self._method_of or self.default_method != VPA.name):
            held = self._method_state(s.key)
            if held is not None:
                # only what VPA's dedupe accepted: a redelivered sample counts once here too
                held[0].add(held[1], Sample(s.t, s.cpu_cores, s.memory_bytes, s.cpu_request_cores, s.memory_request_bytes, pk))
        if took:
            self.samples_accepted += 1
            self.dirty_checkpoint.add(s.key)
            self._dirty_publish.add(s.key.workload)
        else:
            self.samples_discarded += 1
        return took

    def record_oom(self, key: ContainerKey, pod_uid: str, t: float, request_bytes: float) -> float | None:
        """The memory the container needed, or None for an OOM too old to count."""
        try:
            needed = self._state(key).record_oom(pod_key(pod_uid), t, request_bytes)
        except OOMDiscarded:
            return None
        self.dirty_checkpoint.add(key)
        self._dirty_publish.add(key.workload)
        return needed

    # ------------------------------------------------------------------ output

    def workloads(self) -> list[WorkloadKey]:
        return sorted(self._by_workload)

    def recommend(self, workload: WorkloadKey, now: float | None = None, explain: bool = False) -> WorkloadResult | None:
        """The workload's recommendation; `explain`: with what each target was made of (the
        API shows it; publishing needs only which method gave it)."""
        names = self._by_workload.get(workload)
        if not names:
            return None
        now = self.now if now is None else now
        out = []
        for name in names:
            key = ContainerKey(workload, name)
            st = self.containers[key]
            est = estimate(st, self.estimator, containers_per_pod=len(names))
            # another method's recommendation once it has samples of its own; until then VPA's
            configured = self.method_of(workload)
            held = self.method_states.get(key)
            used, method, method_state = VPA.name, self._vpa, st
            if held is not None and held[0] == configured:
                used, method, method_state = held[0], self.methods[held[0]], held[1]
                est = self._method_estimate((method, method_state), est, now, len(names))
            explanation = {}
            if explain:
                floor = container_minimums(self.estimator, len(names))
                explanation = method.explain(method_state) | {
                    "minimums": {"cpu_milli": floor.cpu_milli, "memory_bytes": floor.memory_bytes}}
            current = None
            if st.cpu_request_cores > 0 or st.memory_request_bytes > 0:
                current = Estimate(round(st.cpu_request_cores * 1000), int(st.memory_request_bytes))
            horizon = now - REPLICA_WINDOW_S
            replicas = st.pods_seen_since(horizon)
            diurnal_cpu, diurnal_mem = st.profile.diurnal()
            out.append(
                ContainerResult(
                    container=name,
                    estimate=est,
                    current=current,
                    replicas=replicas,
                    savings=savings(current, est.target, replicas),
                    windows=st.profile.windows(now),
                    diurnal_cpu=diurnal_cpu,
                    diurnal_memory=diurnal_mem,
                    total_samples=st.total_samples,
                    last_sample_ts=st.last_sample_ts,
                    method=used,
                    configured_method=configured,
                    explanation=explanation,
                )
            )
        return WorkloadResult(workload, out)

    def _method_estimate(self, held: tuple[Recommender, Any], vpa: ContainerEstimate, now: float, containers: int) -> ContainerEstimate:
        """Another method's request as the target, its limit as the upper bound, with the same
        per-pod minimums as VPA's; the confidence stays VPA's history length."""
        rec = held[0].recommend(held[1], now)
        floor = container_minimums(self.estimator, containers)
        min_cpu, min_mem = floor.cpu_milli, floor.memory_bytes
        target = Estimate(max(_amount(rec.request.cpu_cores * 1000), min_cpu), max(_amount(rec.request.memory_bytes), min_mem))
        upper = Estimate(max(_amount(rec.limit.cpu_cores * 1000), target.cpu_milli), max(_amount(rec.limit.memory_bytes), target.memory_bytes))
        return ContainerEstimate(target=target, lower_bound=target, upper_bound=upper, confidence=vpa.confidence)

    def changed(self, now: float | None = None) -> list[WorkloadResult]:
        """Workloads whose target moved beyond the threshold since last reported (or are new);
        they count as reported from now on."""
        out = []
        for wl in sorted(self._dirty_publish):
            res = self.recommend(wl, now)
            if res is None:
                continue
            before = self._published.get(wl, {})
            if any(changed_beyond(before.get(c.container), c.estimate.target, self.change_threshold) for c in res.containers):
                self._published[wl] = {c.container: c.estimate.target for c in res.containers}
                out.append(res)
        self._dirty_publish.clear()
        return out

    # ------------------------------------------------------------------ lifecycle and checkpoints

    def _expired(self, key: ContainerKey, st: AggregateState, now: float) -> bool:
        if st.is_expired(now):
            return True
        return (key.workload.kind == BARE_POD_KIND and st.last_sample_ts is not None
                and now - st.last_sample_ts >= BARE_POD_GONE_S)

    def expire(self, now: float | None = None) -> list[ContainerKey]:
        """Drop containers silent for a whole memory window (VPA's aggregate GC), a bare pod's
        once it is gone (BARE_POD_GONE_S); prune old pods. A workload left with no container is
        forgotten: `take_retracted` names it, so its published recommendation is withdrawn."""
        now = self.now if now is None else now
        gone = [k for k, st in self.containers.items() if self._expired(k, st, now)]
        for k in gone:
            del self.containers[k]
            self.method_states.pop(k, None)
            names = tuple(n for n in self._by_workload.get(k.workload, ()) if n != k.container)
            if names:
                self._by_workload[k.workload] = names
            else:
                self._by_workload.pop(k.workload, None)
                self._published.pop(k.workload, None)
                self._method_of.pop(k.workload, None)
                self._retracted.add(k.workload)
            self.dirty_checkpoint.discard(k)
        for k, st in self.containers.items():
            before = st.pod_count()
            st.prune_pods(now)
            if st.pod_count() != before:
                self.dirty_checkpoint.add(k)
        return gone

    def take_retracted(self) -> list[WorkloadKey]:
        """The workloads forgotten since the last call (their recommendations are to be withdrawn)."""
        out = sorted(self._retracted)
        self._retracted.clear()
        return out

    def retract_again(self, workloads: list[WorkloadKey]) -> None:
        """Withdrawing failed: name them at the next `take_retracted` (unless seen again meanwhile)."""
        self._retracted.update(w for w in workloads if w not in self._by_workload)

    def checkpoint(self, key: ContainerKey) -> bytes:
        """The container's aggregate, wrapped with its method's state when it has one."""
        agg = self.containers[key].save()
        held = self.method_states.get(key)
        if held is None:
            return agg
        name = held[0].encode()
        return _ENVELOPE.pack(2, len(name), len(agg)) + name + agg + self.methods[held[0]].save(held[1])

    def take_dirty(self) -> dict[ContainerKey, bytes]:
        """Checkpoints of every container changed since the last call."""
        out = {k: self.checkpoint(k) for k in self.dirty_checkpoint if k in self.containers}
        self.dirty_checkpoint.clear()
        return out

    def snapshot(self) -> dict[ContainerKey, bytes]:
        return {k: self.checkpoint(k) for k in self.containers}

    def restore(self, key: ContainerKey, data: bytes) -> None:
        if data[:1] == b"\x02":
            _, n, agg_len = _ENVELOPE.unpack_from(data, 0)
            off = _ENVELOPE.size
            name = data[off : off + n].decode()
            off += n
            agg, rest = data[off : off + agg_len], data[off + agg_len :]
            data = agg
            # a method no longer configured is dropped: the container falls back to the default
            if name in self.methods:
                try:
                    self.method_states[key] = (name, self.methods[name].load(rest))
                except ValueError:
                    # written under other settings of the method (another ensemble shape): the
                    # method starts afresh for this container; VPA's aggregate below is kept
                    self.method_states.pop(key, None)
                if name != self.default_method:
                    self._method_of[key.workload] = name
        st = self.containers[key] = AggregateState.load(data, self.aggregation)
        if st.last_sample_ts is not None and st.last_sample_ts > self.now:
            self.now = st.last_sample_ts
        for p in st.pods.values():
            self.now = max(self.now, p.last_memory_ts)
        self._add_name(key)
        self._dirty_publish.add(key.workload)
