"""The simulated cluster backend: the whole cluster in memory, driven by real traces.

Local mode (`SimCluster(spec)`): mutations apply at once. Bus mode (`SimCluster(bus=bus)`):
every mutation is published as a `SimMutation` on `koord.sim.<op>` (stream KOORD_SIM) and
applied by every replica, the writer included, as it comes back from the stream, so all
processes hold the same cluster. The first message is `genesis`, carrying the resolved spec
(with the wall-clock anchor, so every process computes the same simulated time).

The simulated cluster has no koord-scheduler: a replica opened with `schedule_reservations`
(or an `extender_url`) places the Pending Reservations written through it, as koord-scheduler
would (`reservations.py`), so a client creates Reservations and reads their status exactly as
it does against Kubernetes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from koordcommon import reservations as reservation_words
from koordcommon import subjects
from koordcommon.cluster.port import ClusterEvent, EvictionOutcome, EvictionResult
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import SimMutation

from . import batch, reservations
from .codec import pod_to_dict
from .spec import SimClock, SimSpec
from .state import PDB_KIND, MutationError, SimState, custom_key
from .usage import PodSet, concat_podsets

__all__ = ["PDB_KIND", "MutationError", "NodesUsage", "SimClock", "SimCluster", "SimSpec", "UsageSnapshot"]

log = logging.getLogger(__name__)
SIM_FILTER = f"{subjects.PREFIX}.sim.>"
APPLY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class UsageSnapshot:
    node: str
    t_ms: int
    node_usage: Resources  # pods + system
    system_usage: Resources
    pods: dict[str, Resources]  # pod key -> usage


@dataclass(frozen=True)
class NodesUsage:
    """Many nodes' usage at one time, from one vectorised evaluation of all their pods."""

    t_ms: int
    nodes: list[str]
    bounds: list[int]  # the pods of nodes[i] are keys[bounds[i]:bounds[i + 1]]
    keys: list[str]  # pod keys
    pod_cpu: np.ndarray  # milli-cores, int64
    pod_mem: np.ndarray  # bytes, int64
    node_cpu: np.ndarray  # pods + system
    node_mem: np.ndarray


def _uid(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("uid")


class _Replicator:
    """Publishes mutations and feeds the stream, in order, to `apply`."""

    def __init__(self, bus: Any, apply):
        self.bus = bus
        self.apply = apply
        self.caught_up = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._waiters: dict[str, asyncio.Future] = {}

    async def start(self) -> None:
        await self.bus.ensure_streams(subjects.SIM_STREAM)
        self._task = asyncio.create_task(self._run(), name="sim-replicator")
        self._task.add_done_callback(self._report_end)

    @staticmethod
    def _report_end(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("sim replicator stopped", extra={"error": repr(task.exception())})

    async def _run(self) -> None:
        async for d in self.bus.tail(subjects.SIM_STREAM, SIM_FILTER, SimMutation, deliver="all"):
            waiter = self._waiters.pop(d.msg.msg_id, None)
            try:
                result = await self.apply(d.msg.op, d.msg.payload)
            except Exception as exc:  # noqa: BLE001 - a bad mutation fails its writer, never the replica
                if not isinstance(exc, MutationError):
                    log.warning("sim mutation failed", extra={"op": d.msg.op, "error": repr(exc)})
                if waiter is not None and not waiter.done():
                    waiter.set_exception(exc)
            else:
                if waiter is not None and not waiter.done():
                    waiter.set_result(result)
            if d.pending == 0:
                self.caught_up.set()

    async def publish(self, op: str, payload: dict[str, Any]) -> Any:
        msg = self.bus.stamp(SimMutation(op=op, payload=payload))
        fut = asyncio.get_running_loop().create_future()
        self._waiters[msg.msg_id] = fut
        try:
            await self.bus.publish(subjects.sim(op), msg)
            return await asyncio.wait_for(fut, APPLY_TIMEOUT_S)
        finally:
            self._waiters.pop(msg.msg_id, None)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # Bounded: shutdown must not hang on a task that swallowed its cancellation.
            await asyncio.wait([self._task], timeout=5)
            self._task = None


class SimCluster:
    """ClusterPort over an in-memory cluster (see module doc).

    Records handed out are the replica's own objects: a change replaces them, never edits
    them, so they stay consistent snapshots, but callers must treat them as read-only.
    """

    def __init__(
        self,
        spec: SimSpec | dict[str, Any] | None = None,
        bus: Any = None,
        genesis: bool = False,
        clock: SimClock | None = None,
        schedule_reservations: bool | None = None,
        extender_url: str = "",
        extender_weight: int = 1,
    ):
        """`schedule_reservations`: place the Pending Reservations written through this replica
        (default: when `extender_url` is given); `extender_url` / `extender_weight`: the scheduler
        extender their reserve pods go through, as kube-scheduler would send them."""
        if isinstance(spec, dict):
            spec = SimSpec.model_validate(spec)
        self._bus = bus
        self._publish_genesis = genesis
        self._clock_override = clock
        self._watchers: set[asyncio.Queue] = set()
        self._nodes_podset: tuple[list[PodSet], PodSet] | None = None  # usage_of_nodes' last pod sets
        self._genesis_seen = asyncio.Event() if bus is not None else None
        self._replicator: _Replicator | None = None
        if schedule_reservations is None:
            schedule_reservations = bool(extender_url)
        self._reservations = (
            reservations.ReservationScheduler(self, extender_url, extender_weight) if schedule_reservations else None
        )
        if bus is None:
            self.spec = (spec or SimSpec()).resolved()
            self.state = SimState.from_spec(self.spec)
            self.clock = clock or SimClock.of(self.spec)
        else:
            self.spec = spec.resolved() if spec is not None else None
            self.state = SimState()
            self.clock = clock

    # ------------------------------------------------------------------ lifecycle

    @staticmethod
    async def publish_genesis(bus: Any, spec: SimSpec | dict[str, Any]) -> SimSpec:
        """Start (or restart) the shared simulated cluster: every replica rebuilds from `spec`."""
        spec = (SimSpec.model_validate(spec) if isinstance(spec, dict) else spec).resolved()
        await bus.ensure_streams(subjects.SIM_STREAM)
        await bus.publish(subjects.sim("genesis"), bus.stamp(SimMutation(op="genesis", payload={"spec": spec.model_dump()})))
        return spec

    async def start(self) -> None:
        if self._bus is None:
            return
        self._replicator = _Replicator(self._bus, self._apply_from_stream)
        await self._replicator.start()
        if self._publish_genesis and self.spec is not None:
            await self._replicator.publish("genesis", {"spec": self.spec.model_dump()})
        await self._genesis_seen.wait()
        await self._replicator.caught_up.wait()

    async def close(self) -> None:
        if self._replicator is not None:
            await self._replicator.close()
        for q in list(self._watchers):
            q.put_nowait(None)

    @property
    def started(self) -> bool:
        return self._bus is None or (self._genesis_seen is not None and self._genesis_seen.is_set())

    def now_ms(self) -> int:
        if self.clock is None:
            raise RuntimeError("the simulated cluster has no genesis yet; await start() first")
        return self.clock.now_ms()

    # ------------------------------------------------------------------ applying

    def _dispatch(self, events: list[ClusterEvent]) -> None:
        if not self._watchers:
            return
        for q in self._watchers:
            for e in events:
                q.put_nowait(e)

    async def _apply_from_stream(self, op: str, payload: dict[str, Any]) -> Any:
        if op == "genesis":
            spec = SimSpec.model_validate(payload.get("spec") or {}).resolved()
            # building 1,000 nodes takes a moment: keep the event loop (health checks) responsive
            fresh = await asyncio.to_thread(SimState.from_spec, spec)
            self.state = fresh
            self.spec = spec
            self.clock = self._clock_override or SimClock.of(spec)
            self._genesis_seen.set()
            self._dispatch([ClusterEvent("ADDED", "Node", n) for n in fresh.nodes.values()])
            self._dispatch([ClusterEvent("ADDED", "Pod", p) for p in fresh.pods.values()])
            return spec
        if not self._genesis_seen.is_set():
            log.warning("sim mutation before genesis ignored", extra={"op": op})
            return None
        result, events = self.state.apply(op, payload)
        self._dispatch(events)
        return result

    async def _mutate(self, op: str, payload: dict[str, Any]) -> Any:
        if self._bus is None:
            result, events = self.state.apply(op, payload)
            self._dispatch(events)
            return result
        if self._replicator is None:
            raise RuntimeError("SimCluster.start() must be awaited before changing the cluster")
        return await self._replicator.publish(op, payload)

    # ------------------------------------------------------------------ reads (ClusterPort)

    async def list_nodes(self) -> list[NodeRecord]:
        return list(self.state.nodes.values())

    async def get_node(self, name: str) -> NodeRecord | None:
        return self.state.nodes.get(name)

    async def list_pods(self, node_name: str | None = None, namespace: str | None = None) -> list[PodRecord]:
        pods = self.state.pods_on(node_name) if node_name is not None else list(self.state.pods.values())
        if namespace is not None:
            pods = [p for p in pods if p.namespace == namespace]
        return pods

    async def get_pod(self, namespace: str, name: str) -> PodRecord | None:
        return self.state.pods.get(f"{namespace}/{name}")

    def watch(self) -> AsyncIterator[ClusterEvent]:
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.add(queue)  # registered now, so "from now on" holds before the first await

        async def events() -> AsyncIterator[ClusterEvent]:
            try:
                while True:
                    e = await queue.get()
                    if e is None:
                        return
                    yield e
            finally:
                self._watchers.discard(queue)

        return events()

    async def settle(self, max_turns: int = 10_000) -> None:
        """Local mode: return once every watcher has taken every event dispatched so far and had
        a turn to handle it. An in-process driver on simulated time (a replay) calls it between
        steps, so the services it hosts have seen each change before the next step; what their
        handlers change in turn is settled too."""
        quiet = 0
        for _ in range(max_turns):
            await asyncio.sleep(0)
            if all(q.empty() for q in self._watchers):
                quiet += 1
                if quiet >= 2:  # one more turn: the consumer of the last event has finished with it
                    return
            else:
                quiet = 0

    async def list_namespaces(self) -> dict[str, dict[str, str]]:
        """Namespaces the pods use, plus any applied `Namespace` object with its labels."""
        names = {p.namespace for p in self.state.pods.values()}
        out = {n: {"kubernetes.io/metadata.name": n} for n in names}
        for (_, name), obj in self.state.custom.get("Namespace", {}).items():
            labels = {str(k): str(v) for k, v in ((obj.get("metadata") or {}).get("labels") or {}).items()}
            out[name] = {"kubernetes.io/metadata.name": name, **labels}
        return out

    async def resolve_workload(self, pod: PodRecord) -> tuple[str, str]:
        return self.state.resolve_workload(pod)

    # ------------------------------------------------------------------ writes (ClusterPort)

    async def patch_node_status(
        self, name: str, set_resources: dict[str, int], remove_resources: list[str] = ()
    ) -> NodeRecord:
        return await self._mutate(
            "node_status",
            {"name": name, "set": {k: int(v) for k, v in set_resources.items()}, "remove": list(remove_resources)},
        )

    async def evict_pod(
        self, namespace: str, name: str, reason: str = "", dry_run: bool = False, grace_period_s: int | None = None
    ) -> EvictionResult:
        if dry_run:
            return self.state.eviction_decision(namespace, name)
        if f"{namespace}/{name}" not in self.state.pods:
            return EvictionResult(EvictionOutcome.NOT_FOUND, f'pods "{name}" not found')
        return await self._mutate(
            "pod_evicted",
            {
                "namespace": namespace,
                "name": name,
                "reason": reason,
                "grace_period_s": grace_period_s,
                "t_ms": self.now_ms(),
            },
        )

    async def create_pod(self, pod: PodRecord) -> PodRecord:
        data = pod_to_dict(pod)
        if not data.get("uid"):
            data["uid"] = str(uuid.uuid4())
        now = self.now_ms()
        data["created_ms"] = data.get("created_ms") or now
        return await self._mutate("pod_created", {"pod": data, "t_ms": now})

    async def bind_pod(self, namespace: str, name: str, node_name: str, uid: str = "",
                       annotations: dict[str, str] | None = None) -> None:
        payload = {"namespace": namespace, "name": name, "node": node_name, "uid": uid, "t_ms": self.now_ms()}
        if annotations:
            payload["annotations"] = dict(annotations)
        await self._mutate("pod_bound", payload)

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self._mutate("pod_deleted", {"namespace": namespace, "name": name, "t_ms": self.now_ms()})

    async def set_pod_phase(self, namespace: str, name: str, phase: str) -> PodRecord:
        """Sim only: a pod finishing (Succeeded/Failed) or turning unready (Pending)."""
        return await self._mutate("pod_phase", {"namespace": namespace, "name": name, "phase": phase})

    async def update_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        unschedulable: bool | None = None,
        ready: bool | None = None,
    ) -> NodeRecord:
        """Sim only: replace labels / taints ({key, value, effect}), cordon, mark (not) ready."""
        return await self._mutate(
            "node_updated",
            {"name": name, "labels": labels, "taints": taints, "unschedulable": unschedulable, "ready": ready},
        )

    async def list_custom(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        store = self.state.custom.get(kind, {})
        return [o for (ns, _), o in sorted(store.items()) if namespace is None or ns == namespace]

    async def get_custom(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.state.custom.get(kind, {}).get((namespace or "", name))

    async def apply_custom(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        written = await self._mutate("custom_applied", {"kind": kind, "obj": obj})
        if kind == reservation_words.KIND and self._reservations is not None:
            if reservation_words.phase(written) == reservation_words.PENDING:
                await self._place_reservation(written)
            await self._collect_reservations()
        return written

    async def _collect_reservations(self) -> None:
        """koord-scheduler's reservation GC, run when a reservation is written: the ended ones
        past gcDurationSeconds are deleted (a migration leaves one behind each time)."""
        now = self.now_ms()
        for key, obj in list(self.state.custom.get(reservation_words.KIND, {}).items()):
            if reservations.needs_cleanup(obj, now):
                await self.delete_custom(reservation_words.KIND, key[1], key[0] or None)

    async def _place_reservation(self, written: dict[str, Any]) -> None:
        """koord-scheduler's part: choose the node and write the status (unless the reservation
        was deleted, replaced or placed meanwhile)."""
        placed = await self._reservations.place(written, self.now_ms())
        current = self.state.custom.get(reservation_words.KIND, {}).get(custom_key(written))
        if current is None or _uid(current) != _uid(written) or reservation_words.phase(current) != reservation_words.PENDING:
            return
        await self._mutate("custom_applied", {"kind": reservation_words.KIND, "obj": placed})

    async def delete_custom(self, kind: str, name: str, namespace: str | None = None) -> None:
        await self._mutate("custom_deleted", {"kind": kind, "name": name, "namespace": namespace or ""})

    async def emit_event(self, involved: dict[str, str], reason: str, message: str, type_: str = "Normal") -> None:
        await self._mutate(
            "event",
            {"involved": dict(involved), "reason": reason, "message": message, "type": type_, "t_ms": self.now_ms()},
        )

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self.state.events)

    # ------------------------------------------------------------------ batch stream (sim only)

    async def run_batch_stream(self, stop: asyncio.Event | None = None, poll_s: float = 1.0) -> int:
        """Create the Alibaba 2017 batch arrivals as simulated time passes, and finish (Succeeded,
        then deleted) stream pods whose trace duration elapsed. Run by one process only (the one
        that published the genesis); returns the number of pods created when `stop` is set."""
        if self.spec is None or not self.spec.batch_stream:
            return 0
        created = 0
        last = self.now_ms()
        while stop is None or not stop.is_set():
            now = self.now_ms()
            for pod in await asyncio.to_thread(batch.batch_arrivals, self.spec, last, now):
                if pod.key not in self.state.pods:
                    with contextlib.suppress(MutationError):  # created concurrently by an earlier run
                        await self.create_pod(pod)
                        created += 1
            for pod in await self.list_pods(namespace=batch.BATCH_NAMESPACE):
                if batch.finished(pod, now):
                    try:
                        await self.set_pod_phase(pod.namespace, pod.name, "Succeeded")
                        await self.delete_pod(pod.namespace, pod.name)
                    except MutationError:
                        pass
            last = now
            if stop is None:
                await asyncio.sleep(poll_s)
            else:
                try:
                    await asyncio.wait_for(stop.wait(), poll_s)
                except TimeoutError:
                    pass
        return created

    # ------------------------------------------------------------------ usage (sim only)

    async def set_usage_override(
        self,
        node: str | None = None,
        pod_key: str | None = None,
        factor: float | None = None,
        cpu_factor: float | None = None,
        memory_factor: float | None = None,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> None:
        """Hot spot: multiply the usage of a node's pods (or one pod, `namespace/name`) in [from, to)."""
        cpu = cpu_factor if cpu_factor is not None else (factor if factor is not None else 1.0)
        mem = memory_factor if memory_factor is not None else (factor if factor is not None else 1.0)
        await self._mutate(
            "usage_override",
            {"node": node, "pod_key": pod_key, "cpu_factor": cpu, "memory_factor": mem, "from_ms": from_ms, "to_ms": to_ms},
        )

    async def clear_usage_overrides(self, node: str | None = None, pod_key: str | None = None) -> None:
        await self._mutate("usage_override_cleared", {"node": node, "pod_key": pod_key})

    def _t(self, t_ms: int | None) -> int:
        return self.now_ms() if t_ms is None else int(t_ms)

    def pod_usage(self, pod: PodRecord, t_ms: int | None = None) -> Resources:
        return self.state.pod_usage(pod, self._t(t_ms))

    def container_usage(self, pod: PodRecord, container: str, t_ms: int | None = None) -> Resources:
        return self.state.container_usage(pod, container, self._t(t_ms))

    def system_usage(self, node: str, t_ms: int | None = None) -> Resources:
        if node not in self.state.nodes:
            return Resources()
        return self.state.usage.system_usage(node, self._t(t_ms))

    def node_usage(self, node: str, t_ms: int | None = None) -> Resources:
        return self.usage_snapshot(node, t_ms).node_usage

    def usage_of_nodes(self, nodes: Sequence[str], t_ms: int | None = None) -> NodesUsage:
        """`usage_snapshot` of many nodes at once: their running pods are evaluated in one pass
        (a node agent driving thousands of simulated nodes calls this every second). The joined
        pod set is kept while no node's pods change."""
        t = self._t(t_ms)
        names = [n for n in nodes if n in self.state.nodes]
        sets = [self.state.podset(n) for n in names]
        cached = self._nodes_podset
        if cached is None or len(cached[0]) != len(sets) or any(a is not b for a, b in zip(cached[0], sets)):
            cached = self._nodes_podset = (sets, concat_podsets(sets))
        joined = cached[1]
        cpu, mem = self.state.usage.evaluate(joined, t, self.state.overrides)
        bounds = np.cumsum([0] + [len(ps.keys) for ps in sets])
        c = np.concatenate([[0], np.cumsum(cpu)])
        m = np.concatenate([[0], np.cumsum(mem)])
        system = [self.state.usage.system_usage(n, t) for n in names]
        node_cpu = c[bounds[1:]] - c[bounds[:-1]] + np.fromiter((s.cpu_milli for s in system), np.int64, len(names))
        node_mem = m[bounds[1:]] - m[bounds[:-1]] + np.fromiter((s.memory_bytes for s in system), np.int64, len(names))
        return NodesUsage(t, names, bounds.tolist(), joined.keys, cpu, mem, node_cpu, node_mem)

    def usage_snapshot(self, node: str, t_ms: int | None = None) -> UsageSnapshot:
        """One vectorised evaluation of every running pod on `node` plus its system usage."""
        t = self._t(t_ms)
        if node not in self.state.nodes:
            return UsageSnapshot(node, t, Resources(), Resources(), {})
        ps, cpu, mem = self.state.node_pod_usage(node, t)
        system = self.state.usage.system_usage(node, t)
        total = Resources(int(cpu.sum()) + system.cpu_milli, int(mem.sum()) + system.memory_bytes)
        pods = {k: Resources(int(c), int(m)) for k, c, m in zip(ps.keys, cpu.tolist(), mem.tolist())}
        return UsageSnapshot(node, t, total, system, pods)
