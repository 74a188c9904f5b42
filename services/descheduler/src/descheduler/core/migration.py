"""Migration jobs carried across rounds (Koordinator's PodMigrationJob, reduced to what the
descheduler needs), the eviction rate limiter and the objectLimiters.

A job moves one pod. EvictDirectly: evict, then wait for the replacement. ReservationFirst:
reserve room on the target, wait until the reservation is Available, evict, then wait until
the replacement is bound on the reservation's node. Before the eviction every failure rolls
back cleanly (the reservation is deleted, the pod stays); after it the job only ends.
`step` is pure: the adapter observes the cluster, asks what to do and why, and does it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from koordcommon import reservations

from .config import MigrationLimits, scaled_limit
from .lownodeload import LimitCounter, Migration

RESERVATION_FIRST = "ReservationFirst"
EVICT_DIRECTLY = "EvictDirectly"

# phases
RESERVING = "Reserving"  # reservation created, not Available yet
EVICTING = "Evicting"  # ready to evict (waits for a rate-limit token)
WAITING = "WaitingReplacement"  # evicted, the replacement is not bound yet
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL = (SUCCEEDED, FAILED)

# kinds of action returned by `step`
WAIT = "wait"
SCHEDULE_RESERVATION = "schedule-reservation"
EVICT = "evict"
ROLLBACK = "rollback"  # delete the reservation, do not evict
CONSUME = "consume"  # the replacement is bound on the reservation's node
DONE = "done"  # the replacement is bound (no reservation to consume)
RELEASE = "release"  # the replacement went elsewhere: delete the unused reservation
TIMEOUT = "timeout"

# Why a reservation that ended is of no use to the job; the job's reason starts with this code.
_RESERVATION_ENDED = {reservations.FAILED: "Unschedulable", reservations.SUCCEEDED: "ReservationConsumedByOther"}


@dataclass(frozen=True)
class Action:
    """What the adapter does next for a job, and why (the job's reason when the action ends it)."""

    kind: str
    reason: str = ""


@dataclass
class Job:
    migration: Migration
    mode: str
    started_s: float
    ttl_s: float
    reservation_wait_s: float
    phase: str = EVICTING
    reservation: str = ""  # Reservation name (ReservationFirst)
    reservation_node: str = ""
    evicted_s: float | None = None
    owner: tuple[str, str, str] | None = None  # (namespace, kind, uid or name) of the pod's controller
    siblings: frozenset[str] = frozenset()  # pods of that controller at eviction time
    replacement: str = ""
    reason: str = ""
    ended_s: float | None = None

    @property
    def pod_key(self) -> str:
        return self.migration.pod.key

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL

    def end(self, phase: str, reason: str, now_s: float) -> None:
        self.phase, self.reason, self.ended_s = phase, reason, now_s


@dataclass(frozen=True)
class Observation:
    """What the adapter saw in the cluster for one job."""

    reservation_phase: str = ""  # "" when the reservation does not exist (or there is none)
    reservation_node: str = ""
    replacement_node: str = ""  # a new pod of the workload bound to this node ("" none yet)
    reservation_message: str = ""  # the message of the reservation's first False condition
    replacement: str = ""  # that new pod's key


def step(job: Job, obs: Observation, now_s: float) -> Action:
    """The next action for a job that is not finished, with its reason."""
    if job.phase == RESERVING:
        if obs.reservation_phase == reservations.AVAILABLE and obs.reservation_node:
            return Action(EVICT)
        if obs.reservation_phase == "":
            return _rollback("MissingReservation", obs)  # deleted under us
        if obs.reservation_phase in _RESERVATION_ENDED:  # unschedulable, expired, or consumed by another pod
            return _rollback(_RESERVATION_ENDED[obs.reservation_phase], obs)
        if now_s - job.started_s >= min(job.reservation_wait_s, job.ttl_s):
            return _rollback("ReservationTimeout" if obs.reservation_phase == reservations.PENDING else "Timeout", obs)
        return Action(SCHEDULE_RESERVATION)
    if job.phase == EVICTING:
        if now_s - job.started_s >= job.ttl_s:
            return _rollback(_RESERVATION_ENDED.get(obs.reservation_phase, "Timeout"), obs)
        return Action(EVICT)
    if job.phase == WAITING:
        if obs.replacement_node:
            bound = f"replacement {obs.replacement} bound on {obs.replacement_node}"
            if job.reservation and obs.replacement_node == job.reservation_node:
                return Action(CONSUME, bound)
            return Action(RELEASE if job.reservation else DONE, bound)
        if now_s - job.started_s >= job.ttl_s:
            return Action(TIMEOUT, "Timeout")
        return Action(WAIT)
    return Action(WAIT)


def _rollback(code: str, obs: Observation) -> Action:
    """A rollback's reason: its code, then what the reservation's status says, if anything."""
    return Action(ROLLBACK, f"{code}: {obs.reservation_message}" if obs.reservation_message else code)


def in_flight(jobs: list[Job]) -> LimitCounter:
    """The limits' view of the jobs still running: each counts on its source node, namespace
    and workload until it ends."""
    counter = LimitCounter()
    for j in jobs:
        if not j.done:
            p = j.migration.pod
            counter.add(j.migration.source, p.namespace, p.workload, planned=False)
    return counter


@dataclass
class TokenBucket:
    """evictQPS with evictBurst (client-go's token bucket): `reserve` takes one token and says
    how long to wait for it. qps <= 0 means no limit."""

    qps: float
    burst: int = 1
    tokens: float = field(default=-1.0)
    last_s: float | None = None

    def reserve(self, now_s: float) -> float:
        if self.qps <= 0:
            return 0.0
        if self.last_s is None:
            self.tokens, self.last_s = float(self.burst), now_s
        self.tokens = min(float(self.burst), self.tokens + (now_s - self.last_s) * self.qps)
        self.last_s = now_s
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.qps


@dataclass
class _Limiter:
    rate: float  # tokens a second
    burst: int
    tokens: float
    last_s: float

    def tokens_at(self, now_s: float) -> float:
        return min(float(self.burst), self.tokens + (now_s - self.last_s) * self.rate)


@dataclass
class ObjectLimiters:
    """The MigrationController's objectLimiters: per workload (or namespace), a token bucket of
    maxMigrating evictions per duration with `burst` tokens (golang.org/x/time/rate). An eviction
    takes a token when one is there (`track`); a migration is planned only while its objects have
    one (`tokens`). A limiter no eviction touched for its duration is forgotten, full again."""

    limits: MigrationLimits
    limiters: dict[str, _Limiter] = field(default_factory=dict)  # "workload/<w>" -> its bucket

    def track(self, workload: str, namespace: str, replicas: int | None, now_s: float) -> None:
        for kind, conf in self.limits.objectLimiters.items():
            if conf.durationSeconds <= 0:
                continue
            if kind == "namespace":
                max_migrating = conf.maxMigrating if isinstance(conf.maxMigrating, int) else 0
            else:
                limit = conf.maxMigrating if conf.maxMigrating is not None else self.limits.maxMigratingPerWorkload
                max_migrating = scaled_limit(limit, replicas) or 0
            if max_migrating <= 0:
                continue
            key = f"{kind}/{workload if kind == 'workload' else namespace}"
            rate, burst = max_migrating / conf.durationSeconds, conf.burst or 1
            lim = self.limiters.get(key)
            if lim is None:
                lim = self.limiters[key] = _Limiter(rate, burst, float(burst), now_s)
            lim.tokens, lim.last_s, lim.rate = lim.tokens_at(now_s), now_s, rate
            if lim.tokens >= 1.0:
                lim.tokens -= 1.0

    def tokens(self, now_s: float) -> dict[str, float]:
        for key in list(self.limiters):
            kind = key.split("/", 1)[0]
            conf = self.limits.objectLimiters.get(kind)
            if conf is None or now_s - self.limiters[key].last_s > conf.durationSeconds:
                del self.limiters[key]
        return {key: lim.tokens_at(now_s) for key, lim in self.limiters.items()}
