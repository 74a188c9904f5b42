"""The fast replay: the services' own code, in one process, on one simulated clock, no sleeps.

Each service is the class its process runs, built without a bus, fed what the bus would carry:

* the cluster is the simulated cluster (koordsim, local mode) on a clock the replay moves;
* the node agent is its sim mode (`SimAgent`, one agent for every node) with its QoS manager:
  each tick it measures what the pods ask for, runs CPU suppress, BE CPU eviction and memory
  eviction on simulated cgroups, records what ran and reports a NodeMetric;
* the slo-controller (`SLOController`) gets each NodeMetric, computes batch/mid allocatable
  and writes node status by its diff and update-time rules; its ConfigMap builds every node's
  NodeSLO;
* kube-scheduler is koordsim's (`ExtenderScheduler`), reaching the scheduler-extender's own verb
  handlers in-process (the same request and reply bytes as over HTTP), whose state is fed by the
  cluster watch, the NodeMetrics and the NodeResources as the service's feeds do;
* the descheduler (`Descheduler`) runs a LowNodeLoad round every `descheduler_interval_s`
  (several a tick when it is shorter than the tick);
* the batch work is koordsim's batch driver: Alibaba 2017 tasks arriving, finishing after
  their traced duration, and resubmitted when evicted.

One tick is the NodeMetric interval (60 s by default) and stands for the minute that ends at it:
the agent's round measures what ran in that minute (QoS holding BestEffort back), its NodeMetrics
go to the controller, the extender and the descheduler; then the batch jobs move on (pods done
finish, new work arrives), kube-scheduler places what is pending and the descheduler runs. A pod
placed at one tick therefore runs from the next minute on, and is measured for every minute it
ran, however short (the trace's shortest tasks run one). Between steps the replay waits for
the cluster's watchers (`SimCluster.settle`), so every service has seen each change before the
next step. `real.py` runs the same as processes over NATS.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from koordcommon.records import NodeRecord
from koordcommon.schemas import NodeMetric, NodeResource, NodeSLO
from koordsim import jobs
from koordsim.cluster import SimCluster
from koordsim.scheduler import ExtenderScheduler
from koordsim.spec import SimClock, SimSpec

from .config import ConfigError, WhatIfConfig
from .ledger import Ledger
from .observation import NodeTick, ledger_row

Progress = Callable[[int, int], None]  # (ticks done, ticks in all)
BIND_VERB = "bind"  # kube-scheduler's bindVerb for the extender, when its settings serve one (bind_verb)


class ManualClock:
    """Simulated epoch ms that only the replay moves (the SimClock's wall reads it)."""

    def __init__(self, start_ms: int) -> None:
        self.ms = int(start_ms)

    def now_ms(self) -> int:
        return self.ms

    def now_s(self) -> float:
        return self.ms / 1000

    def sim_clock(self) -> SimClock:
        return SimClock(self.ms, 1.0, self.ms, wall=self.now_s)


async def _no_wait(_s: float) -> None:
    """The descheduler's rate-limit wait in a replay: its evictions in one round spread over
    well under a second of simulated time, far below one tick, so they are not delayed."""


@dataclass
class RunResult:
    config: WhatIfConfig
    ledger: Ledger
    wall_s: float
    assumptions: list[str]

    def summary(self) -> dict:
        return self.ledger.summary(baseline=not self.config.colocation)


def service_assumptions(cfg: WhatIfConfig, tick_s: int) -> list[str]:
    """What the replay's timing and cast make of the services, for the report (both modes)."""
    out = [
        (f"one tick is {tick_s} s of simulated time: each node agent measures its node, runs QoS (CPU suppress, "
         "BE CPU and memory eviction, the reconcilers) and reports once a tick, where a deployed agent collects "
         "every second and runs QoS after each collection; usage within a tick is the trace's value for it"),
        "kube-scheduler places the pending pods once a tick, after that tick's batch arrivals and completions",
    ]
    if cfg.descheduler is not None:
        per_tick = max(1, math.ceil(tick_s / cfg.descheduler_interval_s))
        out.append(f"the descheduler runs a LowNodeLoad round every {cfg.descheduler_interval_s:g} s"
                   + (f" ({per_tick} a tick, on that tick's NodeMetrics)" if per_tick > 1 else ""))
    # what the slo-controller accepts without effect, as it logs it: the replay applies nothing for it either
    out += [f"{cfg.name}: {w}" for w in cfg.slo_config()[1]]
    if cfg.colocation and cfg.extender_settings().use_profiles:
        out.append("no recommender runs in the replay: the scheduler-extender estimates every pod's load from its "
                   "requests and estimated_scaling_factors (use_profiles finds no workload profile)")
    return out


class Replay:
    def __init__(self, spec: SimSpec, cfg: WhatIfConfig, duration_s: int, tick_s: int = 60,
                 progress: Progress | None = None) -> None:
        if tick_s < 1 or duration_s < tick_s:
            raise ConfigError(f"duration {duration_s} s and tick {tick_s} s: at least one tick of at least 1 s")
        cfg.check()  # a configuration a service would refuse fails here, named
        self.spec = spec.resolved(wall_ms=spec.start_ms or 0)
        self.cfg = cfg
        self.tick_s = tick_s
        self.ticks = duration_s // tick_s
        self.progress = progress
        self.clock = ManualClock(self.spec.start_ms or 0)

    # ------------------------------------------------------------------ wiring

    async def _build(self) -> None:
        from descheduler.loop import Descheduler
        from node_agent.qos.executor import TokenBucket
        from node_agent.qos.manager import QoSManager
        from node_agent.settings import AgentSettings
        from node_agent.sim_mode import SimAgent
        from scheduler_extender import api, feeds
        from scheduler_extender.core.state import ClusterState
        from slo_controller.controller import SLOController
        from slo_controller.core.configmap import ConfigState

        clock = self.clock
        self.cluster = SimCluster(self.spec, clock=clock.sim_clock())
        await self.cluster.start()
        tick = float(self.tick_s)
        settings = AgentSettings(
            mode="sim", collect_interval_s=tick, report_interval_s=tick, nodemetric_interval_s=60.0,
            qos_enabled=True, qos_dry_run=False, evict_rate_per_s=1.0,
        )  # fmt: skip
        self.agent = SimAgent(self.cluster, settings, publish=self._ignore, samples=False)
        self.qos = QoSManager(
            self.agent, None, settings, self.cluster, simulated=True,
            limiter_of=lambda node: TokenBucket(settings.evict_rate_per_s, burst=1, clock=clock.now_s),
        )  # fmt: skip
        self.agent.on_round.insert(0, self._remember_asked)
        self.agent.on_round.append(self.qos.on_round)
        self.qos.on_events.append(self._count_qos_events)

        self.slo = SLOController(self.cluster, None, ConfigState(), clock=clock.now_ms, resync_s=0,
                                 publish_nodeslo=False)
        result = await self.slo.apply_config(self.cfg.slo_configmap())
        if result.errors:
            raise ConfigError(f"{self.cfg.name}: slo-controller-config rejected: {result.errors}")
        await self.slo.start()
        builder = self.slo.config.current.nodeslo_builder()
        self.nodes: list[NodeRecord] = sorted(await self.cluster.list_nodes(), key=lambda n: n.name)
        self.suppress_pct = np.full(len(self.nodes), math.nan)
        for i, n in enumerate(self.nodes):
            spec = builder.spec_for(n.labels)
            self.qos.set_slo(NodeSLO(node=n.name, spec=spec))
            t = spec.resourceUsedThresholdWithBE
            if t.enable:
                self.suppress_pct[i] = t.cpuSuppressThresholdPercent

        ext = self.cfg.extender_settings()
        self.extender = ClusterState(ext.extender_config(), clock=clock.now_ms)
        self._feeds = asyncio.create_task(feeds.follow_cluster(self.cluster, self.extender, feeds.FeedStatus()))
        front = api.create_app(self.extender, ext.url_prefix)
        prefix = ext.url_prefix.rstrip("/")

        async def transport(verb: str, body: bytes) -> tuple[int, bytes]:
            if verb == BIND_VERB:
                return await api.handle_bind(self.extender, self.cluster, body)
            return front.routes[f"{prefix}/{verb}"](body)

        self.scheduler = ExtenderScheduler(self.cluster, "", transport=transport, skip_dominated=True,
                                           bind_verb=BIND_VERB if ext.bind_verb else "")
        args = self.cfg.descheduler_args()
        self.descheduler = None
        if args is not None:
            args.run_every(self.cfg.descheduler_interval_s)  # as the service does with its interval
            self.descheduler = Descheduler(args, self.cluster, None, clock=clock.now_s, rate_clock=clock.now_s,
                                           sleep=_no_wait)
        self.jobs = jobs.BatchDriver(self.cluster, self.spec) if self.cfg.colocation else None
        self._asked: dict[str, dict[str, float]] = {}
        await self.cluster.settle()
        self.ledger = Ledger(
            nodes=[n.name for n in self.nodes], tick_s=self.tick_s, start_ms=clock.ms,
            capacity_cpu=np.array([n.capacity.get("cpu", 0) for n in self.nodes], dtype=np.float64),
            capacity_mem=np.array([n.capacity.get("memory", 0) for n in self.nodes], dtype=np.float64),
        )  # fmt: skip

    async def _close(self) -> None:
        self._feeds.cancel()
        await asyncio.gather(self._feeds, return_exceptions=True)
        await self.slo.close()
        await self.scheduler.aclose()
        await self.cluster.close()

    @staticmethod
    async def _ignore(_items) -> None:
        """The agent publishes nothing itself: the replay hands its NodeMetrics on."""

    async def _remember_asked(self, t_ms: int, rounds) -> None:
        """Before QoS acts: what each pod asked for this round (suppress then grants less)."""
        self._asked = {node: {uid: cpu for uid, (cpu, _) in r.pods.items()} for node, r in rounds.items()}

    def _count_qos_events(self, t_ms: int, events) -> None:
        for _, e in events:
            if e.kind == "evict" and (e.details or {}).get("outcome") == "evicted":
                self.ledger.evictions[f"qos:{(e.details or {}).get('strategy', '?')}"] += 1

    # ------------------------------------------------------------------ one tick

    async def _tick(self, t_ms: int) -> None:
        """The minute that ends at t_ms: what ran in it is measured (and held back by QoS) first,
        then the batch jobs move on (pods done by t_ms finish, arrivals come), then kube-scheduler
        and the descheduler act on the cluster as it then stands."""
        self.clock.ms = t_ms
        cluster = self.cluster
        await self.agent.refresh()
        # which pods are batch work: taken before QoS acts (a pod it evicts this minute ran in it)
        batch_uids = self.jobs.uids_running() if self.jobs is not None else {}
        messages = await self.agent.step(t_ms)
        await cluster.settle()
        for _, msg in messages:
            if isinstance(msg, NodeMetric):
                await self._node_metric(msg, t_ms)
        await cluster.settle()
        self._observe(t_ms, batch_uids)
        if self.jobs is not None:
            await self.jobs.step(t_ms)
            await cluster.settle()
            for res in await self.scheduler.schedule_pending():
                if res.node is not None:
                    self.jobs.started(f"{res.namespace}/{res.name}", t_ms)
                elif not res.error:
                    self.ledger.unschedulable(res.reasons)
            await cluster.settle()
        if self.descheduler is not None:
            for at in self._descheduler_rounds(t_ms):
                self.clock.ms = at
                report = await self.descheduler.run_round(at)
                self.ledger.evictions["descheduler"] += sum(1 for v in report.outcomes.values() if v == "evicted")
                await cluster.settle()

    def _descheduler_rounds(self, t_ms: int) -> range:
        """The descheduler's rounds in this tick's minute [t, t + tick): the multiples of its
        interval. A round shorter than the tick (Koordinator ships 10 s) runs several times on
        the minute's NodeMetrics, as it does against NodeMetrics reported once a minute, each at
        its own time, so the anomaly condition counts them as the service does."""
        step = int(self.cfg.descheduler_interval_s * 1000)
        first = -(-t_ms // step) * step
        return range(first, t_ms + self.tick_s * 1000, step)

    async def _node_metric(self, msg: NodeMetric, t_ms: int) -> None:
        plan = await self.slo.handle_metric(msg)
        if plan is not None and plan.write:  # the controller publishes NodeResource when it writes
            self.extender.apply_node_resource(
                NodeResource(node=plan.node, ts=t_ms, batch=plan.batch, mid=plan.mid, degraded=plan.degraded,
                             written=True, metric_ts=msg.ts)
            )
        self.extender.apply_metric(msg)
        if self.descheduler is not None:
            self.descheduler.metrics[msg.node] = msg

    def _observe(self, t_ms: int, batch_uids: dict[str, str]) -> None:
        """The ledger's row of this minute, by the rule both modes record by (observation.py)."""
        rounds = self.agent.last_rounds
        state_nodes = self.cluster.state.nodes
        ticks = []
        for node in self.nodes:
            r = rounds.get(node.name)
            ticks.append(NodeTick(
                allocatable=state_nodes[node.name].allocatable,
                node_cpu=None if r is None else r.node[0],
                pods={} if r is None else r.pods,
                asked=self._asked.get(node.name, {}),
                node_mem=None if r is None else r.node[1],
            ))  # fmt: skip
        ran = self.jobs.ran if self.jobs is not None else None
        self.ledger.observe(t_ms, ledger_row(ticks, batch_uids, self.suppress_pct, ran, self.tick_s))

    # ------------------------------------------------------------------ the run

    async def run(self) -> RunResult:
        started = time.perf_counter()
        await self._build()
        thresholds = gc.get_threshold()
        # the services' collector settings (koordcommon.service.tune_gc): what was built lives
        # to the end of the run, frozen out of the collector's reach, and collections are rarer
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 50)
        try:
            t0 = self.clock.ms
            for k in range(1, self.ticks + 1):
                await self._tick(t0 + k * self.tick_s * 1000)
                if self.progress is not None:
                    self.progress(k, self.ticks)
            if self.jobs is not None:
                self.ledger.pods = self.jobs.lives(self.clock.ms)
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            await self._close()
        assumptions = list(getattr(self.cluster.state, "assumptions", []) or [])
        if self.jobs is not None:
            assumptions += self.jobs.assumptions()
        assumptions += service_assumptions(self.cfg, self.tick_s)
        return RunResult(self.cfg, self.ledger, time.perf_counter() - started, assumptions)


def replay(spec: SimSpec, cfg: WhatIfConfig, duration_s: int, tick_s: int = 60,
           progress: Progress | None = None) -> RunResult:
    """Run one configuration to the end (a fresh event loop)."""
    return asyncio.run(Replay(spec, cfg, duration_s, tick_s, progress).run())


__all__ = ["ManualClock", "Replay", "RunResult", "replay", "service_assumptions"]
