"""Recommender: histogram update rate and bytes of state per tracked workload container.

Update rate, on the same samples in one run (CPU usage in cores, 8 days of timestamps):
  floor        numpy add.at of precomputed bucket indices and weights into one array
               (the bare accumulation, nothing else), and the same as a plain Python loop
               (the floor of any per-sample Python path)
  vectorised   DecayingHistogram.add_samples in batches of 500 (a bus batch): bucket search,
               decay factors, bincount
  scalar       DecayingHistogram.add_sample, one call per sample
  aggregate    AggregateState.add_cpu_sample: scalar update + per-pod dedupe + the 1h/1d/7d
               profile and diurnal shape (what the service does per container sample)
  engine       RecommenderState.add: CPU and memory of one container sample, keyed by workload

State: N workload containers of 3 pods each fed 8 days at one sample a minute per pod;
checkpoint bytes per container (what the database row holds) and the live Python heap per
container measured with tracemalloc: everything the engine holds for it (its state, key and
indexes), after a full garbage collection so that the interpreter's free lists do not count.
--breakdown prints that heap by allocating source line.

Methods (core/methods: VPA's, Autopilot's moving window, Autopilot's ML ensemble), each on its
own: samples/s of `add` (CPU and memory of one sample) with a recommendation asked every hour
of data, against the Python floor above; and each method's state per container (live heap and
checkpoint) after the same 8 days of 3 pods at 1 sample a minute. A workload under another
method than VPA holds that method's state beside VPA's aggregate.

Goals: >= 200k samples/s of histogram updates, <= 4 KiB of state per tracked container, both
live in memory and checkpointed (and <= 4 KiB for each method's own state).

    .venv/bin/python bench/recommender.py [--samples 1000000] [--containers 40] [--breakdown 12]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np

# Run as `python bench/recommender.py`, this file's folder comes first on sys.path and its
# name would shadow the `recommender` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from recommender.core.aggregate import AggregateState, pod_key
from recommender.core.engine import RecommenderState, UsageSample
from recommender.core.histogram import CPU_SCHEME, DecayingHistogram
from recommender.core.methods import METHODS, AutopilotWindow, Sample
from recommender.core.methods import autopilot_window as mw
from recommender.core.workload import ContainerKey, WorkloadKey

T0 = 1_700_006_400.0
DAY = 86400.0


def rate(n: int, fn) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def update_rates(n: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(42)
    values = rng.gamma(2.0, 0.25, n)
    ts = T0 + np.sort(rng.uniform(0, 8 * DAY, n))
    weights = np.full(n, 0.5)
    h0 = DecayingHistogram(CPU_SCHEME)
    h0.add_samples(values[:1], 0.5, ts[-1])  # settle the reference as the others will
    factors = np.exp2((ts - h0.reference_ts) / h0.half_life_s)
    buckets = CPU_SCHEME.find_buckets(values)
    w = weights * factors

    floor_acc = np.zeros(CPU_SCHEME.num_buckets)
    rows = [("floor: numpy add.at", rate(n, lambda: np.add.at(floor_acc, buckets, w)))]
    bl, wl, acc = buckets.tolist(), w.tolist(), [0.0] * CPU_SCHEME.num_buckets

    def python_floor():
        for b, x in zip(bl, wl):
            acc[b] += x

    rows.append(("floor: Python list[b] += w (bucket and weight given)", rate(n, python_floor)))

    hv = DecayingHistogram(CPU_SCHEME)

    def vectorised():
        for i in range(0, n, 500):
            hv.add_samples(values[i : i + 500], weights[i : i + 500], ts[i : i + 500])

    rows.append(("DecayingHistogram.add_samples (batches of 500)", rate(n, vectorised)))

    hs = DecayingHistogram(CPU_SCHEME)
    vl, tl = values.tolist(), ts.tolist()

    def scalar():
        add = hs.add_sample
        for v, t in zip(vl, tl):
            add(v, 0.5, t)

    rows.append(("DecayingHistogram.add_sample (per sample)", rate(n, scalar)))
    assert np.allclose(hv.weights / hv.weights.sum(), hs.weights / hs.weights.sum(), rtol=1e-9, atol=1e-12)

    m = min(n, 300_000)
    st = AggregateState()
    pk = pod_key("bench")

    def aggregate():
        add = st.add_cpu_sample
        for v, t in zip(vl[:m], tl[:m]):
            add(pk, t, v, 0.5)

    rows.append(("AggregateState.add_cpu_sample (+dedupe, profile)", rate(m, aggregate)))

    eng = RecommenderState()
    key = ContainerKey(WorkloadKey("prod", "Deployment", "web"), "app")
    samples = [UsageSample(key, "pod-1", t, v, v * 2e9, 0.5, 2e9) for v, t in zip(vl[:m], tl[:m])]

    def engine():
        add = eng.add
        for s in samples:
            add(s)

    rows.append(("RecommenderState.add (cpu + memory sample)", rate(m, engine)))
    return rows


def state_size(containers: int, breakdown: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(7)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot() if breakdown else None
    base = tracemalloc.get_traced_memory()[0]
    eng = RecommenderState()
    minutes = int(8 * DAY // 60)
    keys = [ContainerKey(WorkloadKey("prod", "Deployment", f"web-{i}"), "app") for i in range(containers)]
    level = rng.uniform(0.05, 2.0, containers)
    for m in range(0, minutes, 1):
        t = T0 + 60 * m
        diurnal = 1 + 0.5 * np.sin(2 * np.pi * m / 1440)
        noise = rng.gamma(4.0, 0.25, (containers, 3))
        for i, k in enumerate(keys):
            for p in range(3):
                cpu = float(level[i] * diurnal * noise[i, p])
                eng.add(UsageSample(k, f"{k.workload.name}-{p}", t, cpu, cpu * 1.5e9 + 2e8, 1.0, 2e9))
    gc.collect()  # garbage and the free lists of floats, tuples, ... are not state
    heap = tracemalloc.get_traced_memory()[0] - base
    lines = []
    if before is not None:
        for d in tracemalloc.take_snapshot().compare_to(before, "lineno")[:breakdown]:
            frame = d.traceback[0]
            lines.append((d.size_diff / containers, f"{Path(frame.filename).name}:{frame.lineno}"))
    tracemalloc.stop()
    sizes = np.array([len(b) for b in eng.snapshot().values()])
    return {
        "containers": containers,
        "samples": containers * 3 * minutes,
        "checkpoint_mean": float(sizes.mean()),
        "checkpoint_max": float(sizes.max()),
        "heap_per_container": heap / containers,
        "breakdown": lines,
    }


def methods() -> dict[str, object]:
    """Every method with its defaults (the moving window's preset among them), and the moving
    window with the S_max memory setting the evaluation names (the peak of the last 24 h of
    5-minute windows + 20 %)."""
    out = {name: cls() for name, cls in METHODS.items()}
    smax = replace(mw.MEMORY_DEFAULTS, statistic="max", max_windows=288, margin=0.2)
    out["autopilot-window, memory S_max 24 h"] = AutopilotWindow(mw.CPU_DEFAULTS, smax)
    return out


def method_figures(containers: int, samples: int) -> list[dict[str, float | str]]:
    """Per method: add rate (one container, `samples` samples at 10 s, a recommendation per hour)
    and state per container (live heap and checkpoint) over `containers` containers."""
    rng = np.random.default_rng(11)
    out = []
    cpu = rng.gamma(2.0, 0.25, samples).tolist()
    one = [Sample(T0 + 10 * i, c, c * 1.5e9 + 2e8, 0.5) for i, c in enumerate(cpu)]
    minutes = int(8 * DAY // 60)
    level = rng.uniform(0.05, 2.0, containers)
    for name, method in methods().items():
        st = method.new_state()

        def feed(method=method, st=st):
            add = method.add
            for i, s in enumerate(one):
                add(st, s)
                if i % 360 == 0:
                    method.recommend(st, s.t)

        r = rate(samples, feed)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        states = [method.new_state() for _ in range(containers)]
        for m in range(minutes):
            t = T0 + 60 * m
            diurnal = 1 + 0.5 * np.sin(2 * np.pi * m / 1440)
            noise = rng.gamma(4.0, 0.25, (containers, 3)).tolist()
            for i, state in enumerate(states):
                for p in range(3):
                    c = float(level[i] * diurnal * noise[i][p])
                    method.add(state, Sample(t + p, c, c * 1.5e9 + 2e8, 1.0, pod=pod_key(f"{i}-{p}")))
                if m % 60 == 0:
                    method.recommend(state, t + 3)
        gc.collect()
        heap = (tracemalloc.get_traced_memory()[0] - base) / containers
        tracemalloc.stop()
        sizes = [len(method.save(x)) for x in states]
        out.append({"method": name, "rate": r, "heap": heap, "checkpoint_mean": float(np.mean(sizes)), "checkpoint_max": float(max(sizes))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--containers", type=int, default=40, help="workload containers (3 pods each, 8 days at 1/min)")
    ap.add_argument("--breakdown", type=int, default=0, metavar="N", help="print the N largest heap lines per container")
    ap.add_argument("--method-samples", type=int, default=100_000, help="samples per method for its add rate")
    ap.add_argument("--method-containers", type=int, default=40, help="containers per method for its state size")
    args = ap.parse_args()

    rows = update_rates(args.samples)
    np_floor, py_floor = rows[0][1], rows[1][1]
    print(f"histogram updates, {args.samples:,} CPU samples over 8 days (aggregate/engine rows: first 300k)")
    print(f"  {'path':<56}{'samples/s':>14}{'/ numpy floor':>15}{'/ Python floor':>16}")
    for name, r in rows:
        print(f"  {name:<56}{r:>14,.0f}{r / np_floor:>15.3f}{r / py_floor:>16.2f}")
    goal = max(r for name, r in rows if name.startswith("DecayingHistogram"))
    print(f"  goal >= 200,000 samples/s of histogram updates: {'met' if goal >= 200_000 else 'NOT met'} ({goal:,.0f})")
    print()
    s = state_size(args.containers, args.breakdown)
    print(f"state per tracked container: {s['containers']} containers x 3 pods, {s['samples']:,} samples (8 days at 1/min)")
    print(f"  checkpoint bytes      mean {s['checkpoint_mean']:,.0f}  max {s['checkpoint_max']:,.0f}")
    print(f"  Python heap (in use)  {s['heap_per_container']:,.0f} bytes per container")
    for size, where in s["breakdown"]:
        print(f"    {size:>8,.0f}  {where}")
    heap_ok, ckpt_ok = s["heap_per_container"] <= 4096, s["checkpoint_max"] <= 4096
    print(
        f"  goal <= 4 KiB per container: {'met' if heap_ok and ckpt_ok else 'NOT met'}"
        f" (live heap {s['heap_per_container']:,.0f} B {'ok' if heap_ok else 'over'},"
        f" largest checkpoint {s['checkpoint_max']:,.0f} B {'ok' if ckpt_ok else 'over'})"
    )
    print()
    print(f"methods: add rate ({args.method_samples:,} samples, a recommendation per hour of data) and own state per container")
    print(f"({args.method_containers} containers x 3 pods, 8 days at 1/min)")
    print(f"  {'method':<36}{'samples/s':>12}{'/ Python floor':>16}{'live heap B':>13}{'checkpoint B (mean/max)':>26}")
    for f in method_figures(args.method_containers, args.method_samples):
        ok = f["heap"] <= 4096 and f["checkpoint_max"] <= 4096
        print(f"  {f['method']:<36}{f['rate']:>12,.0f}{f['rate'] / py_floor:>16.3f}{f['heap']:>13,.0f}"
              f"{f['checkpoint_mean']:>15,.0f} / {f['checkpoint_max']:,.0f}  {'<= 4 KiB' if ok else 'OVER 4 KiB'}")


if __name__ == "__main__":
    main()
