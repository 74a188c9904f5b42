"""Replay real usage traces through every recommender method and score them against each other
and against the hindsight oracle.

    python -m recommender.evaluate [--vms N] [--out DIR] [--jobs J] [--sample] [--no-sweep]

The published figures replay the full trace set, which `KOORD_TRACE_DIR` names; without it the
run stops and says so. `--sample` runs on the sample bundled with koordsim instead (24 VMs,
24 pods): a check that the evaluation works, not the published figures.

Bitbrains rnd 2013-7 (per-VM CPU and memory at 5 min, 30 days, with what each VM was
provisioned) and the Alibaba GenAI 2026 per-pod memory utilisation (~1 min, 23 h) are fed,
sample by sample in time order, into one state per VM / pod and method (`core/methods`). Every
`--update-min` minutes (GenAI: at most 5) each method's recommendation becomes the request in
force for the next intervals, so every interval is judged by a recommendation made only from
earlier samples. After a warm-up (1 day for Bitbrains, 1 h for GenAI) each interval is scored:

- provisioned: what the trace itself provisioned (Bitbrains cores / memory; GenAI: the pod's
  memory limit, since the utilisation is a fraction of it);
- fixed max: the peak usage seen during the warm-up plus 15 %, never changed;
- hindsight peaks: each refresh interval's own peak usage, known in advance (no method that
  only sees earlier samples can do this; it bounds what refreshing at this schedule could
  reach with no interval over);
- vpa, autopilot-window, autopilot-ml: the methods with their defaults;
- autopilot-ml-units: the ensemble with underrun counted in cores and GiB, as the paper counts
  it, swept over a factor on both underrun weights;
- autopilot-window-max: the moving window with Autopilot's S_max statistic (the peak of the
  last 24 h of 5-minute windows) plus a 20 % margin, swept over the margin;
- autopilot-window-rise: S_max over the last hour plus 5 % and once the largest rise from one
  window's peak to the next seen so far (decaying with the half-life), swept over that multiple;
- oracle: per container the smallest fixed request with at most the target share of its scored
  intervals above it (`core/oracle.py`), at the over-rate VPA reaches;
- oracle, pooled: fixed requests chosen together in hindsight, the over-rate budget spent
  where an overrun saves the most request;
- oracle, windows: the peak-window family in hindsight: each refresh's request is the highest
  usage of the last W hours x (1 + m), W (15 min ... 96 h) and m (0 ... 400 %) chosen per
  container, the budget pooled as above: how far a peak-window method tuned to each container
  in advance could go.

slack = sum(request - used) / sum(request) over scored intervals (Autopilot's definition),
over-rate = share of intervals with usage above the request, ratio to oracle = a method's slack
over the oracle's slack at that method's own over-rate, worst 5 % = the over-rate of the
container at the 95th percentile of the containers' own over-rates (the pooled figures can hide
overruns gathered on a few containers). For memory, OOM-like events count the
times usage rose above the recommended limit (a run of intervals above it is one event), as
Autopilot reports OOMs. Each method's main knob is swept (VPA's target percentile, the moving
window's percentile, S_max's margin, the rise headroom, the ensemble's underrun weight) and
every point is scored the same way.

Output in --out: a table on stdout and in summary.txt, evaluation.json (every row and sweep
point), per-container CSV files, one PNG per dataset with every method's slack-vs-over curve
and the oracle's (matplotlib, extra `eval`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .core.estimator import EstimatorConfig
from .core.methods import VPA, AutopilotML, AutopilotMLUnits, AutopilotWindow, AutopilotWindowRise, Recommender, Sample
from .core.methods import autopilot_ml as ml
from .core.methods import autopilot_window as mw
from .core.oracle import family_windows, oracle_requests, pooled_oracle_requests, pooled_window_choice, window_family

GIB = 1024**3
BASELINES = ("provisioned", "fixed max", "hindsight peaks")
# autopilot-window-max: the moving window with Autopilot's S_max statistic over the last 24 h
# (288 windows) plus a margin (KOORD_RECOMMENDER_WINDOW_*); autopilot-window-rise: the window's
# preset of that name (methods/autopilot_window.py), swept over its rise headroom.
METHOD_NAMES = ("vpa", "autopilot-window", "autopilot-window-max", "autopilot-window-rise", "autopilot-ml",
                "autopilot-ml-units")
MAX_WINDOWS_24H = 288
RESOURCES = ("cpu", "memory")
FIXED_MARGIN = 0.15

# The knob swept for each method, its values, and its default per resource.
KNOBS: dict[str, tuple[str, tuple[float, ...], dict[str, float]]] = {
    "vpa": ("target percentile", (0.5, 0.7, 0.8, 0.9, 0.95, 0.99), {"cpu": 0.9, "memory": 0.9}),
    "autopilot-window": ("percentile j", (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99), {"cpu": 0.95, "memory": 0.98}),
    "autopilot-window-max": ("margin", (0.0, 0.05, 0.1, 0.2, 0.3), {"cpu": 0.2, "memory": 0.2}),
    "autopilot-window-rise": ("rise headroom", (0.0, 0.5, 0.75, 1.0, 1.5, 2.0), {"cpu": 1.0, "memory": 1.0}),
    "autopilot-ml": ("underrun weight w_u", (0.01, 0.02, 0.03, 0.05, 0.07, 0.1), {"cpu": 0.07, "memory": 0.03}),
    "autopilot-ml-units": ("underrun weights x", (0.25, 0.5, 1.0, 2.0, 4.0), {"cpu": 1.0, "memory": 1.0}),
}


def make_method(method: str, knob: float, sample_interval_s: float) -> Recommender:
    """The method with its knob at `knob` for both resources, everything else at its defaults."""
    if method == "vpa":
        cfg = EstimatorConfig(sample_interval_s=sample_interval_s, target_cpu_percentile=knob, target_memory_percentile=knob)
        return VPA(estimator=cfg)
    if method == "autopilot-window":
        return AutopilotWindow(replace(mw.CPU_DEFAULTS, percentile=knob), replace(mw.MEMORY_DEFAULTS, percentile=knob))
    if method == "autopilot-window-max":
        return AutopilotWindow(*(replace(d, statistic="max", max_windows=MAX_WINDOWS_24H, margin=knob)
                                 for d in (mw.CPU_DEFAULTS, mw.MEMORY_DEFAULTS)))
    if method == "autopilot-window-rise":
        return AutopilotWindowRise(rise_headroom=knob)
    if method == "autopilot-ml":
        return AutopilotML(replace(ml.CPU_DEFAULTS, w_under=knob), replace(ml.MEMORY_DEFAULTS, w_under=knob))
    if method == "autopilot-ml-units":
        return AutopilotMLUnits(w_under_scale=knob)
    raise ValueError(f"unknown method {method!r}")


def variants(sweep: bool) -> list[tuple[str, float]]:
    """(method, knob) pairs to replay: every sweep point, or only what the defaults need."""
    out = []
    for m, (_, values, defaults) in KNOBS.items():
        for v in values if sweep else sorted(set(defaults.values())):
            out.append((m, v))
    return out


def label(method: str, knob: float) -> str:
    return f"{method}@{knob:g}"


@dataclass
class Series:
    """One container's usage: sample times (s) and values; CPU in cores, memory in bytes."""

    name: str
    ts: np.ndarray
    cpu: np.ndarray | None
    memory: np.ndarray | None
    provisioned_cpu: float | None  # cores
    provisioned_memory: float | None  # bytes


@dataclass
class Score:
    """Sums over the scored intervals of one container and one resource, per policy."""

    n: int = 0
    used: float = 0.0
    request: dict[str, float] = field(default_factory=dict)
    overruns: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)  # rises above the request

    def add(self, other: Score) -> None:
        self.n += other.n
        self.used += other.used
        for p in other.request:
            self.request[p] = self.request.get(p, 0.0) + other.request[p]
            self.overruns[p] = self.overruns.get(p, 0) + other.overruns[p]
            self.events[p] = self.events.get(p, 0) + other.events[p]

    def slack(self, policy: str) -> float:
        req = self.request.get(policy, 0.0)
        return (req - self.used) / req if req > 0 else math.nan

    def overrun(self, policy: str) -> float:
        return self.overruns[policy] / self.n if self.n else math.nan


@dataclass
class Result:
    name: str
    scores: dict[str, Score]  # resource -> score
    usage: dict[str, np.ndarray] = field(default_factory=dict)  # resource -> scored usage, sorted
    trace: dict[str, np.ndarray] | None = None  # kept for the plotted example
    # resource -> (request sum, intervals above) of each member of the oracle's peak-window family
    family: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _score(used: np.ndarray, requests: dict[str, np.ndarray]) -> Score:
    s = Score(n=int(used.size), used=float(used.sum()))
    for p, r in requests.items():
        above = used > r
        s.request[p] = float(r.sum())
        s.overruns[p] = int(np.count_nonzero(above))
        s.events[p] = int(above[0]) + int(np.count_nonzero(above[1:] & ~above[:-1])) if above.size else 0
    return s


def replay(
    series: Series,
    warmup_s: float,
    update_s: float,
    methods: dict[str, Recommender],
    keep_trace: bool = False,
) -> Result:
    """Every method over one container; their requests scored after the warm-up."""
    ts = series.ts
    n = ts.size
    block = np.floor((ts - ts[0]) / update_s).astype(np.int64)
    edges = np.flatnonzero(np.diff(block)) + 1
    starts = np.concatenate(([0], edges)).tolist()
    ends = np.concatenate((edges, [n])).tolist()
    req_cpu = series.provisioned_cpu or 0.0
    cpu = series.cpu.tolist() if series.cpu is not None else [None] * n
    mem = series.memory.tolist() if series.memory is not None else [None] * n
    samples = [Sample(t, c, m, req_cpu) for t, c, m in zip(ts.tolist(), cpu, mem)]
    requests = {p: {"cpu": np.zeros(n), "memory": np.zeros(n)} for p in methods}
    for p, method in methods.items():
        st = method.new_state()
        rc, rm = requests[p]["cpu"], requests[p]["memory"]
        for a, b in zip(starts, ends):
            # the request in force for this block comes from earlier samples only
            rec = method.recommend(st, samples[a].t)
            rc[a:b] = rec.request.cpu_cores
            rm[a:b] = rec.request.memory_bytes
            for i in range(a, b):
                method.add(st, samples[i])
    scored = ts >= ts[0] + warmup_s
    warm = ~scored
    result = Result(series.name, {}, trace={"ts": ts} if keep_trace else None)
    for res, used, prov in (("cpu", series.cpu, series.provisioned_cpu), ("memory", series.memory, series.provisioned_memory)):
        if used is None or prov is None or not np.any(scored) or not np.any(warm):
            continue
        u = used[scored]
        fixed = float(used[warm].max()) * (1 + FIXED_MARGIN)
        peaks = np.maximum.reduceat(used, starts)[np.repeat(np.arange(len(starts)), np.diff([*starts, n]))]
        reqs = {"provisioned": np.full(u.shape, float(prov)), "fixed max": np.full(u.shape, fixed),
                "hindsight peaks": peaks[scored]}
        for p in methods:
            reqs[p] = requests[p][res][scored]
        result.scores[res] = _score(u, reqs)
        result.usage[res] = np.sort(u)
        result.family[res] = window_family(used, block, scored, family_windows(update_s))
        if keep_trace:
            result.trace[f"{res}_used"] = used
            result.trace[f"{res}_provisioned"] = np.full(used.shape, float(prov))
            result.trace[f"{res}_fixed max"] = np.full(used.shape, fixed)
            result.trace[f"{res}_hindsight peaks"] = peaks
            for p in methods:
                result.trace[f"{res}_{p}"] = requests[p][res]
    return result


# --------------------------------------------------------------------------- loaders


def bitbrains_series(vm_id: int, source=None) -> Series | None:
    from koordsim import traces

    vm = traces.bitbrains_vm(vm_id, source)
    if vm.cores <= 0 or vm.memory_bytes_provisioned <= 0 or len(vm) < 2:
        return None  # 12 VMs report no cores: nothing to compare against
    ts = vm.start_s + vm.step_s * np.arange(len(vm), dtype=np.float64)
    return Series(
        name=f"bitbrains-vm-{vm_id}",
        ts=ts,
        cpu=vm.cpu_milli / 1000.0,
        memory=vm.memory_bytes,
        provisioned_cpu=float(vm.cores),
        provisioned_memory=float(vm.memory_bytes_provisioned),
    )


def genai_series(limit_bytes: float, pods: int | None = None, source=None) -> list[Series]:
    from koordsim import traces

    out = []
    for name, s in sorted(traces.genai_pod_memory_util(source).items())[: pods or None]:
        if s.ts_s.size < 2:
            continue
        out.append(Series(f"genai-{name[:12]}", s.ts_s.astype(np.float64), None, np.clip(s.values, 0, None) * limit_bytes, None, limit_bytes))
    return out


def _methods(points: list[tuple[str, float]], sample_interval_s: float) -> dict[str, Recommender]:
    return {label(m, k): make_method(m, k, sample_interval_s) for m, k in points}


def _bitbrains_job(args: tuple) -> tuple[list[Result], int]:
    vm_ids, warmup_s, update_s, points, example, source = args
    methods = _methods(points, 300.0)
    results, skipped = [], 0
    for vm in vm_ids:
        s = bitbrains_series(vm, source)
        if s is None:
            skipped += 1
            continue
        results.append(replay(s, warmup_s, update_s, methods, keep_trace=vm == example))
    return results, skipped


def _genai_job(args: tuple) -> list[Result]:
    series, warmup_s, update_s, points = args
    methods = _methods(points, 60.0)
    return [replay(s, warmup_s, update_s, methods) for s in series]


# --------------------------------------------------------------------------- scoring


def totals(results: list[Result], resource: str) -> Score:
    total = Score()
    for r in results:
        if resource in r.scores:
            total.add(r.scores[resource])
    return total


@dataclass(frozen=True)
class Point:
    slack: float
    over: float
    mean_request: float
    events: int = 0

    def as_dict(self) -> dict[str, float]:
        return {"slack": self.slack, "over_rate": self.over, "mean_request": self.mean_request, "oom_like_events": self.events}


def point(tot: Score, policy: str) -> Point:
    return Point(tot.slack(policy), tot.overrun(policy), tot.request[policy] / tot.n if tot.n else 0.0, tot.events.get(policy, 0))


class Oracle:
    """The hindsight bound over one dataset and resource, at any target over-rate."""

    def __init__(self, results: list[Result], resource: str) -> None:
        self.usage = [r.usage[resource] for r in results if resource in r.usage]
        self.n = np.array([u.size for u in self.usage])
        self.used = float(sum(u.sum() for u in self.usage))
        family = [r.family[resource] for r in results if resource in r.family]
        self.family_request = np.array([f[0] for f in family]) if family else np.zeros((0, 0))
        self.family_over = np.array([f[1] for f in family]) if family else np.zeros((0, 0))

    def at(self, rate: float) -> Point:
        return self._point(oracle_requests(self.usage, rate))

    def pooled_at(self, rate: float) -> Point:
        """The bound for the pooled figures: the over-rate budget shared among the containers."""
        return self._point(pooled_oracle_requests(self.usage, rate))

    def windowed_at(self, rate: float) -> Point:
        """The bound of the peak-window family: per container the window and margin chosen in
        hindsight, the over-rate budget shared among the containers."""
        if not self.family_request.size:
            return Point(math.nan, math.nan, 0.0)
        j = pooled_window_choice(self.family_request, self.family_over, int(self.n.sum()), rate)
        rows = np.arange(j.size)
        return self._totals(float(self.family_request[rows, j].sum()), int(self.family_over[rows, j].sum()))

    def _point(self, req: np.ndarray) -> Point:
        over = sum(int(u.size - np.searchsorted(u, r, side="right")) for u, r in zip(self.usage, req))
        return self._totals(float((req * self.n).sum()), over)

    def _totals(self, total_req: float, over: int) -> Point:
        """The point of requests summing to `total_req` over every scored interval, `over` of them above."""
        n = int(self.n.sum())
        slack = (total_req - self.used) / total_req if total_req > 0 else math.nan
        return Point(slack, over / n if n else math.nan, total_req / n if n else 0.0)


RATES = tuple(float(x) for x in np.geomspace(0.0005, 0.3, 28))
POOLED_RATES = RATES[::3]  # each point prices every interval of every container many times over
POOLED = "oracle, pooled"
WINDOWED = "oracle, windows"


def evaluate_dataset(results: list[Result], resources: tuple[str, ...], points: list[tuple[str, float]]) -> dict:
    """Per resource: baselines, each method's default, the oracle, the sweep curves."""
    out: dict = {}
    for res in resources:
        tot = totals(results, res)
        if not tot.n:
            continue
        oracle = Oracle(results, res)
        rows: dict[str, dict] = {}
        for p in BASELINES:
            rows[p] = point(tot, p).as_dict()
        for m in METHOD_NAMES:
            knob = KNOBS[m][2][res]
            if (m, knob) not in points:
                continue
            rows[m] = point(tot, label(m, knob)).as_dict() | {"knob": knob}
        for p, row in rows.items():
            row["worst_5pct_over_rate"] = worst_containers(results, res, label(p, row["knob"]) if "knob" in row else p)
        for row in rows.values():
            o = oracle.at(row["over_rate"])
            row["oracle_slack_at_same_over_rate"] = o.slack
            row["ratio_to_oracle"] = row["slack"] / o.slack if o.slack > 0 else math.nan
        if "vpa" in rows:
            rows["oracle"] = oracle.at(rows["vpa"]["over_rate"]).as_dict() | {"target_over_rate": rows["vpa"]["over_rate"]}
            rows["oracle"]["ratio_to_oracle"] = 1.0
            pooled = oracle.pooled_at(rows["vpa"]["over_rate"])
            same = oracle.at(pooled.over)
            rows[POOLED] = pooled.as_dict() | {"target_over_rate": rows["vpa"]["over_rate"],
                                               "ratio_to_oracle": pooled.slack / same.slack if same.slack > 0 else math.nan}
            windowed = oracle.windowed_at(rows["vpa"]["over_rate"])
            same = oracle.at(windowed.over)
            rows[WINDOWED] = windowed.as_dict() | {"target_over_rate": rows["vpa"]["over_rate"],
                                                   "ratio_to_oracle": windowed.slack / same.slack if same.slack > 0 else math.nan}
        sweeps = {}
        for m in METHOD_NAMES:
            curve = []
            for mm, k in points:
                if mm == m:
                    pt = point(tot, label(m, k))
                    o = oracle.at(pt.over)
                    curve.append(pt.as_dict() | {"knob": k, "ratio_to_oracle": pt.slack / o.slack if o.slack > 0 else math.nan})
            sweeps[m] = {"knob": KNOBS[m][0], "points": curve}
        sweeps["oracle"] = {"knob": "target over-rate", "points": [oracle.at(r).as_dict() | {"knob": r} for r in RATES]}
        sweeps[POOLED] = {"knob": "target over-rate",
                          "points": [oracle.pooled_at(r).as_dict() | {"knob": r} for r in POOLED_RATES]}
        sweeps[WINDOWED] = {"knob": "target over-rate",
                            "points": [oracle.windowed_at(r).as_dict() | {"knob": r} for r in RATES]}
        out[res] = {"intervals": tot.n, "containers": len(oracle.usage), "rows": rows, "sweeps": sweeps, "targets": targets(rows)}
    return out


def worst_containers(results: list[Result], resource: str, policy: str, q: float = 0.95) -> float:
    """The over-rate of the container at quantile `q` of the containers' own over-rates."""
    rates = [r.scores[resource].overrun(policy) for r in results if resource in r.scores and r.scores[resource].n]
    return float(np.quantile(rates, q)) if rates else math.nan


def targets(rows: dict[str, dict]) -> dict:
    """The issue's targets: at an over-rate no higher than VPA's, the best method's slack at most
    0.75 x VPA's and within 1.5 x the oracle's."""
    if "vpa" not in rows:
        return {}
    vpa = rows["vpa"]
    eligible = [m for m in METHOD_NAMES if m in rows and rows[m]["over_rate"] <= vpa["over_rate"] + 1e-12]
    best = min(eligible, key=lambda m: rows[m]["slack"])
    b = rows[best]
    return {
        "best": best,
        "slack_vs_vpa": b["slack"] / vpa["slack"],
        "slack_vs_oracle": b["ratio_to_oracle"],
        "holds": b["slack"] <= 0.75 * vpa["slack"] and b["ratio_to_oracle"] <= 1.5,
    }


# --------------------------------------------------------------------------- report

HEADER = ["dataset", "resource", "request", "mean request", "slack", "over-rate", "worst 5 %", "ratio to oracle",
          "OOM-like events"]


def table_rows(dataset: str, ev: dict) -> list[list[str]]:
    rows = []
    for res, d in ev.items():
        for p, row in d["rows"].items():
            unit = row["mean_request"]
            mean = f"{unit:.3f} cores" if res == "cpu" else f"{unit / GIB:.2f} GiB"
            events = str(row["oom_like_events"]) if res == "memory" and not p.startswith("oracle") else "-"
            worst = f"{100 * row['worst_5pct_over_rate']:.2f} %" if "worst_5pct_over_rate" in row else "-"
            rows.append(
                [dataset, res, p, mean, f"{100 * row['slack']:.1f} %", f"{100 * row['over_rate']:.2f} %", worst,
                 f"{row['ratio_to_oracle']:.2f}", events]
            )
    return rows


def print_table(rows: list[list[str]], out=sys.stdout) -> None:
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    line = "  ".join(h.ljust(w) for h, w in zip(HEADER, widths))
    print(line, file=out)
    print("-" * len(line), file=out)
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)), file=out)


def write_csv(path: Path, results: list[Result], policies: list[str]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["container", "resource", "intervals", "mean_used"] + [f"{p}_{m}" for p in policies for m in ("mean_request", "slack", "overrun")])
        for r in results:
            for res, s in r.scores.items():
                row = [r.name, res, s.n, s.used / s.n if s.n else 0]
                for p in policies:
                    row += [s.request[p] / s.n if s.n else 0, round(s.slack(p), 5), round(s.overrun(p), 5)]
                w.writerow(row)


COLORS = {"provisioned": "#999999", "fixed max": "#e6a23c", "hindsight peaks": "#8c564b", "vpa": "#2f7ed8",
          "autopilot-window": "#2ca02c", "autopilot-window-max": "#17becf",
          "autopilot-window-rise": "#9467bd", "autopilot-ml": "#d62728", "autopilot-ml-units": "#e377c2",
          "oracle": "black",
          POOLED: "#555555", WINDOWED: "#555555"}


def plot(path: Path, title: str, ev: dict, example: Result | None = None) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'koord-recommender[eval]'): no plot"
    panels = list(ev.items())
    extra = 1 if example is not None and example.trace is not None else 0
    fig, axes = plt.subplots(1, len(panels) + extra, figsize=(7.5 * (len(panels) + extra), 5.6), squeeze=False)
    for ax, (res, d) in zip(axes[0], panels):
        shown: list[float] = []  # the methods' and baselines' slack: the range the panel is about
        for m, sw in d["sweeps"].items():
            pts = sorted(sw["points"], key=lambda p: p["over_rate"])
            x = [100 * p["over_rate"] for p in pts]
            y = [100 * p["slack"] for p in pts]
            oracle = m.startswith("oracle")
            if not oracle:
                shown += y
            style = {"color": COLORS[m], "lw": 2.0 if oracle else 1.3, "ls": {POOLED: "--", WINDOWED: ":"}.get(m, "-")}
            ax.plot(x, y, marker=None if oracle else "o", ms=3, label=f"{m} ({sw['knob']})", **style)
        for p, row in d["rows"].items():
            if p.startswith("oracle"):
                continue
            ax.plot(100 * row["over_rate"], 100 * row["slack"], "*" if p in METHOD_NAMES else "s", ms=11,
                    color=COLORS[p], markeredgecolor="black", label=f"{p} (default)" if p in METHOD_NAMES else p)
            shown.append(100 * row["slack"])
        if shown:
            # the oracles' curves run on to large over-rates, where sizing below usage makes the
            # slack very negative; they are cut where the methods end, not the other way round
            ax.set_ylim(bottom=min(shown) - 10)
        ax.set_xscale("symlog", linthresh=0.01)  # log above 0.01 %, so that 0 % still shows
        ax.set_xlim(left=-0.002)  # no negative over-rates: the axis starts just left of 0 %
        ax.set_xlabel("intervals with usage above the request, % (log above 0.01)")
        ax.set_ylabel("slack: sum(request - used) / sum(request), %")
        ax.set_title(f"{title} {res}: slack vs over-rate")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = 3 if len(panels) + extra == 1 else 5  # one panel is narrow: fewer, longer legend rows
    rows = math.ceil(len(labels) / ncol)
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=ncol)
    if extra:
        ax = axes[0][-1]
        tr = example.trace
        days = (tr["ts"] - tr["ts"][0]) / 86400
        ax.plot(days, tr["cpu_used"], lw=0.5, color="black", label="used")
        for p in ("fixed max", *[k for k in tr if k.startswith("cpu_") and "@" in k]):
            key = p if p.startswith("cpu_") else f"cpu_{p}"
            name = key[4:]
            method = name.split("@")[0]
            if "@" in name and float(name.split("@")[1]) != KNOBS[method][2]["cpu"]:
                continue
            ax.plot(days, tr[key], lw=1.0, color=COLORS[method], label=method)
        ax.set_ylim(0, 1.25 * float(tr["cpu_used"].max()))
        ax.set_title(f"{example.name}: CPU cores and each method's request")
        ax.set_xlabel("day")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout(rect=(0, 0.035 * rows + 0.02, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot: {path}"


# --------------------------------------------------------------------------- main


def _parallel(fn: Callable, work: list, jobs: int, what: str = "", sizes: list[int] | None = None) -> list:
    """fn over every item of `work` on `jobs` processes, results in `work`'s order; with `what`,
    progress on stderr as items finish (`sizes`: how many of `what` each item holds)."""
    sizes = sizes or [1] * len(work)
    total, done = sum(sizes), 0

    def finished(i: int) -> None:
        nonlocal done
        done += sizes[i]
        if what:
            print(f"\r  {what}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    if jobs == 1 or len(work) <= 1:
        out = []
        for i, w in enumerate(work):
            out.append(fn(w))
            finished(i)
        return out
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(fn, w): i for i, w in enumerate(work)}
        for f in as_completed(futures):
            finished(futures[f])
        return [f.result() for f in futures]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recommender.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vms", type=int, default=500, help="Bitbrains VMs to replay (1..500)")
    ap.add_argument("--genai-pods", type=int, default=0, help="GenAI pods to replay (0 = all)")
    ap.add_argument("--genai-limit-gib", type=float, default=16.0, help="memory limit the GenAI fractions are of")
    ap.add_argument("--update-min", type=float, default=60.0, help="minutes between recommendation updates")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--example-vm", type=int, default=None,
                    help="VM whose CPU is drawn over time in the plot (default: the first replayed)")
    ap.add_argument("--out", default="recommender-eval", help="directory for the JSON, CSV files and plots")
    ap.add_argument("--sample", action="store_true",
                    help="run on the trace sample bundled with koordsim instead of the full set (not the published figures)")
    ap.add_argument("--no-sweep", action="store_true", help="replay only the defaults (no knob sweep)")
    args = ap.parse_args(argv)

    from koordsim import traces

    try:
        source = traces.sample_source() if args.sample else traces.trace_source(require_full=True)
    except traces.TracesNotFound as exc:
        print(f"{exc}\n(or run on the bundled sample with --sample)", file=sys.stderr)
        return 2
    print(f"traces: {source.describe()}", flush=True)
    if source.is_sample:
        print("the sample holds a few dozen VMs and pods: these are not the published figures", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    update_s = args.update_min * 60
    genai_update_s = min(update_s, 300.0)
    points = variants(not args.no_sweep)
    policies = [*BASELINES, *(label(m, k) for m, k in points)]

    vm_ids = traces.bitbrains_vm_ids(source)[: max(1, args.vms)]
    example = args.example_vm if args.example_vm is not None else vm_ids[0]
    jobs = max(1, args.jobs)
    # small chunks, so that progress shows and the processes finish together
    chunks = [c for c in (vm_ids[i::jobs * 10] for i in range(jobs * 10)) if c]
    bitbrains: list[Result] = []
    skipped = 0
    work = [(c, 86400.0, update_s, points, example, source) for c in chunks]
    for res, sk in _parallel(_bitbrains_job, work, jobs, "Bitbrains VMs replayed", [len(c) for c in chunks]):
        bitbrains += res
        skipped += sk
    bitbrains.sort(key=lambda r: int(r.name.rsplit("-", 1)[1]))
    t_bb = time.monotonic() - started

    pods = genai_series(args.genai_limit_gib * GIB, args.genai_pods or None, source)
    genai: list[Result] = []
    parts = [c for c in (pods[i::jobs * 10] for i in range(jobs * 10)) if c]
    work = [(c, 3600.0, genai_update_s, points) for c in parts]
    for res in _parallel(_genai_job, work, jobs, "GenAI pods replayed", [len(c) for c in parts]):
        genai += res
    genai.sort(key=lambda r: r.name)
    t_all = time.monotonic() - started

    ev_bb = evaluate_dataset(bitbrains, RESOURCES, points)
    ev_g = evaluate_dataset(genai, ("memory",), points)
    n_int = totals(bitbrains, "cpu").n
    print(
        f"Bitbrains rnd 2013-7: {len(bitbrains)} VMs replayed ({skipped} without cores skipped), "
        f"{n_int} scored 5-min intervals after a 1-day warm-up; recommendation updated every {args.update_min:g} min"
    )
    print(
        f"Alibaba GenAI 2026: {len(genai)} pods, memory as a fraction of a {args.genai_limit_gib:g} GiB limit, "
        f"{totals(genai, 'memory').n} scored ~1-min intervals after a 1-h warm-up; updated every {genai_update_s / 60:g} min"
    )
    print()
    rows = table_rows("Bitbrains", ev_bb) + table_rows("GenAI", ev_g)
    print_table(rows)
    print()
    for ds, ev in (("Bitbrains", ev_bb), ("GenAI", ev_g)):
        for res, d in ev.items():
            t = d["targets"]
            if t:
                print(
                    f"target {ds} {res}: best at VPA's over-rate or lower is {t['best']}, slack {t['slack_vs_vpa']:.2f} x VPA's "
                    f"(goal <= 0.75), {t['slack_vs_oracle']:.2f} x the oracle's (goal <= 1.5): {'holds' if t['holds'] else 'MISSED'}"
                )
    report = {
        "traces": source.describe(),
        "sample": source.is_sample,
        "update_min": args.update_min,
        "knobs": {m: {"name": k[0], "values": list(k[1]), "defaults": k[2]} for m, k in KNOBS.items()},
        "bitbrains": ev_bb,
        "genai": ev_g,
    }
    (out / "evaluation.json").write_text(json.dumps(report, indent=1, allow_nan=True))
    write_csv(out / "bitbrains.csv", bitbrains, policies)
    write_csv(out / "genai.csv", genai, policies)
    with (out / "summary.txt").open("w") as f:
        print(f"traces: {source.describe()}", file=f)
        print_table(rows, f)
    ex = next((r for r in bitbrains if r.trace is not None), None)
    print()
    print(plot(out / "bitbrains.png", "Bitbrains", ev_bb, ex))
    print(plot(out / "genai.png", "GenAI", ev_g))
    print(f"replay: Bitbrains {t_bb:.0f} s, total {t_all:.0f} s ({jobs} processes, {len(points)} method settings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
