"""The batch jobs' controllers, for a simulated cluster: submit, finish, resubmit.

What a Job controller and the batch framework behind it do to the cluster's batch pods:
* submit each arrival of the Alibaba 2017 batch stream (`batch.batch_arrivals`) as a pending pod;
* finish a pod when it has run for its traced duration, lengthened by the time CPU suppress
  held it back (Succeeded, then deleted): a task's traced duration is its run time at the CPU
  it asks for, so a minute in which it was granted a share s of what it asked advances it by
  s of a minute (`ran`);
* submit a pod again when it vanished without finishing (evicted by CPU suppress's
  satisfaction eviction, memory eviction or the descheduler): a new pod of the same job, with
  the whole duration to run again (the work of the evicted attempt is lost).

With `batch_max_pending` the framework keeps at most that many pods pending in the cluster and
holds the rest in its own queue (first in, first out); a held pod's queueing counts from when
it entered that queue.

Every attempt of every pod is remembered (`PodLife`), with when its work arrived, when the
attempt was queued, started and ended, the CPU it ran and how it ended, so that a replay can
report queueing delays, completed work and eviction loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import deque
from dataclasses import dataclass

from . import batch
from .genesis import pod_uid
from .spec import SimSpec
from .state import MutationError

COMPLETED, EVICTED, RUNNING, PENDING = "completed", "evicted", "running", "pending"
ATTEMPT_SEP = "#"  # pod key of an attempt: <first pod's key>#<attempt>; the pod's name carries -r<attempt>


@dataclass
class PodLife:
    key: str  # first pod's key, then #<attempt> for resubmissions
    arrival_ms: int  # when its work was first submitted
    queued_ms: int  # when this attempt entered the queue
    request_cpu: int  # batch-cpu, milli-cores
    started_ms: int | None = None
    ended_ms: int | None = None
    outcome: str = PENDING
    cpu_ms: float = 0.0  # milli-core milliseconds it ran
    held_ms: float = 0.0  # run time lost to CPU suppress: it ends that much after its traced duration


class BatchDriver:
    def __init__(self, cluster, spec: SimSpec) -> None:
        self.cluster = cluster
        self.spec = spec.resolved(wall_ms=spec.start_ms or 0)
        self.last_ms = self.spec.start_ms or 0
        self._lives: dict[str, PodLife] = {}  # pod key in the cluster -> its life
        self._waiting: set[str] = set()  # keys of the lives not bound yet
        self._done: list[PodLife] = []
        self._templates: dict[str, object] = {}  # pod key -> the PodRecord submitted
        self._held: deque[tuple[object, PodLife]] = deque()  # the framework's own queue

    # ------------------------------------------------------------------ one step

    async def step(self, now_ms: int) -> None:
        """Finish, resubmit and submit everything due at `now_ms`. Only the pods bound to a node
        are looked at (a long queue of pending pods costs nothing until they start)."""
        pods = self.cluster.state.pods
        for key in [k for k in self._lives if k not in self._waiting]:
            life = self._lives[key]
            pod = pods.get(key)
            if pod is None:  # gone without us finishing it: evicted
                self._end(key, EVICTED, now_ms)
                await self._resubmit(key, life, now_ms)
            elif batch.finished(pod, now_ms - life.held_ms):
                self._end(key, COMPLETED, now_ms)
                with contextlib.suppress(MutationError):
                    await self.cluster.set_pod_phase(pod.namespace, pod.name, "Succeeded")
                    await self.cluster.delete_pod(pod.namespace, pod.name)
        for pod in batch.batch_arrivals(self.spec, self.last_ms, now_ms):
            self._offer(pod, PodLife(pod.key, pod.created_ms or now_ms, now_ms, pod.batch_requests().cpu_milli))
        await self._release(now_ms)
        self.last_ms = now_ms

    def _offer(self, pod, life: PodLife) -> None:
        """Into the framework's queue: submitted in order as room among the pending pods allows."""
        self._held.append((pod, life))

    async def _release(self, now_ms: int) -> None:
        cap = self.spec.batch_max_pending
        while self._held and (not cap or len(self._waiting) < cap):
            pod, life = self._held.popleft()
            await self._submit(pod, life, now_ms)

    def started(self, key: str, start_ms: int) -> None:
        """A waiting pod was bound (the scheduler says so, or `sync_started` finds it)."""
        life = self._lives.get(key)
        if life is not None and key in self._waiting:
            self._waiting.discard(key)
            life.started_ms, life.outcome = start_ms, RUNNING

    def sync_started(self, now_ms: int) -> None:
        """Mark the waiting pods the cluster shows bound."""
        pods = self.cluster.state.pods
        for key in [k for k in self._waiting if (p := pods.get(k)) is not None and p.node_name]:
            self.started(key, pods[key].start_ms or now_ms)

    async def _submit(self, pod, life: PodLife, now_ms: int) -> None:
        if pod.key in self.cluster.state.pods:
            return
        try:
            created = await self.cluster.create_pod(pod)
        except MutationError:
            return
        self._lives[created.key] = life
        self._waiting.add(created.key)
        self._templates[created.key] = pod

    async def _resubmit(self, key: str, life: PodLife, now_ms: int) -> None:
        template = self._templates.pop(key, None)
        if template is None:
            return
        root, _, attempt = life.key.partition(ATTEMPT_SEP)
        n = int(attempt or 0) + 1
        base = template.name.rsplit("-r", 1)[0] if attempt else template.name
        name = f"{base}-r{n}"
        # a seeded uid, as the first attempt's (batch._pod): a pod's usage noise is seeded by its
        # uid, so a random one would make two runs of the same replay differ
        again = dataclasses.replace(template, name=name, uid=pod_uid(self.spec.seed, template.namespace, name),
                                    node_name=None, phase="Pending", start_ms=None, created_ms=now_ms,
                                    resource_version="")
        self._offer(again, PodLife(f"{root}{ATTEMPT_SEP}{n}", life.arrival_ms, now_ms, life.request_cpu))

    def _end(self, key: str, outcome: str, now_ms: int) -> None:
        life = self._lives.pop(key)
        self._waiting.discard(key)
        life.outcome, life.ended_ms = outcome, now_ms
        self._done.append(life)
        if outcome == COMPLETED:
            self._templates.pop(key, None)

    # ------------------------------------------------------------------ what a replay reads

    def uids_running(self) -> dict[str, str]:
        """uid -> pod key, for the batch pods bound to a node now."""
        pods = self.cluster.state.pods
        return {p.uid: key for key in self._lives if key not in self._waiting and (p := pods.get(key)) is not None}

    def ran(self, key: str, cpu_ms: float, held_ms: float = 0.0) -> None:
        """A running pod ran `cpu_ms` milli-core ms in a tick, of which CPU suppress withheld
        `held_ms` of run time (the tick's length x the share of what it asked that it was denied)."""
        life = self._lives.get(key)
        if life is not None:
            life.cpu_ms += cpu_ms
            life.held_ms += held_ms

    def lives(self, now_ms: int) -> dict[str, PodLife]:
        """Every attempt so far, those still in the cluster as running or pending."""
        out = {life.key: life for life in self._done}
        for life in self._lives.values():
            out[life.key] = life
        for _, life in self._held:
            out[life.key] = life
        return out

    @property
    def held(self) -> int:
        """Pods in the framework's own queue, not yet in the cluster."""
        return len(self._held)

    def assumptions(self) -> list[str]:
        return batch.assumptions(self.spec)
