"""The descheduling loop: gather state, plan a round, carry it out (or only publish it).

Migrations run as jobs (core.migration) that outlive a round: jobs still in flight count
against the limits of the next rounds, and `advance` moves them on between rounds.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.cluster.port import ClusterPort, EvictionOutcome
from koordcommon.deferred import Deferred
from koordcommon.records import PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeMetric
from prometheus_client import Counter, Gauge

from . import reservation as rsv
from .core import migration as mig
from .core.anomaly import Detector
from .core.config import LowNodeLoadArgs
from .core.lownodeload import PROD_DETECTOR, Migration, RoundPlan, plan_round
from .snapshot import PodsByNode, node_states, replicas_by_workload, unavailable_by_workload

log = logging.getLogger("descheduler")

ROUNDS = Counter("koord_descheduler_rounds_total", "Descheduling rounds run")
DECISIONS = Counter("koord_descheduler_decisions_total", "Eviction decisions by outcome", ["outcome"])
JOBS = Counter("koord_descheduler_jobs_total", "Migration jobs that ended", ["mode", "phase", "reason"])
RESERVATIONS = Counter("koord_descheduler_reservations_total", "Reservations by outcome", ["outcome"])
HIGH_NODES = Gauge("koord_descheduler_high_nodes", "Nodes over their high thresholds in the last round")
IN_FLIGHT = Gauge("koord_descheduler_jobs_in_flight", "Migration jobs not finished")

HISTORY = 200  # finished jobs kept for the API
REPLANS = 5  # extra plans in one round when migrations were refused at once (PDB, unschedulable)


def _worth_an_event(reason: str) -> bool:
    """Skips that are decisions of this round: a limit reached, or no low node fits the pod.
    Exclusions (DaemonSet, single replica, ...) are the same every round and only in the plan."""
    return "reached" in reason or reason.startswith("fits on no")


@dataclass
class RoundReport:
    plan: RoundPlan
    outcomes: dict[str, str] = field(default_factory=dict)  # pod key -> evicted | blocked | dry-run | ...


class Descheduler:
    def __init__(
        self,
        args: LowNodeLoadArgs,
        cluster: ClusterPort,
        bus: Bus | None,
        dry_run: bool | None = None,
        clock=None,
        rate_clock=time.monotonic,
        sleep=asyncio.sleep,
    ):
        """`rate_clock` / `sleep`: what the eviction rate limit measures and waits by. Wall time by
        default (the rate protects the API server); a replay on simulated time passes its own."""
        self.args = args
        self.cluster = cluster
        self.bus = bus
        self.dry_run = args.dryRun if dry_run is None else dry_run
        # Job deadlines and retries are compared with cluster objects (reservation ttl, PDB
        # retry-after), so they follow the cluster's clock: the simulated one runs at its own speed.
        self.clock = clock or self._cluster_seconds
        self.metrics: dict[str, NodeMetric] = {}
        self.detectors: dict[str, Detector] = {}
        self.blocked_until: dict[str, float] = {}  # pod uid -> clock time a PDB retry is due
        self.jobs: dict[str, mig.Job] = {}  # pod uid -> job in flight
        self.finished: collections.deque[mig.Job] = collections.deque(maxlen=HISTORY)
        # (the pod list of a round, its pods by controller): built when a job first looks, once a list
        self._by_controller: tuple[list[PodRecord], dict] | None = None
        self.departed: dict[str, float] = {}  # uid of a pod we evicted -> when
        self.bucket = mig.TokenBucket(args.limits.evictQPS, args.limits.evictBurst)
        self.object_limiters = mig.ObjectLimiters(args.limits)
        self.rate_clock, self.sleep = rate_clock, sleep
        self.lock = asyncio.Lock()

    # ------------------------------------------------------------------ inputs

    async def follow_metrics(self) -> None:
        """Keep the latest NodeMetric per node (from the start of the stream, then live)."""
        assert self.bus is not None
        async for d in self.bus.tail(
            subjects.NODEMETRIC_STREAM, "koord.nodemetric.>", NodeMetric, deliver="last_per_subject"
        ):
            self.metrics[d.msg.node] = d.msg

    def _cluster_seconds(self) -> float:
        now = getattr(self.cluster, "now_ms", None)
        return now() / 1000 if callable(now) else time.monotonic()

    def _now_ms(self) -> int:
        """Cluster time: the simulated cluster runs its own clock, and NodeMetrics follow it."""
        now = getattr(self.cluster, "now_ms", None)
        return int(now()) if callable(now) else int(time.time() * 1000)

    async def clean_orphans(self) -> int:
        """Delete the reservations an earlier run of this descheduler left unfinished: the jobs
        that owned them lived in its memory, so nothing would evict for them or consume them."""
        try:
            objs = await self.cluster.list_custom(rsv.KIND)
        except Exception:  # no Reservation CRD: nothing to clean
            log.warning("cannot list reservations", exc_info=True)
            return 0
        mine = {j.reservation for j in self.jobs.values()}
        gone = 0
        for obj in objs:
            meta = obj.get("metadata") or {}
            phase, _ = rsv.phase_and_node(obj)
            if (meta.get("labels") or {}).get(rsv.LABEL_CREATED_BY) == rsv.CREATED_BY and phase in ("Pending", "Available") \
                    and meta.get("name") not in mine:
                await self.cluster.delete_custom(rsv.KIND, meta["name"])
                gone += 1
        return gone

    # ------------------------------------------------------------------ rounds

    async def run_round(self, now_ms: int | None = None) -> RoundReport:
        async with self.lock:
            now_ms = now_ms if now_ms is not None else self._now_ms()
            await self._advance(await self.cluster.list_pods())
            report: RoundReport | None = None
            refused = 0
            for attempt in range(1 + REPLANS):
                pods = await self.cluster.list_pods()
                nodes = await self.cluster.list_nodes()
                if attempt == 0:
                    self._forget_departed()
                    self._forget_gone(nodes, pods)
                # A replan must not count as another hot round: it works on a copy of the detectors.
                detectors = self.detectors if attempt == 0 else copy.deepcopy(self.detectors)
                plan = self._plan(now_ms, nodes, pods, detectors)
                if report is None:
                    report = RoundReport(plan)
                    ROUNDS.inc()
                    HIGH_NODES.set(sum(1 for c in plan.classes.values() if c == "high"))
                elif not plan.migrations:
                    break
                else:
                    report.plan.migrations.extend(plan.migrations)
                    report.plan.notes.append(f"replanned after {refused} migration(s) ended at once")
                by_key = {p.key: p for p in pods} if plan.migrations else {}  # most rounds migrate nothing
                failed = []
                for m in plan.migrations:
                    report.outcomes[m.pod.key] = await self._start(m, by_key.get(m.pod.key), pods)
                    if not self.dry_run and m.pod.uid not in self.jobs and report.outcomes[m.pod.key] != "evicted":
                        failed.append(m)
                if attempt == 0:
                    for s in plan.skipped:
                        if _worth_an_event(s.reason):
                            await self._event(s.node, "skip", s.reason, {"pod": s.pod_key})
                # Koordinator evicts in order and, when an eviction fails, goes on with the next pod;
                # a plan made up front does the same by planning again without the refused pods.
                refused = len(failed)
                if not failed:
                    break
            IN_FLIGHT.set(len(self.jobs))
            if report.plan.migrations or report.plan.abnormal:
                log.info(
                    "round planned",
                    extra={"abnormal": report.plan.abnormal, "migrations": len(report.plan.migrations),
                           "dry_run": self.dry_run, "in_flight": len(self.jobs)},
                )
            return report

    def _plan(self, now_ms: int, nodes, pods, detectors) -> RoundPlan:
        active = [p for p in pods if p.node_name and p.is_active]
        n_states = node_states(
            nodes, active, self.metrics, now_ms, self.args.nodeMetricExpirationSeconds,
            departed=set(self.departed), arriving=self._arriving(),
        )
        waiting = self.clock()
        movable = PodsByNode(active, self.metrics, self.args.evictor_rules(),
                             keep=lambda p: self.blocked_until.get(p.uid, 0) <= waiting and p.uid not in self.jobs)
        return plan_round(
            self.args, n_states, movable, detectors, now_ms / 1000,
            mig.in_flight(list(self.jobs.values())),
            Deferred(lambda: unavailable_by_workload(pods)), Deferred(lambda: replicas_by_workload(pods)),
            self.object_limiters.tokens(waiting),
        )

    async def advance(self) -> None:
        """Move the jobs in flight on (between rounds)."""
        if not self.jobs:
            return
        async with self.lock:
            await self._advance(await self.cluster.list_pods())
            IN_FLIGHT.set(len(self.jobs))

    def _forget_departed(self) -> None:
        # A NodeMetric newer than the eviction no longer lists the pod; keep the uid a while.
        horizon = self.clock() - max(self.args.nodeMetricExpirationSeconds, 60)
        for uid in [u for u, t in self.departed.items() if t < horizon]:
            del self.departed[uid]

    def _forget_gone(self, nodes, pods) -> None:
        names = {n.name for n in nodes}
        for key in [k for k in self.detectors if k.removeprefix(PROD_DETECTOR) not in names]:
            del self.detectors[key]
        now = self.clock()
        uids = {p.uid for p in pods}
        for uid in [u for u, t in self.blocked_until.items() if t <= now or u not in uids]:
            del self.blocked_until[uid]

    def _arriving(self) -> dict[str, Resources]:
        out = {}
        for j in list(self.jobs.values()) + list(self.finished):
            if j.replacement and j.migration.pod.usage is not None:
                out[j.replacement] = j.migration.pod.usage
        return out

    # ------------------------------------------------------------------ jobs

    async def _start(self, m: Migration, pod: PodRecord | None, pods: list[PodRecord]) -> str:
        target = self._target(m)
        if self.dry_run:
            DECISIONS.labels("dry-run").inc()
            await self._event(m.source, "would-evict", m.reason, target, dry_run=True, details=m.inputs)
            return "dry-run"
        if pod is None or pod.uid != m.pod.uid:
            return "not_found"
        opts = self.args.migration
        now = self.clock()
        job = mig.Job(m, opts.defaultJobMode, now, opts.defaultJobTTLSeconds, opts.reservationWaitSeconds)
        self.jobs[m.pod.uid] = job
        if job.mode == mig.RESERVATION_FIRST:
            # Ask the Eviction API first (dry run): a PDB that refuses now would only make the
            # reservation a wasted round trip.
            probe = await self.cluster.evict_pod(pod.namespace, pod.name, reason=m.reason, dry_run=True)
            if probe.outcome in (EvictionOutcome.BLOCKED, EvictionOutcome.NOT_FOUND):
                self.jobs.pop(m.pod.uid, None)
                retry = probe.retry_after_s if probe.outcome is EvictionOutcome.BLOCKED else None
                self.blocked_until[pod.uid] = now + (retry or self.args.migration.retryBackoffSeconds)
                DECISIONS.labels(probe.outcome.value).inc()
                await self._event(m.source, probe.outcome.value, probe.message, target)
                return probe.outcome.value
            name = rsv.reservation_name(pod)
            obj = rsv.build_reservation(pod, name, m.target, opts.defaultJobTTLSeconds, self._now_ms())
            try:
                await self.cluster.apply_custom(rsv.KIND, obj)
            except Exception as exc:  # noqa: BLE001 - any backend refusal ends the job, nothing to undo
                RESERVATIONS.labels("create-failed").inc()
                await self._finish(job, mig.FAILED, f"FailedCreateReservation: {exc}")
                return "reservation-failed"
            RESERVATIONS.labels("created").inc()
            job.phase, job.reservation = mig.RESERVING, name
            await self._event(m.source, "reservation-created", m.reason, {**target, "reservation": name},
                              details=m.inputs)
        await self._step(job, pod, pods)
        if job.evicted_s is not None:
            return "evicted"
        return job.reason.split(":")[0] if job.done else job.phase

    async def _advance(self, pods: list[PodRecord]) -> None:
        if not self.jobs:
            return
        by_key = {p.key: p for p in pods}
        # Jobs that wait for a replacement go last: a replica the scheduler put on another job's
        # reservation (any reservation of the owner suits it) is that job's, and that job must have
        # seen its reservation placed, and evicted, before the waiting one looks for its replica.
        for job in sorted(self.jobs.values(), key=lambda j: j.phase == mig.WAITING):
            await self._step(job, by_key.get(job.pod_key), pods)

    async def _observe(self, job: mig.Job, pods: list[PodRecord]) -> tuple[mig.Observation, dict | None, PodRecord | None]:
        obj = None
        phase = node = ""
        if job.reservation:
            obj = await self.cluster.get_custom(rsv.KIND, job.reservation)
            phase, node = rsv.phase_and_node(obj)
        replacement = None
        if job.phase == mig.WAITING:
            replacement = self._replacement(job, pods)
        obs = mig.Observation(
            phase, node, replacement.node_name if replacement else "",
            reservation_message=_condition_message(obj) if obj is not None else "",
            replacement=replacement.key if replacement else "",
        )
        return obs, obj, replacement

    def _replacement(self, job: mig.Job, pods: list[PodRecord]) -> PodRecord | None:
        """A new pod of the same controller, bound, that no other job claimed."""
        owner = job.owner
        if owner is None:
            return None
        claimed = {j.replacement for j in list(self.jobs.values()) + list(self.finished) if j.replacement}
        # Two jobs of one workload may wait at once: a replica on another job's reservation node is
        # that job's, and each job takes the one on its own reservation's node first.
        theirs = {
            j.reservation_node for j in self.jobs.values()
            if j is not job and j.owner == owner and j.reservation_node and j.phase == mig.WAITING
        }
        # the controller's own pods (few), the oldest first: a job steps every round, and going
        # through every pod of the cluster for each one costs more than the rest of the round
        candidates = sorted(
            (p for p in self._pods_of(owner, pods)
             if p.node_name and p.is_active and p.node_name not in theirs and p.key not in job.siblings
             and p.key not in claimed),
            key=lambda p: (p.created_ms, p.key),
        )  # fmt: skip
        on_reservation = [p for p in candidates if job.reservation_node and p.node_name == job.reservation_node]
        return (on_reservation or candidates or [None])[0]

    def _pods_of(self, controller: tuple[str, str, str] | None, pods: list[PodRecord]) -> list[PodRecord]:
        """The pods of `pods` whose controller (`_controller_key`) is `controller`; the list is
        grouped once, when a job first asks about it."""
        if self._by_controller is None or self._by_controller[0] is not pods:
            index: dict[tuple[str, str, str] | None, list[PodRecord]] = {}
            for p in pods:
                index.setdefault(_controller_key(p.namespace, p.controller), []).append(p)
            self._by_controller = (pods, index)
        return self._by_controller[1].get(controller, [])

    async def _step(self, job: mig.Job, pod: PodRecord | None, pods: list[PodRecord]) -> None:
        """Advance one job as far as it goes now."""
        for _ in range(4):  # Reserving -> Evicting -> Waiting can all happen in one call
            if job.done:
                return
            obs, obj, replacement = await self._observe(job, pods)
            decision = mig.step(job, obs, self.clock())
            action = decision.kind
            m = job.migration
            target = self._target(m)
            if action == mig.SCHEDULE_RESERVATION:
                return  # the scheduler places it (koord-scheduler, or the simulated cluster); look again later
            if action == mig.ROLLBACK:
                await self._rollback(job, decision.reason)
                return
            if action == mig.EVICT:
                if job.reservation and job.phase == mig.RESERVING:
                    job.reservation_node = obs.reservation_node
                    RESERVATIONS.labels("available").inc()
                    await self._event(m.source, "reservation-available", f"reserved on {job.reservation_node}",
                                      {**target, "reservation": job.reservation, "reservation_node": job.reservation_node})
                job.phase = mig.EVICTING
                await self._evict(job, pod, pods)
                continue
            if action in (mig.CONSUME, mig.DONE, mig.RELEASE):
                assert replacement is not None
                job.replacement = replacement.key
                if action == mig.CONSUME and obj is not None:
                    await self.cluster.apply_custom(rsv.KIND, rsv.consumed(obj, replacement, self._now_ms()))
                    RESERVATIONS.labels("consumed").inc()
                elif action == mig.RELEASE:
                    await self._delete_reservation(job)
                await self._event(m.source, "migrated", decision.reason,
                                  {**target, "replacement": replacement.key, "replacement_node": replacement.node_name})
                await self._finish(job, mig.SUCCEEDED, decision.reason)
                return
            if action == mig.TIMEOUT:
                await self._delete_reservation(job)
                await self._event(m.source, "timeout", "no replacement bound before the job's TTL", target)
                await self._finish(job, mig.FAILED, decision.reason)
                return
            return

    async def _evict(self, job: mig.Job, pod: PodRecord | None, pods: list[PodRecord]) -> None:
        m = job.migration
        target = self._target(m)
        if pod is None or pod.uid != m.pod.uid:
            await self._delete_reservation(job)
            await self._finish(job, mig.FAILED, "MissingPod")
            return
        wait = self.bucket.reserve(self.rate_clock())
        if wait > 0:
            await self.sleep(wait)
        owner = _controller_key(pod.namespace, pod.controller)
        siblings = frozenset(p.key for p in self._pods_of(owner, pods))
        for other in self.jobs.values():
            # a replica that came after another waiting job of this controller was evicted is that
            # job's replacement (or this one's, if it sits on this job's reservation), not a sibling
            if other is not job and other.owner == owner and other.phase == mig.WAITING:
                siblings &= other.siblings
        result = await self.cluster.evict_pod(pod.namespace, pod.name, reason=m.reason)
        outcome = result.outcome
        DECISIONS.labels(outcome.value).inc()
        if outcome is EvictionOutcome.EVICTED:
            job.owner = owner
            job.siblings = siblings
            job.evicted_s = self.clock()
            job.phase = mig.WAITING
            self.departed[pod.uid] = self.clock()
            self.object_limiters.track(m.pod.workload, m.pod.namespace,
                                       replicas_by_workload(pods).get(m.pod.workload), self.clock())
            await self._event(m.source, "evicted", m.reason, target, details=m.inputs)
            return
        if outcome is EvictionOutcome.BLOCKED:
            # A PodDisruptionBudget said no: leave the pod alone until the server's retry is due.
            self.blocked_until[pod.uid] = self.clock() + (result.retry_after_s or 60.0)
        await self._event(m.source, outcome.value, result.message, target)
        await self._rollback(
            job, f"FailedEvict ({outcome.value}): {result.message}", event=False,
            backoff=outcome is not EvictionOutcome.BLOCKED,
        )

    async def _rollback(self, job: mig.Job, reason: str, event: bool = True, backoff: bool = True) -> None:
        await self._delete_reservation(job)
        if backoff:  # a pod whose move failed is not planned again at once
            self.blocked_until[job.migration.pod.uid] = self.clock() + self.args.migration.retryBackoffSeconds
        if event:
            await self._event(job.migration.source, "rollback", reason,
                              {**self._target(job.migration), "reservation": job.reservation})
        await self._finish(job, mig.FAILED, reason)

    async def _delete_reservation(self, job: mig.Job) -> None:
        if not job.reservation:
            return
        try:
            await self.cluster.delete_custom(rsv.KIND, job.reservation)
            RESERVATIONS.labels("deleted").inc()
        except Exception:  # a reservation left behind expires by its ttl
            log.exception("could not delete reservation", extra={"reservation": job.reservation})

    async def _finish(self, job: mig.Job, phase: str, reason: str) -> None:
        job.end(phase, reason, self.clock())
        self.jobs.pop(job.migration.pod.uid, None)
        self.finished.append(job)
        code = "Complete" if phase == mig.SUCCEEDED else reason.split(":")[0].split(" (")[0]
        JOBS.labels(job.mode, phase, code).inc()

    @staticmethod
    def _target(m: Migration) -> dict[str, Any]:
        return {"namespace": m.pod.namespace, "name": m.pod.name, "uid": m.pod.uid, "target_node": m.target,
                "workload": m.pod.workload}

    async def _event(self, node: str, action: str, reason: str, target: dict, dry_run: bool = False,
                     details: dict | None = None) -> None:  # fmt: skip
        if self.bus is None:
            return
        ev = self.bus.stamp(Event(kind=subjects.EVENT_DESCHEDULE, node=node, action=action, reason=reason,
                                  dry_run=dry_run, target=target, details=details or {}))  # fmt: skip
        try:
            await self.bus.publish(subjects.event(subjects.EVENT_DESCHEDULE, node), ev)
        except Exception:  # an event that cannot be published must not stop the round
            log.exception("could not publish descheduling event")


def _controller_key(namespace: str, owner) -> tuple[str, str, str] | None:
    """The controller that recreates an evicted pod, by uid: not the workload (workload_of).

    A replacement comes from the very ReplicaSet (Job, StatefulSet) the evicted pod belonged to,
    and that controller is what the Reservation names as its owner, so only its pods consume it.
    The workload identity is coarser on purpose: during a Deployment rollout a pod of the new
    ReplicaSet is not this pod's replacement, and a controller deleted and recreated under the
    same name is another controller. The name stands in only when the owner reference has no uid.
    """
    if owner is None:
        return None
    return (namespace, owner.kind, owner.uid or owner.name)


def _condition_message(obj: dict) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("status") == "False" and c.get("message"):
            return str(c["message"])
    return ""
