"""The one place a QoS plan is carried out: cgroup writes and evictions, each change an Event.

Cgroup writes are idempotent (only a changed value is written) and confined to the cgroup
root. Evictions go through the cluster port, each pod once, not again while its eviction is
pending, at most `rate` a second overall (one token bucket shared by every node the agent
drives); a requested eviction restarts the cool-down clock it names. With dry_run nothing is
written or evicted, and the events say what would have been.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from koordcommon import subjects
from koordcommon.schemas import Event
from prometheus_client import Counter

from ..collect.cgroups import CgroupPathError
from .files import UnsupportedFile
from .model import Action, CgroupWrite, Eviction
from .round import QoSMemory

log = logging.getLogger(__name__)

WRITES = Counter("koord_agent_qos_writes_total", "cgroup writes by outcome", ["strategy", "outcome"])
EVICTIONS = Counter("koord_agent_evictions_total", "Evictions requested by the node QoS manager",
                    ["strategy", "outcome"])


@functools.cache
def _counted(strategy: str, outcome: str):
    """The WRITES child of (strategy, outcome), looked up once: a round counts every planned write."""
    return WRITES.labels(strategy, outcome)


class TokenBucket:
    """`rate_per_s` tokens a second, at most `burst` saved. `clock` gives seconds: the wall clock
    by default (in the agent the rate protects the API server, whatever the simulated speed);
    a replay on simulated time passes its own clock."""

    def __init__(self, rate_per_s: float, burst: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate_per_s, burst, clock
        self.tokens = float(burst)
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class Executor:
    """Carries out the plans of one node: its cgroup files, and evictions through `cluster`
    (none: evictions are only reported, as in dry-run) within `limiter` (none: unlimited)."""

    def __init__(self, files, node: str, dry_run: bool = False, cluster=None, limiter: TokenBucket | None = None
                 ) -> None:
        self.files = files
        self.node = node
        self.dry_run = dry_run
        self.cluster = cluster
        self.limiter = limiter
        self.unsupported: set[str] = set()

    async def apply(self, plan: list[Action], memory: QoSMemory, now_ms: int) -> list[Event]:
        """The whole plan: its cgroup writes in order, then its evictions; the events of both."""
        events = self.write([a for a in plan if isinstance(a, CgroupWrite)], now_ms)
        return events + await self.evict([a for a in plan if isinstance(a, Eviction)], memory, now_ms)

    async def evict(self, evictions: list[Eviction], memory: QoSMemory, now_ms: int) -> list[Event]:
        """Evictions in order; a requested one (or, in dry-run, a reported one) marks its pod
        pending and restarts its cool-down clock in `memory`."""
        events: list[Event] = []
        seen: set[str] = set()
        for ev in evictions:
            if ev.uid in seen or ev.uid in memory.pending:
                continue  # a pod two strategies picked is evicted once, and not again while it leaves
            seen.add(ev.uid)
            if self.limiter is not None and not self.limiter.take():
                EVICTIONS.labels(ev.strategy, "rate_limited").inc()
                continue
            outcome, message = "dry_run", ""
            if not self.dry_run and self.cluster is not None:
                result = await self.cluster.evict_pod(ev.namespace, ev.name, reason=ev.reason)
                outcome, message = result.outcome.value, result.message
            EVICTIONS.labels(ev.strategy, outcome).inc()
            if outcome in ("evicted", "dry_run"):
                memory.evicted(ev, now_ms)
            events.append(Event(
                ts=now_ms,
                kind=subjects.EVENT_EVICT,
                node=self.node,
                action="evict",
                reason=ev.reason,
                dry_run=self.dry_run,
                target={"namespace": ev.namespace, "name": ev.name, "uid": ev.uid},
                details={"strategy": ev.strategy, "feature": ev.feature, "outcome": outcome, "message": message,
                         "release": ev.release.to_list(), "inputs": ev.inputs},
            ))
        return events

    def write(self, writes: list[CgroupWrite], now_ms: int | None = None) -> list[Event]:
        """Cgroup writes in order; a write the kernel refused is tried once more after the rest."""
        events: list[Event] = []
        refused: list[CgroupWrite] = []
        tally: dict[tuple[str, str], int] = {}  # (strategy, outcome) -> writes, counted once a round
        stamp = {} if now_ms is None else {"ts": now_ms}  # the events carry the round's time
        for w in writes:
            if not self._one(w, events, False, tally, stamp, self._attempt(w)):
                refused.append(w)
        for w in refused:  # an ordering the kernel refused (child wider than parent) settles now
            self._one(w, events, True, tally, stamp, self._attempt(w))
        for (strategy, outcome), n in tally.items():
            _counted(strategy, outcome).inc(n)
        return events

    def _attempt(self, w: CgroupWrite) -> tuple[str, str] | None | Exception:
        """Write `w` (in dry-run, compare it with the file): (old, new) when it changes the file,
        None when the file holds it already, or what the write raised."""
        try:
            if self.dry_run:
                current = self.files.read(w.rel, w.resource)
                return None if current == str(w.value) else (current or "", str(w.value))
            return self.files.write(w.rel, w.resource, w.value)
        except (CgroupPathError, UnsupportedFile, OSError) as exc:
            return exc

    def _one(self, w: CgroupWrite, events: list[Event], retry: bool, tally: dict[tuple[str, str], int],
             stamp: dict, attempt: tuple[str, str] | None | Exception) -> bool:
        """One write's outcome (`attempt`: what `_attempt` gave) tallied and its change an event.
        False: the kernel refused it, to be tried again after the rest."""
        if isinstance(attempt, CgroupPathError):
            outcome = "refused"  # and logged once, where it was refused (collect.cgroups.refused)
        elif isinstance(attempt, UnsupportedFile):
            outcome = "unsupported"
            if w.resource not in self.unsupported:
                self.unsupported.add(w.resource)
                log.warning("cgroup file not supported by this kernel; skipped",
                            extra={"file": w.resource, "strategy": w.strategy})
                events.append(Event(kind=subjects.EVENT_QOS, node=self.node, action="unsupported", reason=w.resource,
                                    target={"path": w.rel, "file": w.resource}, details={"strategy": w.strategy},
                                    **stamp))  # fmt: skip
        elif isinstance(attempt, OSError):
            if not retry:
                return False
            outcome = "error"
            log.warning("cgroup write failed", extra={"dir": w.rel, "file": w.resource, "error": str(attempt)})
        elif attempt is None:
            outcome = "unchanged"
        else:
            outcome = "dry_run" if self.dry_run else "written"
            old, new = attempt
            events.append(
                Event(
                    kind=subjects.EVENT_QOS,
                    node=self.node,
                    action=w.strategy,
                    reason=f"{w.resource} {old} -> {new}",
                    dry_run=self.dry_run,
                    target={"path": w.rel, "file": w.resource, "level": w.level},
                    details={"old": old, "new": new, "value": w.value, **({"inputs": w.inputs} if w.inputs else {})},
                    **stamp,
                )
            )
        key = (w.strategy, outcome)
        tally[key] = tally.get(key, 0) + 1
        return True
