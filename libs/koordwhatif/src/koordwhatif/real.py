"""The real replay: the same replay as engine.py, through the services as processes over NATS.

Where the fast mode builds each service's class in one process on a clock only it moves, the
real mode starts the services as they are deployed, with `koordctl up`'s launcher: one node
agent per simulated node (sim mode, QoS on, as a DaemonSet has one per node, so each node's
eviction rate limit is its own), the slo-controller, the scheduler-extender and the descheduler,
each a process of its own on the simulated cluster (koordsim's `sim` backend, every process a
replica kept in step over NATS). Each reads the configuration the way it does in production:

* the slo-controller its `slo-controller-config` ConfigMap from a file
  (`KOORD_SLO_CONFIG_MAP_FILE`);
* the scheduler-extender its settings from its YAML file (`KOORD_EXTENDER_CONFIG_FILE`);
* the descheduler its LowNodeLoadArgs from its args file (`KOORD_DESCHEDULER_ARGS_FILE`).

Time runs `speed` times faster than the wall clock (the simulated cluster's `SimSpec.speed`):
a few simulated hours take minutes. Settings that count wall seconds (the slo-controller's
resync, the agent's pod list refresh, the descheduler's round interval and job polling) are
divided by the speed, so each service keeps the cadence it has in simulated time at speed 1.
The eviction rate limits stay on the wall clock, as the services keep them (they protect the
API server); the agent's is set so that a node can evict one pod a round, as in the fast mode
(`evict_rate_per_s`).

This process plays the parts a cluster has besides the services, on the tick grid of the fast
mode: kube-scheduler (koordsim's `ExtenderScheduler`, over HTTP to the extender process) and
the batch jobs' controllers (koordsim's `BatchDriver`). Its own replica writes with the tick's
time, so pods are created, bound and finished at the same simulated instants as in the fast
mode. A tick t stands for the minute that ends at it, as in the fast mode:

  t              every agent measures the minute, runs QoS and reports (samples, NodeMetric),
                 on its own; the slo-controller writes node status, the extender and the
                 descheduler take the NodeMetrics;
  t + tick/4     (and once the samples of t are in and the slo-controller's API shows their
                 NodeMetrics taken) the tick is observed; the batch driver finishes the pods done
                 by t and submits the arrivals; the pending pods are placed through the extender,
                 all stamped t, before the rounds at t + tick.

What the fast mode's ledger records is observed over the bus and the cluster: the batch
allocatable from the node status (this replica), what every pod ran from the agents' samples
(`koord.metrics.<node>`, one round per report interval), what the batch pods asked for from
the simulated cluster's usage model, the CPU suppress threshold from the NodeSLO the
slo-controller distributed, evictions from the agents' and the descheduler's events. A node's
first tick has no sample (an agent reports from its second round on): it is read from the
usage model, which is what the agent measured (nothing is suppressed before batch runs), and
counted in `RealRunResult.estimated`.

Start-up: the services must be up before simulated time starts, or the first rounds would be
lost or replayed late. The cluster is first created with its clock stopped (speed 0) at the
replay's start; once every service is ready, the genesis is published again with the speed and
a wall-clock anchor a moment ahead, and every replica rebuilds the same cluster from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import yaml
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.records import NodeRecord
from koordcommon.schemas import Event, NodeMetricSample, NodeSLO, decode
from koordcommon.service import cancel_and_wait
from koordsim import batch, jobs
from koordsim.cluster import SimCluster
from koordsim.scheduler import ExtenderScheduler
from koordsim.spec import SimClock, SimSpec

from .config import ConfigError, WhatIfConfig
from .engine import BIND_VERB, ManualClock, Progress, RunResult, service_assumptions
from .ledger import Ledger
from .observation import NodeTick, ledger_row, record_placements

# A minute-long tick lasts 1.5 wall seconds: a service's bus tail may hold a NodeMetric or a
# cluster write back for up to its one-second fetch, which then still falls within the three
# quarters of a tick the observation waits (at 60x ticks 2 and 3 often ran late).
DEFAULT_SPEED = 40.0
MIN_TICK_WALL_S = 0.25  # below this the phases of a tick (a quarter, a half) are shorter than a bus round trip
MIN_WALL_INTERVAL_S = 0.05  # a scaled wall-clock setting is never a busier loop than this
NODEMETRIC_MS = 60_000  # the agents' NodeMetric interval, as in the fast mode
WRITE_GRACE_S = 0.05  # wall: a node status write's trip through the bus, after the controller took the metric
START_LEAD_S = 1.5  # wall seconds between the second genesis and simulated time reaching the start
READY_TIMEOUT_S = 120.0
MAX_AGENT_PROCESSES = 8  # more nodes share agents (a shared eviction rate limit: see the module doc)


class RealModeError(RuntimeError):
    pass


@dataclass
class RealRunResult(RunResult):
    speed: float = DEFAULT_SPEED
    late: dict[int, list[str]] = field(default_factory=dict)  # tick (ms) -> what ran outside its window
    estimated: int = 0  # node-ticks read from the usage model because no agent sample came in time
    processes: int = 0


def scaled_setting(settings_cls, name: str, speed: float, value: float | None = None) -> str:
    """A setting counted in wall seconds, divided by the speed (its default unless `value`)."""
    v = settings_cls.model_fields[name].default if value is None else value
    return f"{max(float(v) / speed, MIN_WALL_INTERVAL_S):.4g}"


def evict_rate_per_s(tick_s: int, speed: float) -> float:
    """The agent's eviction rate limit (wall clock, burst = the rate's whole part, at least 1).

    The fast mode gives each node a bucket of one eviction a simulated second, so a node may
    evict one pod each round. An agent per node at 1 a wall second does the same only while a
    tick lasts well over a wall second: rounds a tick apart would otherwise find the token not
    quite back half the time. The rate is raised to refill within 80 % of a tick, below 2 a
    second, where the burst would let a node evict two pods in one round."""
    tick_wall_s = tick_s / speed
    return min(max(1.0, 1.25 / tick_wall_s), 1.95)


def service_defs(cfg: WhatIfConfig, nodes: list[str], tick_s: int, speed: float, files: dict[str, Path],
                 agents: int | None = None):
    """The processes of a real replay (`ServiceDef`s of koordctl's launcher), with the variables
    each needs beyond the launcher's own: the configuration files, the tick and the speed."""
    from descheduler.main import Settings as DeschedulerSettings
    from koordctl.launcher import ServiceDef
    from node_agent.settings import AgentSettings
    from slo_controller.settings import SLOSettings

    count = max(1, min(agents or min(len(nodes), MAX_AGENT_PROCESSES), len(nodes)))
    groups = [nodes[i::count] for i in range(count)]
    out = []
    for i, group in enumerate(groups):
        out.append(ServiceDef(f"node-agent-{i}", "node_agent", "KOORD_AGENT_", (
            ("KOORD_AGENT_MODE", "sim"),
            ("KOORD_AGENT_NODES", ",".join(group)),
            # the fast mode's agent: one round a tick, a sample a round, a NodeMetric a minute
            ("KOORD_AGENT_COLLECT_INTERVAL_S", str(tick_s)),
            ("KOORD_AGENT_REPORT_INTERVAL_S", str(tick_s)),
            ("KOORD_AGENT_NODEMETRIC_INTERVAL_S", str(NODEMETRIC_MS // 1000)),
            ("KOORD_AGENT_QOS_ENABLED", "true"),
            ("KOORD_AGENT_QOS_DRY_RUN", "false"),
            ("KOORD_AGENT_EVICT_RATE_PER_S", f"{evict_rate_per_s(tick_s, speed):.3g}"),
            ("KOORD_AGENT_POD_REFRESH_S", scaled_setting(AgentSettings, "pod_refresh_s", speed)),
        )))
    out.append(ServiceDef("slo-controller", "slo_controller", "KOORD_SLO_", (
        ("KOORD_SLO_RESYNC_S", scaled_setting(SLOSettings, "resync_s", speed)),
        ("KOORD_SLO_METRICS_CATCHUP_S", scaled_setting(SLOSettings, "metrics_catchup_s", speed)),
    )))
    out.append(ServiceDef("scheduler-extender", "scheduler_extender", "KOORD_EXTENDER_",
                          (("KOORD_EXTENDER_CONFIG_FILE", str(files["extender"])),)))
    if cfg.descheduler is not None:
        out.append(ServiceDef("descheduler", "descheduler", "KOORD_DESCHEDULER_", (
            ("KOORD_DESCHEDULER_ARGS_FILE", str(files["descheduler"])),
            ("KOORD_DESCHEDULER_INTERVAL_S",
             scaled_setting(DeschedulerSettings, "interval_s", speed, cfg.descheduler_interval_s)),
            ("KOORD_DESCHEDULER_JOB_POLL_S", scaled_setting(DeschedulerSettings, "job_poll_s", speed)),
            ("KOORD_DESCHEDULER_DRY_RUN", "false"),
        )))
    return tuple(out)


def write_config_files(cfg: WhatIfConfig, where: Path) -> dict[str, Path]:
    """The extender's and the descheduler's files as they read them (the launcher writes the
    slo-controller's ConfigMap from `DemoPlan.slo_config` and names it to the service)."""
    where.mkdir(parents=True, exist_ok=True)
    files = {"extender": where / "scheduler-extender.yaml", "descheduler": where / "descheduler-args.yaml"}
    files["extender"].write_text(yaml.safe_dump(dict(cfg.extender)))
    if cfg.descheduler is not None:
        # the round interval goes to the service scaled by the speed (KOORD_DESCHEDULER_INTERVAL_S);
        # a DeschedulerConfiguration's own deschedulingInterval, already taken into
        # cfg.descheduler_interval_s, would contradict it
        doc = {k: v for k, v in cfg.descheduler.items() if k != "deschedulingInterval"}
        files["descheduler"].write_text(yaml.safe_dump(doc))
    return files


def _agent_waiting(service, response) -> bool:
    """An agent whose clock has not started is up but not collecting: ready to start."""
    if service.spec.module != "node_agent":
        return False
    try:
        return response.json().get("failing") == ["collecting"]
    except ValueError:
        return False


class RealReplay:
    def __init__(self, spec: SimSpec, cfg: WhatIfConfig, duration_s: int, tick_s: int = 60,
                 progress: Progress | None = None, *, speed: float = DEFAULT_SPEED, data_dir: Path | None = None,
                 nats_url: str | None = None, agents: int | None = None) -> None:
        if tick_s < 1 or duration_s < tick_s:
            raise ConfigError(f"duration {duration_s} s and tick {tick_s} s: at least one tick of at least 1 s")
        if speed <= 0 or tick_s / speed < MIN_TICK_WALL_S:
            raise ConfigError(f"speed {speed:g}: a tick of {tick_s} s must last at least {MIN_TICK_WALL_S} wall "
                              f"seconds (speed at most {tick_s / MIN_TICK_WALL_S:g})")
        cfg.check()  # a configuration a service would refuse fails here, named
        # the fast mode's resolution: the same start, the same traces
        self.spec = spec.resolved(wall_ms=spec.start_ms or 0)
        self.cfg = cfg
        self.tick_s = tick_s
        self.tick_ms = tick_s * 1000
        self.ticks = duration_s // tick_s
        self.progress = progress
        self.speed = float(speed)
        self.keep_dir = data_dir is not None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="koord-whatif-"))
        self.nats_url = nats_url
        self.agents = agents
        self.t0 = self.spec.start_ms or 0
        self.clock = ManualClock(self.t0)  # this replica's writes carry the tick's time
        self.pace: SimClock | None = None  # when simulated time is where (the services' clock)
        self._samples: dict[tuple[str, int], NodeMetricSample] = {}
        self._sample_arrived = asyncio.Event()
        self._counting = True
        self.late: dict[int, list[str]] = {}  # tick (simulated ms) -> what ran outside its window
        self.estimated = 0

    # ------------------------------------------------------------------ start-up

    async def _start(self) -> None:
        from koordctl.launcher import DemoPlan, Launcher

        files = write_config_files(self.cfg, self.data_dir / "config")
        # A replay's bus is its own (a private server, or a namespace of NATS_URL's) and carries no
        # identities: the observer reads what every service publishes.
        plan = DemoPlan(data_dir=self.data_dir, nats_url=self.nats_url, services=(), record_state=False,
                        slo_config=self.cfg.slo_configmap(), secure=False)
        self.launcher = launcher = Launcher(plan)
        nats_url = launcher.start_nats()
        self.bus = Bus(nats_url, service="koordwhatif", namespace=launcher.namespace)
        self.bus.clock = self._sim_now  # the agents stamp their measurements on the simulated clock
        await self.bus.connect()
        await self.bus.ensure_streams(subjects.SIM_STREAM, subjects.METRICS_STREAM, subjects.NODEMETRIC_STREAM,
                                      subjects.NODERESOURCE_STREAM, subjects.EVENTS_STREAM)
        # the NodeSLO bucket before the agents watch it (the slo-controller fills it)
        await self.bus.ensure_kv(subjects.NODESLO_BUCKET)
        # the cluster at the replay's start, its clock stopped until the services are up
        stopped = self.spec.model_copy(update={"speed": 0.0, "wall_anchor_ms": int(time.time() * 1000)})
        self.cluster = SimCluster(stopped, bus=self.bus, genesis=True, clock=self.clock.sim_clock())
        await self.cluster.start()
        self.nodes: list[NodeRecord] = sorted(await self.cluster.list_nodes(), key=lambda n: n.name)
        names = [n.name for n in self.nodes]
        plan.services = service_defs(self.cfg, names, self.tick_s, self.speed, files, self.agents)
        self.ledger = Ledger(
            nodes=names, tick_s=self.tick_s, start_ms=self.t0,
            capacity_cpu=np.array([n.capacity.get("cpu", 0) for n in self.nodes], dtype=np.float64),
            capacity_mem=np.array([n.capacity.get("memory", 0) for n in self.nodes], dtype=np.float64),
        )  # fmt: skip
        if self.cfg.descheduler is not None:
            self.ledger.evictions["descheduler"] += 0  # the fast mode's table has the row even when 0
        # the samples by a plain subscription: a stream tail hands over messages that arrive
        # together only when its fetch times out (up to a second: a whole tick at 60x)
        self._sample_sub = await self.bus.subscribe_core(f"{subjects.PREFIX}.metrics.>", NodeMetricSample,
                                                         self._on_sample)
        self.tasks = [asyncio.create_task(self._follow_events(), name="whatif-events")]
        launcher.start_services()
        ready = await launcher.wait_ready(READY_TIMEOUT_S, accept=_agent_waiting)
        if not all(ready.values()):
            raise RealModeError("services not ready in time: " + ", ".join(k for k, v in ready.items() if not v)
                                + self._log_tails())
        self.suppress_pct = await self._suppress_thresholds(names)

        self.jobs = jobs.BatchDriver(self.cluster, self.spec) if self.cfg.colocation else None
        if self.jobs is not None:  # read and thin the batch trace now, not in the first tick
            batch.batch_arrivals(self.jobs.spec, self.t0, self.t0 + 1)
        url = next(r.url for r in launcher.running if r.spec.module == "scheduler_extender")
        self.slo_url = next(r.url for r in launcher.running if r.spec.module == "slo_controller")
        self.http = httpx.AsyncClient(timeout=5.0)
        ext = self.cfg.extender_settings()
        self.scheduler = ExtenderScheduler(self.cluster, url + ext.url_prefix, skip_dominated=True,
                                           bind_verb=BIND_VERB if ext.bind_verb else "")

        # start the clock: every replica rebuilds the same cluster, now running at the speed
        anchor = int((time.time() + START_LEAD_S) * 1000)
        running = self.spec.model_copy(update={"speed": self.speed, "wall_anchor_ms": anchor})
        await SimCluster.publish_genesis(self.bus, running)
        self.pace = SimClock(self.t0, self.speed, anchor)
        deadline = time.monotonic() + 30
        while self.cluster.spec is None or self.cluster.spec.wall_anchor_ms != anchor:
            if time.monotonic() > deadline:
                raise RealModeError("the simulated cluster did not restart")
            await asyncio.sleep(0.01)
        self._before_round(self.t0 + self.tick_ms)

    async def _suppress_thresholds(self, names: list[str]) -> np.ndarray:
        """The CPU suppress threshold of each node, from the NodeSLO its agent reads."""
        out = np.full(len(names), math.nan)
        deadline = time.monotonic() + 30
        for i, name in enumerate(names):
            while (raw := await self.bus.kv_get(subjects.NODESLO_BUCKET, subjects.encode_token(name))) is None:
                if time.monotonic() > deadline:
                    raise RealModeError(f"no NodeSLO for {name} from the slo-controller" + self._log_tails())
                await asyncio.sleep(0.05)
            t = decode(NodeSLO, raw).spec.resourceUsedThresholdWithBE
            if t.enable:
                out[i] = t.cpuSuppressThresholdPercent
        return out

    def _sim_now(self) -> int:
        return self.pace.now_ms() if self.pace is not None else self.t0

    # ------------------------------------------------------------------ what the bus carries

    async def _on_sample(self, d) -> None:
        self._samples[(d.msg.node, d.msg.ts)] = d.msg
        self._sample_arrived.set()

    async def _follow_events(self) -> None:
        async for d in self.bus.tail(subjects.EVENTS_STREAM, f"{subjects.PREFIX}.events.>", Event):
            e = d.msg
            if not self._counting or e.dry_run:
                continue
            if e.kind == subjects.EVENT_EVICT and (e.details or {}).get("outcome") == "evicted":
                self.ledger.evictions[f"qos:{(e.details or {}).get('strategy', '?')}"] += 1
            elif e.kind == subjects.EVENT_DESCHEDULE and e.action == "evicted":
                self.ledger.evictions["descheduler"] += 1

    async def _round_samples(self, t_ms: int, until_ms: int) -> dict[str, NodeMetricSample]:
        """The agents' samples of their rounds at t_ms, waiting until simulated time until_ms for
        the late ones; a node without one is missing from the answer."""
        out: dict[str, NodeMetricSample] = {}
        while True:
            for n in self.nodes:
                if n.name not in out and (s := self._samples.pop((n.name, t_ms), None)) is not None:
                    out[n.name] = s
            left_s = (until_ms - self.pace.now_ms()) / 1000 / self.speed
            if len(out) == len(self.nodes) or left_s <= 0:
                for key in [k for k in self._samples if k[1] <= t_ms]:  # too late to count
                    del self._samples[key]
                return out
            self._sample_arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sample_arrived.wait(), left_s)

    def _last_node_metric(self, t_ms: int) -> int | None:
        """When the agents' last NodeMetric up to t_ms was due: every NodeMetric interval (60 s),
        from the interval after their first round on (None before)."""
        first = ((self.t0 + self.tick_ms) // NODEMETRIC_MS + 1) * NODEMETRIC_MS
        last = t_ms // NODEMETRIC_MS * NODEMETRIC_MS
        return last if last >= first else None

    async def _slo_caught_up(self, t_ms: int | None, until_ms: int) -> bool:
        """Wait (until simulated time until_ms at most) for the slo-controller to have taken the
        NodeMetric of every node up to t_ms, as its API reports; then a moment more for the status
        write that follows to reach this replica. False when it had not in time."""
        if t_ms is None:
            return True
        while True:
            try:
                resp = await self.http.get(f"{self.slo_url}/api/v1/nodes", params={"limit": 1000})
                seen = {n["node"]: n.get("metricTs") or 0 for n in resp.json().get("items", [])}
            except (httpx.HTTPError, ValueError):
                seen = {}
            if all(seen.get(n.name, 0) >= t_ms for n in self.nodes):
                await asyncio.sleep(WRITE_GRACE_S)
                return True
            if self.pace.now_ms() >= until_ms:
                return False
            await asyncio.sleep(0.01)

    # ------------------------------------------------------------------ one tick

    async def _until(self, sim_ms: int) -> bool:
        """Sleep until simulated time reaches sim_ms; False when it already had."""
        ahead_s = (sim_ms - self.pace.now_ms()) / 1000 / self.speed
        if ahead_s <= 0:
            return False
        await asyncio.sleep(ahead_s)
        return True

    def _before_round(self, t_ms: int) -> None:
        """What the agents' rounds at t_ms will measure, taken while the cluster stands as they
        will find it (after the last placements, before QoS acts): which pods are batch work, and
        what each pod asks for at t_ms (the usage model the agents measure)."""
        self._batch_uids = self.jobs.uids_running() if self.jobs is not None else {}
        pods = self.cluster.state.pods
        self._asked = {}
        for n in self.nodes:
            snap = self.cluster.usage_snapshot(n.name, t_ms)
            self._asked[n.name] = (float(snap.node_usage.cpu_milli), {
                pods[k].uid: (float(u.cpu_milli), float(u.memory_bytes)) for k, u in snap.pods.items() if k in pods})

    async def _tick(self, t_ms: int) -> None:
        """The minute that ends at t_ms, as the fast mode's tick: the agents' rounds at t_ms
        measure it (QoS holding BestEffort back) and report; then the batch jobs move on (pods
        done by t_ms finish, arrivals come) and the pending pods are placed, stamped t_ms, before
        the next rounds."""
        self._check_alive()
        tick = self.tick_ms
        late: list[str] = []
        self.clock.ms = t_ms
        # the rounds at t reported and the services acted on them: at least a quarter tick on,
        # once every agent's sample of t is in and the slo-controller took the NodeMetrics
        # (expected by half a tick, waited for up to three quarters)
        await self._until(t_ms + tick // 4)
        samples = {}
        if t_ms >= self.t0 + 2 * tick:  # an agent's first round has no sample: nothing to wait for
            samples = await self._round_samples(t_ms, t_ms + 3 * tick // 4)
            if len(samples) < len(self.nodes):
                late.append(f"no sample from {len(self.nodes) - len(samples)} node(s) within three quarters "
                            "of a tick")
            elif self.pace.now_ms() > t_ms + tick // 2:
                late.append("agents' samples after half a tick")
        if not await self._slo_caught_up(self._last_node_metric(t_ms), t_ms + 3 * tick // 4):
            late.append("slo-controller had not taken the NodeMetrics")
        elif self.pace.now_ms() > t_ms + tick // 2:
            late.append("slo-controller took the NodeMetrics after half a tick")
        status = {n.name: self.cluster.state.nodes[n.name].allocatable for n in self.nodes}
        self._observe(t_ms, samples, status)
        if self.jobs is not None:
            await self.jobs.step(t_ms)
            record_placements(await self.scheduler.schedule_pending(), self.jobs, self.ledger, t_ms)
        self._before_round(t_ms + tick)
        if self.pace.now_ms() > t_ms + tick:
            late.append("batch step and placements ended after the next rounds")
        if late:
            self.late[t_ms] = late

    def _observe(self, t_ms: int, samples: dict[str, NodeMetricSample], status: dict) -> None:
        """What the fast mode records, from the agents' samples and this replica."""
        rows = []
        for node in self.nodes:
            node_asked, measured = self._asked[node.name]
            sample = samples.get(node.name)
            if sample is not None:
                node_cpu, node_mem = float(sample.node_usage.cpu_milli), float(sample.node_usage.memory_bytes)
                ran = {p.uid: (float(p.usage.cpu_milli), float(p.usage.memory_bytes)) for p in sample.pods}
            else:  # no sample (an agent's first round): what the agent measured, nothing suppressed yet
                self.estimated += 1
                node_cpu, ran, node_mem = node_asked, measured, None
            rows.append(NodeTick(status[node.name], node_cpu, ran, {uid: c for uid, (c, _) in measured.items()},
                                 node_mem))
        self.ledger.observe(t_ms, ledger_row(rows, self._batch_uids, self.suppress_pct,
                                             self.jobs.ran if self.jobs is not None else None, self.tick_s))

    def _check_alive(self) -> None:
        for task in self.tasks:  # what observes the bus must not have stopped
            if task.done():
                why = "cancelled" if task.cancelled() else repr(task.exception())
                raise RealModeError(f"{task.get_name()} stopped: {why}")
        for r in self.launcher.running:
            if r.process.poll() is not None:
                raise RealModeError(f"{r.spec.name} exited with code {r.process.returncode}" + self._log_tails([r]))

    def _log_tails(self, which=None) -> str:
        from koordctl.launcher import tail

        return "".join(f"\n--- {r.spec.name} ({r.log_path}):\n{tail(r.log_path)}"
                       for r in (which if which is not None else self.launcher.running))

    # ------------------------------------------------------------------ the run

    async def run(self) -> RealRunResult:
        started = time.perf_counter()
        self.launcher = None
        self.tasks: list[asyncio.Task] = []
        self.scheduler = None
        self.http = None
        self._sample_sub = None
        self.bus = None
        self.cluster = None
        try:
            await self._start()
            for k in range(1, self.ticks + 1):
                await self._tick(self.t0 + k * self.tick_ms)
                if self.progress is not None:
                    self.progress(k, self.ticks)
            self._counting = False
            if self.jobs is not None:
                self.ledger.pods = self.jobs.lives(self.clock.ms)
            assumptions = list(getattr(self.cluster.state, "assumptions", []) or [])
            if self.jobs is not None:
                assumptions += self.jobs.assumptions()
            assumptions += service_assumptions(self.cfg, self.tick_s)
            assumptions.append(
                f"real mode: the services as processes over NATS at {self.speed:g}x simulated time "
                f"({len(self.launcher.running)} processes), kube-scheduler and the batch jobs played on the "
                f"{self.tick_s} s tick grid; {len(self.late)} late tick(s), {self.estimated} node-tick(s) read "
                "from the usage model (no agent sample)")
        finally:
            await self._close()
        return RealRunResult(self.cfg, self.ledger, time.perf_counter() - started, assumptions,
                             speed=self.speed, late=self.late, estimated=self.estimated,
                             processes=len(self.launcher.running))

    async def _close(self) -> None:
        await cancel_and_wait(self.tasks)
        if self._sample_sub is not None:
            with contextlib.suppress(Exception):
                await self._sample_sub.unsubscribe()
        if self.scheduler is not None:
            await self.scheduler.aclose()
        if self.http is not None:
            await self.http.aclose()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                await self.cluster.close()
        if self.launcher is not None:
            self.launcher.stop_services()
        if self.bus is not None:
            with contextlib.suppress(Exception):
                if self.launcher is not None and self.launcher.nats is None:
                    await self.bus.delete_namespace()  # a shared server keeps streams: remove this run's
                await self.bus.close()
        if self.launcher is not None:
            self.launcher.stop_nats()
        if not self.keep_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def replay_real(spec: SimSpec, cfg: WhatIfConfig, duration_s: int, tick_s: int = 60,
                progress: Progress | None = None, *, speed: float = DEFAULT_SPEED, data_dir: Path | None = None,
                nats_url: str | None = None, agents: int | None = None) -> RealRunResult:
    """`engine.replay`'s signature, through the services as processes (a fresh event loop)."""
    return asyncio.run(RealReplay(spec, cfg, duration_s, tick_s, progress, speed=speed, data_dir=data_dir,
                                  nats_url=nats_url, agents=agents).run())


__all__ = ["DEFAULT_SPEED", "RealModeError", "RealReplay", "RealRunResult", "replay_real", "service_defs"]
