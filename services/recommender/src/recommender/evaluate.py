"""Replay real usage traces through the recommender core and score its recommendations.

    python -m recommender.evaluate [--vms N] [--out DIR] [--jobs J] [--sample]

The published figures replay the full trace set, which `KOORD_TRACE_DIR` names; without it the
run stops and says so. `--sample` runs on the sample bundled with koordsim instead (24 VMs,
24 pods): a check that the evaluation works, not the published figures.

Bitbrains rnd 2013-7 (per-VM CPU and memory at 5 min, 30 days, with what each VM was
provisioned) and the Alibaba GenAI 2026 per-pod memory utilisation (~1 min, 23 h) are fed,
sample by sample in time order, into one AggregateState per VM / pod. Every `--update-min`
minutes the estimator's target becomes the request in force for the next intervals, so every
interval is judged by a recommendation made only from earlier samples. After a warm-up
(1 day for Bitbrains, 1 h for GenAI) each interval is scored for three requests:

- provisioned: what the trace itself provisioned (Bitbrains cores / memory; GenAI: the pod's
  memory limit, since the utilisation is a fraction of it);
- fixed max: the peak usage seen during the warm-up plus the same 15 % margin, never changed;
- recommender: the VPA-style target (p90 of the decaying histogram, memory over daily peaks,
  +15 %, minimums 25m / 250Mi).

slack = sum(request - used) / sum(request) over scored intervals (Autopilot's definition),
overrun = fraction of intervals where usage exceeded the request. Output: a table on stdout,
per-container CSV files and a plot (matplotlib, extra `eval`) in --out.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .core.aggregate import AggregateState, pod_key
from .core.estimator import EstimatorConfig, estimate

POLICIES = ("provisioned", "fixed max", "recommender")
GIB = 1024**3
POD = pod_key("replay")


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
    request: dict[str, float] = field(default_factory=lambda: dict.fromkeys(POLICIES, 0.0))
    overruns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(POLICIES, 0))

    def add(self, other: Score) -> None:
        self.n += other.n
        self.used += other.used
        for p in POLICIES:
            self.request[p] += other.request[p]
            self.overruns[p] += other.overruns[p]

    def slack(self, policy: str) -> float:
        req = self.request[policy]
        return (req - self.used) / req if req > 0 else math.nan

    def overrun(self, policy: str) -> float:
        return self.overruns[policy] / self.n if self.n else math.nan


@dataclass
class Result:
    name: str
    scores: dict[str, Score]  # resource -> score
    trace: dict[str, np.ndarray] | None = None  # kept for the plotted example


def _score(used: np.ndarray, requests: dict[str, np.ndarray]) -> Score:
    s = Score(n=int(used.size), used=float(used.sum()))
    for p, r in requests.items():
        s.request[p] = float(r.sum())
        s.overruns[p] = int(np.count_nonzero(used > r))
    return s


def replay(series: Series, warmup_s: float, update_s: float, cfg: EstimatorConfig, keep_trace: bool = False) -> Result:
    st = AggregateState()
    ts = series.ts
    n = ts.size
    targets = {"cpu": np.zeros(n), "memory": np.zeros(n)}
    block = np.floor((ts - ts[0]) / update_s).astype(np.int64)
    edges = np.flatnonzero(np.diff(block)) + 1
    starts = np.concatenate(([0], edges))
    ends = np.concatenate((edges, [n]))
    cpu = series.cpu.tolist() if series.cpu is not None else None
    mem = series.memory.tolist() if series.memory is not None else None
    tl = ts.tolist()
    req_cpu = series.provisioned_cpu or 0.0
    for a, b in zip(starts.tolist(), ends.tolist()):
        # the request in force for this block comes from earlier samples only
        e = estimate(st, cfg).target
        targets["cpu"][a:b] = e.cpu_milli / 1000.0
        targets["memory"][a:b] = e.memory_bytes
        for i in range(a, b):
            if cpu is not None:
                st.add_cpu_sample(POD, tl[i], cpu[i], req_cpu)
            if mem is not None:
                st.add_memory_sample(POD, tl[i], mem[i])
    scored = ts >= ts[0] + warmup_s
    warm = ~scored
    scores: dict[str, Score] = {}
    trace: dict[str, np.ndarray] = {"ts": ts} if keep_trace else {}
    margin = 1 + cfg.safety_margin
    for res, used, prov in (("cpu", series.cpu, series.provisioned_cpu), ("memory", series.memory, series.provisioned_memory)):
        if used is None or prov is None or not np.any(scored) or not np.any(warm):
            continue
        u = used[scored]
        fixed = float(used[warm].max()) * margin
        requests = {
            "provisioned": np.full(u.shape, float(prov)),
            "fixed max": np.full(u.shape, fixed),
            "recommender": targets[res][scored],
        }
        scores[res] = _score(u, requests)
        if keep_trace:
            trace[f"{res}_used"] = used
            trace[f"{res}_recommender"] = targets[res]
            trace[f"{res}_provisioned"] = np.full(used.shape, float(prov))
            trace[f"{res}_fixed"] = np.full(used.shape, fixed)
    return Result(series.name, scores, trace if keep_trace else None)


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


def _bitbrains_job(args: tuple) -> tuple[list[Result], int]:
    vm_ids, warmup_s, update_s, cfg, example, source = args
    results, skipped = [], 0
    for vm in vm_ids:
        s = bitbrains_series(vm, source)
        if s is None:
            skipped += 1
            continue
        results.append(replay(s, warmup_s, update_s, cfg, keep_trace=vm == example))
    return results, skipped


# --------------------------------------------------------------------------- report


def totals(results: list[Result], resource: str) -> Score:
    total = Score()
    for r in results:
        if resource in r.scores:
            total.add(r.scores[resource])
    return total


def per_container_fraction(results: list[Result], resource: str, policy: str) -> np.ndarray:
    return np.array([r.scores[resource].overrun(policy) for r in results if resource in r.scores])


def table_rows(dataset: str, results: list[Result], resources: tuple[str, ...]) -> list[list[str]]:
    rows = []
    for res in resources:
        tot = totals(results, res)
        for p in POLICIES:
            frac = per_container_fraction(results, res, p)
            unit = tot.request[p] / tot.n if tot.n else 0.0
            mean = f"{unit:.3f} cores" if res == "cpu" else f"{unit / GIB:.2f} GiB"
            rows.append(
                [
                    dataset,
                    res,
                    p,
                    mean,
                    f"{100 * tot.slack(p):.1f} %",
                    f"{100 * tot.overrun(p):.2f} %",
                    f"{100 * float(np.median(frac)):.2f} %" if frac.size else "-",
                    f"{100 * float(np.mean(frac > 0)):.0f} %" if frac.size else "-",
                ]
            )
    return rows


HEADER = ["dataset", "resource", "request", "mean request", "slack", "intervals over", "median container over", "containers ever over"]


def print_table(rows: list[list[str]], out=sys.stdout) -> None:
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    line = "  ".join(h.ljust(w) for h, w in zip(HEADER, widths))
    print(line, file=out)
    print("-" * len(line), file=out)
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)), file=out)


def write_csv(path: Path, results: list[Result]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["container", "resource", "intervals", "mean_used"] + [f"{p}_{m}" for p in POLICIES for m in ("mean_request", "slack", "overrun")])
        for r in results:
            for res, s in r.scores.items():
                row = [r.name, res, s.n, s.used / s.n if s.n else 0]
                for p in POLICIES:
                    row += [s.request[p] / s.n if s.n else 0, round(s.slack(p), 5), round(s.overrun(p), 5)]
                w.writerow(row)


def plot(path: Path, bitbrains: list[Result], genai: list[Result], example: Result | None) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'koord-recommender[eval]'): no plot"
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    groups = [("Bitbrains CPU", bitbrains, "cpu"), ("Bitbrains memory", bitbrains, "memory"), ("GenAI memory", genai, "memory")]
    groups = [g for g in groups if totals(g[1], g[2]).n]
    colors = {"provisioned": "#999999", "fixed max": "#e6a23c", "recommender": "#2f7ed8"}
    x = np.arange(len(groups))
    width = 0.27
    for k, p in enumerate(POLICIES):
        slack = [100 * totals(r, res).slack(p) for _, r, res in groups]
        over = [100 * totals(r, res).overrun(p) for _, r, res in groups]
        axes[0, 0].bar(x + (k - 1) * width, slack, width, label=p, color=colors[p])
        axes[0, 1].bar(x + (k - 1) * width, over, width, label=p, color=colors[p])
    for ax, title in ((axes[0, 0], "slack: sum(request - used) / sum(request), %"), (axes[0, 1], "intervals with usage > request, %")):
        ax.set_xticks(x, [g[0] for g in groups])
        ax.set_title(title)
        ax.legend()
    ax = axes[1, 0]
    for p in ("fixed max", "recommender"):
        frac = np.sort(per_container_fraction(bitbrains, "cpu", p))
        if frac.size:
            ax.plot(100 * frac, np.linspace(0, 1, frac.size), label=p, color=colors[p])
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_title("Bitbrains CPU: per-VM share of intervals over the request (CDF)")
    ax.set_xlabel("% of intervals over")
    ax.legend()
    ax = axes[1, 1]
    if example is not None and example.trace is not None:
        tr = example.trace
        days = (tr["ts"] - tr["ts"][0]) / 86400
        ax.plot(days, tr["cpu_used"], lw=0.5, color="black", label="used")
        ax.plot(days, tr["cpu_recommender"], lw=1.2, color=colors["recommender"], label="recommender target")
        ax.plot(days, tr["cpu_fixed"], lw=1.0, color=colors["fixed max"], label="fixed max")
        top = 1.25 * max(float(tr["cpu_used"].max()), float(tr["cpu_recommender"].max()), float(tr["cpu_fixed"][0]))
        prov = float(tr["cpu_provisioned"][0])
        if prov <= top:
            ax.plot(days, tr["cpu_provisioned"], lw=1.0, color=colors["provisioned"], label="provisioned")
        else:
            ax.text(0.01, 0.97, f"provisioned: {prov:g} cores (above the chart)", transform=ax.transAxes, va="top")
        ax.set_ylim(0, top)
        ax.set_title(f"{example.name}: CPU cores over 30 days")
        ax.set_xlabel("day")
        ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recommender.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--vms", type=int, default=500, help="Bitbrains VMs to replay (1..500)")
    ap.add_argument("--genai-pods", type=int, default=0, help="GenAI pods to replay (0 = all)")
    ap.add_argument("--genai-limit-gib", type=float, default=16.0, help="memory limit the GenAI fractions are of")
    ap.add_argument("--update-min", type=float, default=60.0, help="minutes between recommendation updates")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--example-vm", type=int, default=None,
                    help="VM whose CPU is drawn over time in the plot (default: the first replayed)")
    ap.add_argument("--out", default="recommender-eval", help="directory for the CSV files and the plot")
    ap.add_argument("--sample", action="store_true",
                    help="run on the trace sample bundled with koordsim instead of the full set (not the published figures)")
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

    vm_ids = traces.bitbrains_vm_ids(source)[: max(1, args.vms)]
    example = args.example_vm if args.example_vm is not None else vm_ids[0]
    cfg_bb = EstimatorConfig(sample_interval_s=300)
    jobs = max(1, args.jobs)
    chunks = [vm_ids[i::jobs] for i in range(jobs)]
    work = [(c, 86400.0, update_s, cfg_bb, example, source) for c in chunks if c]
    bitbrains: list[Result] = []
    skipped = 0
    if jobs == 1:
        outs = [_bitbrains_job(w) for w in work]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            outs = list(pool.map(_bitbrains_job, work))
    for res, sk in outs:
        bitbrains += res
        skipped += sk
    bitbrains.sort(key=lambda r: int(r.name.rsplit("-", 1)[1]))
    t_bb = time.monotonic() - started

    cfg_g = EstimatorConfig(sample_interval_s=60)
    genai = [replay(s, 3600.0, min(update_s, 300.0), cfg_g) for s in genai_series(args.genai_limit_gib * GIB, args.genai_pods or None, source)]
    t_all = time.monotonic() - started

    rows = table_rows("Bitbrains", bitbrains, ("cpu", "memory")) + table_rows("GenAI", genai, ("memory",))
    n_int = totals(bitbrains, "cpu").n
    print(
        f"Bitbrains rnd 2013-7: {len(bitbrains)} VMs replayed ({skipped} without cores skipped), "
        f"{n_int} scored 5-min intervals after a 1-day warm-up; recommendation updated every {args.update_min:g} min"
    )
    print(
        f"Alibaba GenAI 2026: {len(genai)} pods, memory as a fraction of a {args.genai_limit_gib:g} GiB limit, "
        f"{totals(genai, 'memory').n} scored ~1-min intervals after a 1-h warm-up; updated every {min(update_s, 300.0) / 60:g} min"
    )
    print()
    print_table(rows)
    print()
    print("per container (first 10 Bitbrains VMs; all in bitbrains.csv / genai.csv):")
    for r in bitbrains[:10]:
        c, m = r.scores.get("cpu"), r.scores.get("memory")
        if c is None or m is None:
            continue
        print(
            f"  {r.name:<18} cpu used {c.used / c.n:7.3f} prov {c.request['provisioned'] / c.n:5.1f} "
            f"rec {c.request['recommender'] / c.n:7.3f} over {100 * c.overrun('recommender'):5.2f} %   "
            f"mem used {m.used / m.n / GIB:6.2f} prov {m.request['provisioned'] / m.n / GIB:6.2f} "
            f"rec {m.request['recommender'] / m.n / GIB:6.2f} GiB over {100 * m.overrun('recommender'):5.2f} %"
        )
    write_csv(out / "bitbrains.csv", bitbrains)
    write_csv(out / "genai.csv", genai)
    with (out / "summary.txt").open("w") as f:
        print_table(rows, f)
    ex = next((r for r in bitbrains if r.trace is not None), None)
    print()
    print(plot(out / "evaluation.png", bitbrains, genai, ex))
    print(f"replay: Bitbrains {t_bb:.0f} s, total {t_all:.0f} s ({jobs} processes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
