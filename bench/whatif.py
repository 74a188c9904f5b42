"""The what-if replay's speed: simulated node-minutes per second of one core, against a floor.

The replay runs the services' own code for every node every simulated minute (agent
aggregation and QoS, the slo-controller, the extender behind kube-scheduler's cycles, the
descheduler, the batch driver). The floor is a bare numpy pass over the same usage arrays:
every online pod's traced usage at each minute gathered in one vectorised read, summed per node
and compared with a threshold, with nothing decided. The ratio says how much each simulated
node-minute costs beyond reading its data.

Cases (issue: the what-if replay):
* `machines`: the 14 Alibaba 2018 machines x 8 days with the default configuration; target
  under 60 s of one core (>= 2,688 node-minutes/s);
* `synthetic`: 4,000 nodes (the real machines' series shifted in time, labelled as such) x 24 h;
  target under 10 min (>= 9,600 node-minutes/s). `--hours` replays a shorter span and states
  its rate, which is an upper bound for the whole day: the cost of a node-minute grows over the
  first simulated hours, as the batch work fills the nodes (more pods per node for the agent,
  more pending pods for kube-scheduler), and then holds. Every run prints the rate of each
  simulated hour (at 500 nodes: 1,949 node-minutes/s in the first hour, 1,150-1,350 from the
  third on, 1,106 over 24 h).

Times are process CPU seconds (`time.process_time`): one core, whatever else the machine runs.
`--breakdown` also prints each service's share of the simulated minutes (the node agent's QoS
rounds, its NodeMetric build, kube-scheduler's cycles with the extender's verbs, the
slo-controller's per-metric plan, the descheduler's rounds, ...), the figures the README's
"Speed, and what falls short" quotes.

    .venv/bin/python bench/whatif.py [--case machines|synthetic|both] [--hours H] [--nodes N] [--breakdown]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, and its neighbours (node_agent.py,
# slo_controller.py) would shadow the services' packages the replay imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np
from koordwhatif.engine import Replay


def floor_rate(spec, hours: float, tick_s: int = 60) -> float:
    """Node-minutes per CPU second of the bare pass over the scenario's usage arrays."""
    from koordsim.state import SimState

    state = SimState.from_spec(spec)
    nodes = sorted(state.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    pods = [p for p in state.pods.values() if p.node_name]
    ps = state.usage.compile(pods)
    where = np.array([index[n] for n in ps.nodes], dtype=np.int64)
    threshold = np.array([state.nodes[n].capacity.get("cpu", 0) * 0.65 for n in nodes])
    ticks = int(hours * 3600 // tick_s)
    start = spec.start_ms or 0
    over = 0
    t0 = time.process_time()
    for k in range(1, ticks + 1):
        cpu, _ = state.usage.evaluate(ps, start + k * tick_s * 1000)
        over += int((np.bincount(where, weights=cpu, minlength=len(nodes)) > threshold).sum())
    spent = max(time.process_time() - t0, 1e-9)
    return ticks * len(nodes) * tick_s / 60 / spent


def replay_rate(spec, hours: float, breakdown: bool = False) -> tuple[float, float, dict]:
    """(node-minutes per CPU second, CPU seconds, the summary) of the default configuration;
    `breakdown`: also print where the simulated minutes' time went, service by service."""
    import asyncio

    from koordwhatif.config import WhatIfConfig

    timings: dict[str, float] = {}
    progress = _Progress()
    replayer = (TimedReplay if breakdown else Replay)(spec, WhatIfConfig(), int(hours * 3600), progress=progress)
    if breakdown:
        replayer.timings = timings
    t0 = time.process_time()
    result = asyncio.run(replayer.run())
    spent = time.process_time() - t0
    summary = result.summary()
    print(file=sys.stderr)
    if breakdown:
        ticks = timings.pop("all of each minute")
        print(f"where the simulated minutes went ({ticks:.1f} CPU s; the rest of the run is loading the traces "
              "and building the services):")
        timings["the replay's glue between them"] = max(ticks - sum(timings.values()), 0.0)
        for name, t in sorted(timings.items(), key=lambda kv: -kv[1]):
            print(f"  {t / ticks * 100:5.1f} %  {t:6.2f} s  {name}")
    rates = progress.hourly_rates(len(replayer.nodes))
    if len(rates) > 1:
        shown = ", ".join(f"{r:,.0f}" for r in rates) if len(rates) <= 12 else (
            ", ".join(f"{r:,.0f}" for r in rates[:6]) + ", ..., " + ", ".join(f"{r:,.0f}" for r in rates[-3:]))
        print(f"node-minutes/s by simulated hour: {shown}")
    return summary["node_minutes"] / spent, spent, summary


def _timed(obj, name: str, label: str, timings: dict[str, float]) -> None:
    """Replace obj.name (a method or coroutine method) by one that adds its CPU time to timings[label]."""
    import inspect

    f = getattr(obj, name)
    if inspect.iscoroutinefunction(f):

        async def timed(*a, **k):
            t = time.process_time()
            try:
                return await f(*a, **k)
            finally:
                timings[label] = timings.get(label, 0.0) + time.process_time() - t
    else:

        def timed(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                timings[label] = timings.get(label, 0.0) + time.process_time() - t

    setattr(obj, name, timed)


class TimedReplay(Replay):
    """The replay with each service's entry points timed (the measuring costs a little)."""

    timings: dict[str, float]

    async def _build(self) -> None:
        await super()._build()
        t = self.timings
        _timed(self.agent, "refresh", "node agent: pod lists", t)
        _timed(self.agent, "measure", "node agent: usage read", t)
        _timed(self.agent, "record", "node agent: history rings", t)
        _timed(self.agent.reporter, "due", "node agent: NodeMetric build", t)
        hook = self.agent.on_round.index(self.qos.on_round)  # the agent's hook list holds the method itself
        _timed(self.qos, "on_round", "node agent: QoS rounds", t)
        self.agent.on_round[hook] = self.qos.on_round
        _timed(self.slo, "handle_metric", "slo-controller: per-metric plan", t)
        _timed(self.extender, "apply_metric", "scheduler-extender: NodeMetric feed", t)
        _timed(self.extender, "apply_node_resource", "scheduler-extender: NodeResource feed", t)
        _timed(self.scheduler, "schedule_pending", "kube-scheduler cycles with the extender's verbs", t)
        if self.descheduler is not None:
            _timed(self.descheduler, "run_round", "descheduler: LowNodeLoad rounds", t)
        if self.jobs is not None:
            _timed(self.jobs, "step", "batch jobs: arrivals and completions", t)
        _timed(self.cluster, "settle", "the services' cluster watches", t)
        _timed(self, "_observe", "the replay's own ledger", t)

    async def _tick(self, t_ms: int) -> None:
        t = time.process_time()
        await super()._tick(t_ms)
        self.timings["all of each minute"] = self.timings.get("all of each minute", 0.0) + time.process_time() - t


class _Progress:
    """The ticks done, on stderr; and the CPU time at the end of the first tick and of each
    simulated hour, so that the run can say how the rate moved along the span (it falls as the
    batch work fills the nodes: more pods per node for the agent, more pending pods for
    kube-scheduler)."""

    def __init__(self, tick_s: int = 60) -> None:
        self.per_hour = max(3600 // tick_s, 1)
        self.marks: list[tuple[int, float]] = []  # (ticks done, CPU s)

    def __call__(self, done: int, total: int) -> None:
        if done == 1 or done % self.per_hour == 0:
            self.marks.append((done, time.process_time()))
        if done % max(total // 50, 1) == 0 or done == total:
            print(f"\r  {done}/{total} ticks", end="", file=sys.stderr, flush=True)

    def hourly_rates(self, nodes: int) -> list[float]:
        """Node-minutes per CPU second of each simulated hour (the first from its second tick:
        the first tick carries the services' first derivations)."""
        return [nodes * (k1 - k0) / max(t1 - t0, 1e-9) for (k0, t0), (k1, t1) in zip(self.marks, self.marks[1:])]


def run_case(name: str, nodes: int, hours: float, target_s: float, target_hours: float, breakdown: bool = False
             ) -> float:
    from koordwhatif.scenario import spec_for

    spec, about = spec_for("alibaba2018", nodes=nodes)
    print(f"\n== {name}: {about['title']}, {hours:g} h simulated; traces: {about['traces']}")
    # the interpreter's build matters (the Makefile's PYTHON): a PGO/LTO build runs the replay ~1.1x faster
    print(f"interpreter: {platform.python_implementation()} {platform.python_version()} from {sys.base_prefix}")
    floor = floor_rate(spec, min(hours, 24))
    rate, spent, s = replay_rate(spec, hours, breakdown)
    n = spec.nodes
    needed = n * target_hours * 60 / target_s
    print(f"replay: {s['node_minutes']:,.0f} node-minutes in {spent:.1f} CPU s = {rate:,.0f} node-minutes/s")
    print(f"floor (bare numpy pass over the same usage): {floor:,.0f} node-minutes/s; replay / floor = {rate / floor:.4f}")
    print(f"target: {n} nodes x {target_hours:g} h in {target_s:.0f} s of one core = {needed:,.0f} node-minutes/s; "
          f"replay / target = {rate / needed:.2f} ({'met' if rate >= needed else 'not met'}); "
          f"{n} x {target_hours:g} h would take {n * target_hours * 60 / rate:,.0f} s")
    print(f"  figures of this run: reclaimed CPU mean {s['reclaimed_cpu_pct']['mean']:.1f} %, batch CPU used "
          f"{s['batch_cpu_used_pct']:.1f} %, pods {s['batch_pods']}")
    return rate / needed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=("machines", "synthetic", "both"), default="machines")
    ap.add_argument("--hours", type=float, default=0, help="simulated hours (0: the case's own: 192 / 24)")
    ap.add_argument("--nodes", type=int, default=4000, help="synthetic case: nodes")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print each service's share of the simulated minutes (the timing costs a little)")
    args = ap.parse_args()
    if args.case in ("machines", "both"):
        run_case("machines", 0, args.hours or 192, 60, 192, args.breakdown)
    if args.case in ("synthetic", "both"):
        run_case("synthetic", args.nodes, args.hours or 24, 600, 24, args.breakdown)


if __name__ == "__main__":
    main()
