"""The node resource controller: keeps the cluster and the latest NodeMetric of every node,
recomputes batch/mid allocatable, writes node status when the sync rule says so, publishes
NodeResource and distributes NodeSLO through the bus KV.

Inputs arrive from three places (cluster watch, `koord.nodemetric.>`, the config source);
each only updates plain state and asks for a recompute. The core plans; `_execute` acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from koordcommon import subjects
from koordcommon.bus import partition_of
from koordcommon.cluster.port import ClusterEvent, ClusterPort
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import published_prefix
from koordcommon.schemas import NodeMetric, NodeResource, NodeSLO
from koordcommon.service import cancel_and_wait
from prometheus_client import Counter, Gauge, Histogram

from .core import peak, topology
from .core.config import KEY_COLOCATION, NodeColocation
from .core.configmap import NODESLO_KEYS, ApplyResult, ConfigState
from .core.nodeslo import NodeSLOBuilder
from .core.plan import NodePlan, plan_node
from .core.resources import batch_numa
from .core.snapshot import MetricView, NodeSnapshot, PodLoad

log = logging.getLogger("slo_controller.controller")

WRITES = Counter("koord_slo_node_status_writes_total", "Node status patches", ["reason"])
WRITE_ERRORS = Counter("koord_slo_node_status_write_errors_total", "Node status patches that failed")
DEGRADED = Gauge("koord_slo_degraded_nodes", "Nodes whose NodeMetric is missing or stale")
RECOMPUTE = Histogram(
    "koord_slo_recompute_seconds", "Time to plan every node", buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
)
CONFIG_ERRORS = Gauge("koord_slo_config_errors", "ConfigMap keys rejected (their last good config stays)")
NODESLO_PUTS = Counter("koord_slo_nodeslo_puts_total", "NodeSLO specs written to the KV bucket")
NRT_WRITES = Counter("koord_slo_nrt_writes_total", "NodeResourceTopology objects written (batch per NUMA zone)")
NRT_ERRORS = Counter("koord_slo_nrt_write_errors_total", "NodeResourceTopology reads or writes that failed")


def _wall_ms() -> int:
    return int(time.time() * 1000)


class SLOController:
    def __init__(
        self,
        cluster: ClusterPort,
        bus: Any | None,
        config: ConfigState | None = None,
        *,
        prefix: str | None = None,
        resync_s: float = 30.0,
        degrade_after_ms: int | None = None,
        clock: Callable[[], int] | None = None,
        publish_nodeslo: bool = True,
        catchup_timeout_s: float = 5.0,
        group: tuple[int, int] | None = None,
        partitions: int = 12,
    ) -> None:
        """`group`: (member, members) of the slo-controller's consumer group: this replica owns
        the nodes of its partitions (their NodeMetrics, in order, reach it alone) and plans,
        degrades and distributes NodeSLO for those only. None: one replica owns every node."""
        self.group = group
        self.partitions = partitions
        self.cluster = cluster
        self.bus = bus
        self.config = config or ConfigState()
        self.prefix = prefix or published_prefix()
        self.resync_s = resync_s
        self.degrade_after_ms = degrade_after_ms
        # The sim cluster runs its own (possibly faster) clock and node agents stamp metrics with it.
        sim_clock = getattr(cluster, "now_ms", None)
        self.clock = clock or (sim_clock if callable(sim_clock) else _wall_ms)
        self.publish_nodeslo = publish_nodeslo and bus is not None
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, dict[str, PodLoad]] = {}  # node -> pod key -> load
        self._pod_node: dict[str, str] = {}  # pod key -> node
        self.metrics: dict[str, MetricView] = {}
        self.metric_ts: dict[str, int] = {}
        self.hp_history: dict[str, peak.UsageMoments] = {}  # per node, for the `predict` policy
        self.last_sync: dict[str, int] = {}
        self.last_plan: dict[str, NodePlan] = {}
        self._colocation: dict[str, NodeColocation] = {}
        self._nodeslo_builder: NodeSLOBuilder = self.config.current.nodeslo_builder()
        self._nodeslo_sent: dict[str, str] = {}
        self._nrt: dict[str, dict[str, Any]] = {}  # node -> its NodeResourceTopology as last read or written
        self._nrt_sync: dict[str, int] = {}  # node -> when its zones were last written
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task] = []
        self.catchup_timeout_s = catchup_timeout_s
        self.metrics_caught_up = asyncio.Event()
        self.ready = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        watch = self.cluster.watch()  # subscribed before listing, so nothing falls in between
        for node in await self.cluster.list_nodes():
            if self.owns(node.name):
                self.nodes[node.name] = node
        for pod in await self.cluster.list_pods():
            self._put_pod(pod)
        self._tasks.append(asyncio.create_task(self._watch_loop(watch), name="slo-cluster-watch"))
        if self.bus is not None:
            await self.bus.ensure_streams(subjects.NODEMETRIC_STREAM, subjects.NODERESOURCE_STREAM)
            if self.publish_nodeslo:
                await self.bus.ensure_kv(subjects.NODESLO_BUCKET)
            self._tasks.append(asyncio.create_task(self._metric_loop(), name="slo-nodemetric"))
            # Planning before the stored metrics are read would mark every node degraded and
            # strip its batch resources for a moment; an empty stream never reports, hence the bound.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.metrics_caught_up.wait(), self.catchup_timeout_s)
        await self.sync_nodeslo()
        if self.resync_s > 0:  # 0: the caller recomputes (a replay on simulated time, every metric)
            self._tasks.append(asyncio.create_task(self._resync_loop(), name="slo-resync"))
        self.ready.set()
        log.info("slo-controller started", extra={"nodes": len(self.nodes), "pods": len(self._pod_node)})

    async def close(self, timeout_s: float = 5.0) -> None:
        for t in await cancel_and_wait(self._tasks, timeout_s):
            log.warning("task did not stop on cancel", extra={"task": t.get_name()})
        self._tasks.clear()

    # ------------------------------------------------------------------ inputs

    def _put_pod(self, pod: PodRecord) -> None:
        key = pod.key
        old_node = self._pod_node.get(key)
        if old_node is not None and old_node != pod.node_name:
            self.pods.get(old_node, {}).pop(key, None)
            del self._pod_node[key]
        if pod.node_name:
            self.pods.setdefault(pod.node_name, {})[key] = PodLoad.from_record(pod)
            self._pod_node[key] = pod.node_name

    def _drop_pod(self, key: str) -> None:
        node = self._pod_node.pop(key, None)
        if node is not None:
            self.pods.get(node, {}).pop(key, None)

    def owns(self, node: str) -> bool:
        """Whether this replica plans the node (its consumer-group partition is this member's)."""
        return self.group is None or partition_of(node, self.partitions) % self.group[1] == self.group[0]

    async def handle_cluster_event(self, e: ClusterEvent) -> None:
        if e.kind == "Pod":
            pod: PodRecord = e.obj  # type: ignore[assignment]
            if e.type == "DELETED":
                self._drop_pod(pod.key)
            else:
                self._put_pod(pod)
        elif e.kind == "Node":
            node: NodeRecord = e.obj  # type: ignore[assignment]
            if not self.owns(node.name):
                return
            if e.type == "DELETED":
                self._forget_node(node.name)
                return
            old = self.nodes.get(node.name)
            self.nodes[node.name] = node
            # Our own status writes come back as MODIFIED too: only new nodes and metadata
            # changes (which may select another strategy) are worth a recompute.
            if old is None or old.labels != node.labels or old.annotations != node.annotations:
                self._colocation.pop(node.name, None)
                await self.sync_nodeslo([node.name])
                await self.reconcile_node(node.name)

    def _forget_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        for key in self.pods.pop(name, {}):
            self._pod_node.pop(key, None)
        for d in (self.metrics, self.metric_ts, self.last_sync, self.last_plan, self._colocation,
                  self._nodeslo_sent, self._locks, self._nrt, self._nrt_sync, self.hp_history):
            d.pop(name, None)

    async def handle_metric(self, msg: NodeMetric) -> NodePlan | None:
        current = self.metric_ts.get(msg.node)
        if current is not None and msg.ts < current:
            return None  # an older report arriving late never replaces a newer one
        view = self.metrics[msg.node] = MetricView.from_message(msg)
        self.metric_ts[msg.node] = msg.ts
        # every report feeds the node's HP usage history, whatever the policy: switching to
        # `predict` then finds the history there
        history = self.hp_history.get(msg.node)
        if history is None:
            history = self.hp_history[msg.node] = peak.UsageMoments()
        history.observe(msg.ts, *peak.hp_usage(view))
        if msg.node in self.nodes:
            return await self.reconcile_node(msg.node)
        return None

    async def apply_config(self, data: Mapping[str, Any]) -> ApplyResult:
        result = self.config.apply(data)
        for key, err in result.errors.items():
            log.error("config key rejected; the last good config stays", extra={"key": key, "error": err})
        for w in result.warnings:
            log.warning("config warning", extra={"warning": w})
        CONFIG_ERRORS.set(len(result.errors))
        if KEY_COLOCATION in result.changed:
            self._colocation.clear()
            await self.reconcile_all()
        if any(k in result.changed for k in NODESLO_KEYS):
            self._nodeslo_builder = self.config.current.nodeslo_builder()
            await self.sync_nodeslo()
        return result

    # ------------------------------------------------------------------ planning

    def colocation_for(self, node: NodeRecord) -> NodeColocation:
        col = self._colocation.get(node.name)
        if col is None:
            col = self.config.current.colocation.for_node(node.labels, node.annotations)
            for w in col.warnings:
                log.warning("node colocation override ignored", extra={"node": node.name, "warning": w})
            self._colocation[node.name] = col
        return col

    def plan(self, name: str, now_ms: int | None = None) -> NodePlan:
        node = self.nodes[name]
        snap = NodeSnapshot(
            node,
            list(self.pods.get(name, {}).values()),
            self.metrics.get(name),
            self.clock() if now_ms is None else now_ms,
            self.degrade_after_ms,
            self.hp_history.get(name),
        )
        return plan_node(snap, self.colocation_for(node), self.prefix, self.last_sync.get(name))

    def plan_all(self) -> list[NodePlan]:
        now = self.clock()
        with RECOMPUTE.time():
            plans = [self.plan(name, now) for name in list(self.nodes)]
        DEGRADED.set(sum(1 for p in plans if p.degraded))
        return plans

    # ------------------------------------------------------------------ acting

    async def reconcile_node(self, name: str) -> NodePlan | None:
        if name not in self.nodes:
            return None
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            plan = self.plan(name)
            await self._execute(plan)
            await self.sync_zones(plan)
            return plan

    async def reconcile_all(self) -> list[NodePlan]:
        plans = self.plan_all()
        for i, plan in enumerate(plans):
            if plan.write:
                lock = self._locks.setdefault(plan.node, asyncio.Lock())
                async with lock:
                    # Re-plan under the lock: a metric may have landed since the batch plan.
                    plan = self.plan(plan.node) if plan.node in self.nodes else plan
                    await self._execute(plan)
                    await self.sync_zones(plan)
            else:
                self.last_plan[plan.node] = plan
                if plan.zones or plan.zones_reset:
                    await self.sync_zones(plan)
            if i % 500 == 499:
                await asyncio.sleep(0)
        return plans

    async def _execute(self, plan: NodePlan) -> None:
        self.last_plan[plan.node] = plan
        if not plan.write:
            return
        current = self.nodes[plan.node].allocatable if plan.node in self.nodes else {}
        changed = any(current.get(k) != v for k, v in plan.values.items())
        try:
            node = await self.cluster.patch_node_status(plan.node, plan.set_resources, plan.remove_resources)
        except Exception as exc:  # noqa: BLE001 - one node's failure must not stop the others
            WRITE_ERRORS.inc()
            log.error("node status patch failed", extra={"node": plan.node, "error": repr(exc)})
            return
        if isinstance(node, NodeRecord):
            self.nodes[plan.node] = node
        self.last_sync[plan.node] = self.clock()
        WRITES.labels(plan.reason.split(":", 1)[0]).inc()
        # The periodic rewrite of unchanged values is routine; changes are worth a line.
        log.log(
            logging.INFO if changed else logging.DEBUG,
            "node status written",
            extra={"node": plan.node, "reason": plan.reason, "set": plan.set_resources, "remove": plan.remove_resources,
                   "degraded": plan.degraded},
        )
        await self._publish(plan, current)

    async def sync_zones(self, plan: NodePlan) -> bool:
        """Write the node's batch resources per NUMA zone into its NodeResourceTopology when a
        zone's value moved beyond resourceDiffThreshold or the last write is older than
        updateTimeThresholdSeconds (Koordinator's BatchResource PreUpdate); True when written."""
        name = plan.node
        if not plan.zones and not (plan.zones_reset and name in self._nrt) or name not in self.nodes:
            return False
        obj = self._nrt.get(name)
        try:
            if obj is None:
                obj = await self.cluster.get_custom(topology.NRT_KIND, name)
            if obj is None:
                metric = self.metrics.get(name)
                if not plan.zones or metric is None or not metric.zones:
                    return False
                obj = topology.new_object(name, metric.zones)
            strategy = self.colocation_for(self.nodes[name]).strategy
            names = tuple(self.prefix + s for s in batch_numa.SUFFIXES)
            updated, changed = topology.update_zones(obj, plan.zones, names, strategy.resourceDiffThreshold)
            last = self._nrt_sync.get(name)
            now = self.clock()
            if not changed and last is not None and now - last <= strategy.update_threshold_ms:
                self._nrt[name] = obj
                return False
            written = await self.cluster.apply_custom(topology.NRT_KIND, updated)
        except Exception as exc:  # noqa: BLE001 - the node status is written; the zones follow next round
            NRT_ERRORS.inc()
            log.warning("NodeResourceTopology sync failed", extra={"node": name, "error": repr(exc)})
            return False
        self._nrt[name] = written if isinstance(written, dict) else updated
        self._nrt_sync[name] = now
        NRT_WRITES.inc()
        log.debug("NodeResourceTopology written", extra={"node": name, "zones": plan.zones})
        return True

    def _sync_inputs(self, plan: NodePlan, previous: dict[str, int]) -> dict[str, Any]:
        """The write decision's inputs: the values it compared, its thresholds and its answer."""
        node = self.nodes.get(plan.node)
        strategy = self.colocation_for(node).strategy if node is not None else None
        return {
            "decision": plan.reason,
            "previous": {k: previous.get(k) for k in plan.values},
            "resourceDiffThreshold": strategy.resourceDiffThreshold if strategy else None,
            "updateTimeThresholdSeconds": strategy.update_threshold_ms // 1000 if strategy else None,
        }

    async def _publish(self, plan: NodePlan, previous: dict[str, int] | None = None) -> None:
        if self.bus is None:
            return
        msg = NodeResource(
            node=plan.node,
            batch=plan.batch,
            mid=plan.mid,
            degraded=plan.degraded,
            reason=plan.reason if plan.enabled else "disabled",
            written=plan.write,
            metric_ts=self.metric_ts.get(plan.node),
            inputs={**plan.inputs(), **({"numaZones": plan.zones} if plan.zones else {}),
                    "sync": self._sync_inputs(plan, previous or {})},
            messages=plan.messages,
        )
        try:
            await self.bus.publish(subjects.noderesource(plan.node), self.bus.stamp(msg))
        except Exception as exc:  # noqa: BLE001 - the node status is written; the report is best effort
            log.warning("NodeResource publish failed", extra={"node": plan.node, "error": repr(exc)})

    async def sync_nodeslo(self, names: list[str] | None = None) -> int:
        """Put each node's NodeSLO into the KV bucket when its spec changed; returns the puts."""
        if not self.publish_nodeslo:
            return 0
        puts = 0
        for name in list(self.nodes) if names is None else names:
            node = self.nodes.get(name)
            if node is None:
                continue
            spec = self._nodeslo_builder.spec_for(node.labels)
            encoded = spec.model_dump_json()
            if self._nodeslo_sent.get(name) == encoded:
                continue
            msg = self.bus.stamp(NodeSLO(node=name, spec=spec))
            try:
                await self.bus.kv_put(subjects.NODESLO_BUCKET, subjects.encode_token(name), msg.encode())
            except Exception as exc:  # noqa: BLE001 - retried on the next config or node change
                log.warning("NodeSLO put failed", extra={"node": name, "error": repr(exc)})
                continue
            self._nodeslo_sent[name] = encoded
            puts += 1
        NODESLO_PUTS.inc(puts)
        return puts

    # ------------------------------------------------------------------ loops

    async def _watch_loop(self, watch) -> None:
        async for e in watch:
            try:
                await self.handle_cluster_event(e)
            except Exception:  # a bad event must not end the watch
                log.exception("cluster event failed", extra={"kind": e.kind, "type": e.type})

    async def _metric_group(self) -> None:
        """This replica's partitions of the NodeMetric stream, as a member of the consumer group."""

        async def handle(deliveries) -> None:
            for d in deliveries:
                try:
                    await self.handle_metric(d.msg)
                except Exception:
                    log.exception("NodeMetric handling failed", extra={"subject": d.subject})
                if d.pending == 0:
                    self.metrics_caught_up.set()

        member, members = self.group
        await self.bus.consume_group(subjects.NODEMETRIC_STREAM, "slo-controller", f"{subjects.PREFIX}.nodemetric.*",
                                     NodeMetric, handle, member, members, self.partitions, batch=500)  # fmt: skip

    async def _metric_loop(self) -> None:
        if self.group is not None:
            await self._metric_group()
            return
        deliver = "last_per_subject"  # only the latest report of each node matters
        while True:
            try:
                async for d in self.bus.tail(
                    subjects.NODEMETRIC_STREAM, f"{subjects.PREFIX}.nodemetric.>", NodeMetric, deliver=deliver
                ):
                    try:
                        await self.handle_metric(d.msg)
                    except Exception:
                        log.exception("NodeMetric handling failed", extra={"subject": d.subject})
                    if d.pending == 0:
                        self.metrics_caught_up.set()
                return  # the bus closed
            except Exception:
                # Re-reading the latest of each node is harmless: older reports are ignored.
                log.exception("NodeMetric subscription failed; resubscribing")
                await asyncio.sleep(1.0)

    async def _resync_loop(self) -> None:
        while True:
            try:
                await self.reconcile_all()
            except Exception:
                log.exception("resync failed")
            await asyncio.sleep(self.resync_s)
