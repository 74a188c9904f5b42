"""The descheduling loop: gather state, plan a round, carry it out (or only publish it)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.cluster.port import ClusterPort, EvictionOutcome
from koordcommon.schemas import Event, NodeMetric

from .core.anomaly import Detector
from .core.config import LowNodeLoadArgs
from .core.lownodeload import LimitCounter, Migration, RoundPlan, plan_round
from .snapshot import node_states, pod_states, unavailable_by_workload

log = logging.getLogger("descheduler")

ROUNDS = Counter("koord_descheduler_rounds_total", "Descheduling rounds run")
DECISIONS = Counter("koord_descheduler_decisions_total", "Migration decisions", ["outcome"])
HIGH_NODES = Gauge("koord_descheduler_high_nodes", "Nodes over their high thresholds in the last round")


@dataclass
class RoundReport:
    plan: RoundPlan
    outcomes: dict[str, str] = field(default_factory=dict)  # pod key -> evicted | blocked | dry-run | ...


class Descheduler:
    def __init__(self, args: LowNodeLoadArgs, cluster: ClusterPort, bus: Bus | None, dry_run: bool | None = None):
        self.args = args
        self.cluster = cluster
        self.bus = bus
        self.dry_run = args.dryRun if dry_run is None else dry_run
        self.metrics: dict[str, NodeMetric] = {}
        self.detectors: dict[str, Detector] = {}
        self.blocked_until: dict[str, float] = {}  # pod uid -> monotonic time a PDB retry is due
        self._evict_interval = 1.0 / args.limits.evictQPS if args.limits.evictQPS > 0 else 0.0

    async def follow_metrics(self) -> None:
        """Keep the latest NodeMetric per node (from the start of the stream, then live)."""
        assert self.bus is not None
        async for d in self.bus.tail(
            subjects.NODEMETRIC_STREAM, "koord.nodemetric.>", NodeMetric, deliver="last_per_subject"
        ):
            self.metrics[d.msg.node] = d.msg

    async def run_round(self, now_ms: int | None = None) -> RoundReport:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        nodes = await self.cluster.list_nodes()
        pods = [p for p in await self.cluster.list_pods() if p.node_name and p.is_active]
        n_states = node_states(nodes, pods, self.metrics, now_ms, self.args.nodeMetricExpirationSeconds)
        p_states = pod_states(pods, self.metrics, self.args.evictLocalStoragePods)
        waiting = time.monotonic()
        p_states = [p for p in p_states if self.blocked_until.get(p.uid, 0) <= waiting]
        plan = plan_round(
            self.args, n_states, p_states, self.detectors, now_ms / 1000, LimitCounter(), unavailable_by_workload(pods)
        )
        ROUNDS.inc()
        HIGH_NODES.set(sum(1 for c in plan.classes.values() if c == "high"))
        report = RoundReport(plan)
        for m in plan.migrations:
            report.outcomes[m.pod.key] = await self._carry_out(m)
            if self._evict_interval and not self.dry_run:
                await asyncio.sleep(self._evict_interval)
        for s in plan.skipped:
            if s.reason.startswith(("fits on no", "node ", "namespace ", "workload ", "round ")):
                await self._event(s.node, "skip", s.reason, {"pod": s.pod_key})
        if plan.migrations or plan.abnormal:
            log.info(
                "round planned",
                extra={"abnormal": plan.abnormal, "migrations": len(plan.migrations), "dry_run": self.dry_run},
            )
        return report

    async def _carry_out(self, m: Migration) -> str:
        target = {"namespace": m.pod.namespace, "name": m.pod.name, "uid": m.pod.uid, "target_node": m.target}
        if self.dry_run:
            DECISIONS.labels("dry-run").inc()
            await self._event(m.source, "would-evict", m.reason, target, dry_run=True)
            return "dry-run"
        result = await self.cluster.evict_pod(m.pod.namespace, m.pod.name, reason=m.reason)
        outcome = result.outcome
        DECISIONS.labels(outcome.value).inc()
        if outcome is EvictionOutcome.BLOCKED:
            # A PodDisruptionBudget said no: leave the pod alone until the retry is due.
            self.blocked_until[m.pod.uid] = time.monotonic() + (result.retry_after_s or 60.0)
        await self._event(m.source, outcome.value, m.reason if outcome is EvictionOutcome.EVICTED else result.message, target)
        return outcome.value

    async def _event(self, node: str, action: str, reason: str, target: dict, dry_run: bool = False) -> None:
        if self.bus is None:
            return
        ev = self.bus.stamp(
            Event(kind=subjects.EVENT_DESCHEDULE, node=node, action=action, reason=reason, dry_run=dry_run, target=target)
        )
        try:
            await self.bus.publish(subjects.event(subjects.EVENT_DESCHEDULE, node), ev)
        except Exception:  # an event that cannot be published must not stop the round
            log.exception("could not publish descheduling event")
