"""The whole pipeline at N simulated nodes x 30 pods, through the real services as processes.

For each N of the ramp: a private NATS server (JetStream), the six services started by koordctl's
launcher exactly as `koordctl up` starts them (the sim node agent split across its shards), the
collector on PostgreSQL when DATABASE_URL names a server (a fresh database), else SQLite; the
simulated cluster's genesis of N nodes with `--pods` online pods each, usage from the real traces;
the default intervals (collect 1 s, samples every 10 s, NodeMetric every 60 s). After a warm-up of
one NodeMetric interval, the run lasts `--intervals` NodeMetric intervals and measures:

* samples/s published (the KOORD_METRICS stream) and persisted (node and pod rows in the window);
* freshness: on `--steps` known nodes, spread over the first interval, the CPU of every pod is
  multiplied by 3 from a known simulated time (a usage override of the simulated cluster), and the
  time until (a) the collector holds a row measured after the step, (b) the slo-controller's batch
  allocatable is computed from a NodeMetric measured after it, (c) the extender's filter and score
  judge the node by such a NodeMetric; p50 and p99 of each;
* the extender's filter + prioritize latency over HTTP at that size, with kube-scheduler's
  default candidates (percentageOfNodesToScore: 500 at 5,000 nodes) and with every node;
* the dashboard's queries (cluster summary and resources over the last hour, a page of nodes);
* CPU (share of one core over the window) and RSS of every service, of NATS and of PostgreSQL;
* every stream's consumers: pending (lag), waiting for ack, redelivered.

A service falls behind when its consumer lag exceeds one report interval of messages at the end
of the window, an agent skips rounds or publishes under 95 % of what is due, the collector
persists under 95 % of what was published, or freshness p99 at the extender exceeds two NodeMetric
intervals. The ramp stops at the first N where one does; the busiest process is then profiled
(py-spy, `--profile-s` seconds) and its hottest functions printed.

    .venv/bin/python bench/scale.py [--nodes 1000] [--intervals 2]
    .venv/bin/python bench/scale.py --nodes 500,1000,2000,5000 --intervals 3
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import sqlalchemy as sa
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.schemas import SimMutation
from koordcommon.testing.db import create_database, drop_database
from koordctl.launcher import DemoPlan, Launcher
from koordsim.cluster import SimClock, SimCluster, SimSpec

NODEMETRIC_S = 60
REPORT_S = 10
STEP_FACTOR = 3.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- processes


def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def proc_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def postgres_pids() -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().strip() == "postgres":
                    out.append(int(d.name))
    return out


class CpuMeter:
    """CPU seconds of named process groups between start() and stop()."""

    def __init__(self, groups: dict[str, list[int]]):
        self.groups = groups
        self.t0 = 0.0
        self.before: dict[str, float] = {}
        self.share: dict[str, float] = {}
        self.rss: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {name: sum(proc_cpu_s(p) for p in pids) for name, pids in self.groups.items()}

    def start(self) -> None:
        self.t0, self.before = time.monotonic(), self._read()

    def stop(self) -> None:
        elapsed = time.monotonic() - self.t0
        after = self._read()
        self.share = {k: (after[k] - self.before[k]) / elapsed for k in after}
        self.rss = {name: sum(proc_rss_mb(p) for p in pids) for name, pids in self.groups.items()}


def profile(pid: int, seconds: float, out: Path) -> list[tuple[str, float, float]]:
    """py-spy record of one process: (function, self %, inclusive %) of the hottest functions."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    raw = out.with_suffix(".txt")
    cmd = [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "50",
           "--format", "raw", "--output", str(raw), "--nonblocking"]  # fmt: skip
    if subprocess.run(cmd, capture_output=True, timeout=seconds + 60).returncode != 0 or not raw.exists():
        return []
    own: collections.Counter = collections.Counter()
    incl: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].rstrip(")") for f in stack.split(";") if f]
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    top = sorted(own, key=lambda f: -own[f])[:12]
    return [(f, 100 * own[f] / total, 100 * incl[f] / total) for f in top] if total else []


# --------------------------------------------------------------------------- measures


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def fmt_s(v: float | None) -> str:
    return "   -  " if v is None else f"{v:6.1f}"


async def stream_report(bus: Bus) -> dict[str, list[dict]]:
    """Per stream: each consumer's pending, ack pending and redelivered counts."""
    out: dict[str, list[dict]] = {}
    for spec in (subjects.METRICS_STREAM, subjects.NODEMETRIC_STREAM, subjects.NODERESOURCE_STREAM,
                 subjects.SIM_STREAM, subjects.EVENTS_STREAM):  # fmt: skip
        wire = bus.wire_stream(spec)
        rows = []
        with contextlib.suppress(Exception):
            for c in await bus.js.consumers_info(wire):
                rows.append({"consumer": c.config.durable_name or "(tail)", "pending": c.num_pending,
                             "ack_pending": c.num_ack_pending, "redelivered": c.num_redelivered})  # fmt: skip
        out[spec.name] = rows
    return out


async def stream_last_seq(bus: Bus, spec) -> int:
    info = await bus.js.stream_info(bus.wire_stream(spec))
    return info.state.last_seq


def probe_pod(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "bench-scale", "uid": str(uuid.uuid4()),
                         "labels": {"app": "probe"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                                "limits": {"cpu": "1", "memory": "1Gi"}}}]}}  # fmt: skip


async def extender_latency(client: httpx.AsyncClient, url: str, names: list[str], candidates: int, pods: int) -> dict:
    """filter + prioritize of `pods` distinct pods over `candidates` nodes (rotating start, as
    kube-scheduler walks its node list): p50 / p99 ms of each verb."""
    times: dict[str, list[float]] = {"filter": [], "prioritize": []}
    for i in range(pods):
        start = (i * 997) % len(names)
        cand = (names[start:] + names[:start])[:candidates]
        pod = probe_pod(f"lat-{candidates}-{i}")
        t = time.perf_counter()
        r = await client.post(url + "/filter", content=json.dumps({"Pod": pod, "Nodes": None, "NodeNames": cand}))
        times["filter"].append((time.perf_counter() - t) * 1000)
        survivors = r.json().get("NodeNames") or cand[:1]
        t = time.perf_counter()
        await client.post(url + "/prioritize", content=json.dumps({"Pod": pod, "Nodes": None, "NodeNames": survivors}))
        times["prioritize"].append((time.perf_counter() - t) * 1000)
    return {verb: (pct(v, 0.5), pct(v, 0.99)) for verb, v in times.items()}


async def dashboard_latency(client: httpx.AsyncClient, url: str, repeat: int = 3) -> dict[str, float]:
    now = int(time.time() * 1000)
    q = f"from={now - 3_600_000}&to={now}&step=60s"
    out = {}
    for name, path in (("cluster summary 1 h", f"/api/v1/cluster/summary?{q}"),
                       ("cluster resources 1 h", f"/api/v1/cluster/resources?{q}"),
                       ("nodes page", "/api/v1/nodes?limit=100")):  # fmt: skip
        best = []
        for _ in range(repeat):
            t = time.perf_counter()
            r = await client.get(url + path, timeout=120)
            best.append((time.perf_counter() - t) * 1000)
            if r.status_code != 200:
                best = [float("nan")]
                break
        out[name] = pct(best, 0.5)
    return out


async def agent_metrics(client: httpx.AsyncClient, urls: list[str]) -> dict[str, float]:
    """Summed over the agent processes: rounds, skipped rounds, round seconds, published samples."""
    want = {"koord_agent_collect_rounds_total": 0.0, "koord_agent_skipped_rounds_total": 0.0,
            "koord_agent_round_seconds_sum": 0.0, "koord_agent_round_seconds_count": 0.0}  # fmt: skip
    for u in urls:
        with contextlib.suppress(httpx.HTTPError):
            for line in (await client.get(u + "/metrics", timeout=10)).text.splitlines():
                name = line.split("{")[0].split(" ")[0]
                if name in want and not line.startswith("#"):
                    want[name] += float(line.rsplit(" ", 1)[1])
    return want


# --------------------------------------------------------------------------- one size


class Freshness:
    """Step nodes and when each stage first reflected its step (simulated ms after the step)."""

    def __init__(self, nodes: list[str], first_ms: int, spread_ms: int):
        k = len(nodes)
        self.step_ms = {n: first_ms + i * spread_ms // max(k, 1) for i, n in enumerate(nodes)}
        self.seen: dict[str, dict[str, int]] = {"collector": {}, "slo-controller": {}, "extender": {}}
        self.rose: dict[str, dict[str, bool]] = {"collector": {}, "slo-controller": {}, "extender": {}}

    def mark(self, stage: str, node: str, now_ms: int, rose: bool) -> None:
        if node not in self.seen[stage] and now_ms >= self.step_ms[node]:
            self.seen[stage][node] = now_ms - self.step_ms[node]
            self.rose[stage][node] = rose

    def pending(self, stage: str) -> list[str]:
        return [n for n in self.step_ms if n not in self.seen[stage]]

    def summary(self) -> dict[str, tuple]:
        return {stage: (len(v), pct([x / 1000 for x in v.values()], 0.5), pct([x / 1000 for x in v.values()], 0.99),
                        sum(self.rose[stage].values()))
                for stage, v in self.seen.items()}  # fmt: skip


async def poll_freshness(fresh: Freshness, clock: SimClock, engine: sa.Engine, urls: dict[str, str],
                         client: httpx.AsyncClient, base: dict, until: float) -> None:  # fmt: skip
    probe = probe_pod("freshness-probe")
    key = "bench-scale/freshness-probe"
    nodes = list(fresh.step_ms)
    extender = urls["scheduler-extender"]
    await client.post(extender + "/filter", content=json.dumps({"Pod": probe, "Nodes": None, "NodeNames": nodes}))
    while time.monotonic() < until and any(fresh.pending(s) for s in fresh.seen):
        now = clock.now_ms()
        # (a) the collector's rows measured after the step
        todo = fresh.pending("collector")
        if todo:
            q = sa.text("SELECT node, max(ts), max(cpu_milli) FROM node_samples WHERE ts > :t AND node IN :n "
                        "GROUP BY node").bindparams(sa.bindparam("n", expanding=True))  # fmt: skip
            with engine.connect() as conn:
                for node, ts, cpu in conn.execute(q, {"t": min(fresh.step_ms[n] for n in todo), "n": todo}):
                    if ts > fresh.step_ms[node]:
                        fresh.mark("collector", node, clock.now_ms(), cpu > base["collector"].get(node, 0))
        # (b) the slo-controller's plan from a NodeMetric measured after the step
        for node in fresh.pending("slo-controller"):
            with contextlib.suppress(httpx.HTTPError, ValueError):
                v = (await client.get(f"{urls['slo-controller']}/api/v1/nodes/{node}/resources", timeout=5)).json()
                if (v.get("metricTs") or 0) >= fresh.step_ms[node]:
                    batch = _batch_cpu(v)
                    fresh.mark("slo-controller", node, clock.now_ms(), batch < base["slo"].get(node, batch + 1))
        # (c) the extender judging the node by such a NodeMetric
        if fresh.pending("extender"):
            with contextlib.suppress(httpx.HTTPError, ValueError):
                e = (await client.get(f"{extender}/api/v1/explain/pods/{key}?nodes={len(nodes)}", timeout=5)).json()
                for d in e.get("nodes", []):
                    m = _loadaware(d).get("metric") or {}
                    if (m.get("update_ms") or 0) >= fresh.step_ms.get(d["node"], 1 << 62):
                        used = (_loadaware(d).get("node_usage") or {}).get("cpu_milli", 0)
                        fresh.mark("extender", d["node"], clock.now_ms(), used > base["extender"].get(d["node"], 0))
        await asyncio.sleep(max(0.0, 0.5 - (clock.now_ms() - now) / 1000))


def _batch_cpu(view: dict) -> int:
    return int((view.get("batch") or {}).get("cpu", 0))


def _loadaware(detail: dict) -> dict:
    for p in detail.get("plugins", []):
        if p.get("plugin") == "LoadAwareScheduling":
            return p.get("numbers") or {}
    return {}


async def baseline(fresh: Freshness, engine: sa.Engine, urls: dict[str, str], client: httpx.AsyncClient) -> dict:
    nodes = list(fresh.step_ms)
    base: dict[str, dict[str, int]] = {"collector": {}, "slo": {}, "extender": {}}
    q = sa.text("SELECT s.node, s.cpu_milli FROM node_samples s JOIN (SELECT node, max(ts) AS ts FROM node_samples "
                "WHERE node IN :n GROUP BY node) l ON s.node = l.node AND s.ts = l.ts"
                ).bindparams(sa.bindparam("n", expanding=True))  # fmt: skip
    with engine.connect() as conn:
        base["collector"] = {n: int(c) for n, c in conn.execute(q, {"n": nodes})}
    for node in nodes:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            v = (await client.get(f"{urls['slo-controller']}/api/v1/nodes/{node}/resources", timeout=5)).json()
            base["slo"][node] = _batch_cpu(v)
    probe = probe_pod("baseline-probe")
    extender = urls["scheduler-extender"]
    with contextlib.suppress(httpx.HTTPError, ValueError):
        await client.post(extender + "/filter", content=json.dumps({"Pod": probe, "Nodes": None, "NodeNames": nodes}))
        e = (await client.get(f"{extender}/api/v1/explain/pods/bench-scale/baseline-probe?nodes={len(nodes)}",
                              timeout=10)).json()  # fmt: skip
        for d in e.get("nodes", []):
            base["extender"][d["node"]] = (_loadaware(d).get("node_usage") or {}).get("cpu_milli", 0)
    return base


async def run_size(n: int, args, workdir: Path) -> dict:
    data_dir = workdir / f"n{n}"
    db_name = f"koord_scale_{n}_{os.getpid()}"
    pg = os.environ.get("DATABASE_URL", "")
    env = {"KOORD_AGENT_REPORT_INTERVAL_S": str(REPORT_S), "KOORD_AGENT_NODEMETRIC_INTERVAL_S": str(NODEMETRIC_S)}
    if not args.qos:
        env["KOORD_AGENT_QOS_ENABLED"] = "false"
    db_url = create_database(pg, db_name) if pg else ""
    if db_url:
        env["DATABASE_URL"] = db_url
    # secure=False: the bench reads every stream's consumers, which no service identity may do
    plan = DemoPlan(nodes=n, data_dir=data_dir, private_nats=True, extra_env=env, record_state=False,
                    agent_shards=args.agent_shards, secure=False)  # fmt: skip
    launcher = Launcher(plan)
    result: dict = {"nodes": n, "pods": n * args.pods, "backend": "postgresql" if db_url else "sqlite",
                    "qos": args.qos, "agents": sum(s.module == "node_agent" for s in plan.processes())}
    bus = None
    try:
        nats_url = launcher.start_nats()
        bus = Bus(nats_url, service="koordctl", namespace=launcher.namespace,
                  credentials=launcher.bus_credentials("koordctl"))  # fmt: skip
        await bus.connect()
        spec = SimSpec(nodes=n, online_pods_per_node=args.pods, seed=1).resolved()
        await SimCluster.publish_genesis(bus, spec)
        clock = SimClock.of(spec)
        t = time.monotonic()
        launcher.start_services()
        try:
            ready = await launcher.wait_ready(args.ready_timeout)
        except RuntimeError as exc:  # a service exited while starting: that is the size's answer
            result["startup_s"] = time.monotonic() - t
            result["behind"] = [("start-up", str(exc).splitlines()[0])]
            return result
        result["startup_s"] = time.monotonic() - t
        if not all(ready.values()):
            result["behind"] = [(k, "not ready in time") for k, ok in ready.items() if not ok]
            return result
        urls = {r.spec.name: r.url for r in launcher.running}
        engine = sa.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1) if db_url
                                  else f"sqlite:///{data_dir / 'metrics-collector' / 'metrics-collector.db'}")  # fmt: skip
        agents = [r.url for r in launcher.running if r.spec.module == "node_agent"]
        async with httpx.AsyncClient(timeout=30) as client:
            # warm-up: every stage has seen a NodeMetric round before the window opens
            await asyncio.sleep(NODEMETRIC_S + 15)
            names = [spec.node_name(i) for i in range(n)]
            step_nodes = names[:: max(1, n // args.steps)][: args.steps]
            window_s = args.intervals * NODEMETRIC_S
            first = clock.now_ms() + 5_000
            fresh = Freshness(step_nodes, first, NODEMETRIC_S * 1000)
            base = await baseline(fresh, engine, urls, client)
            for node, at in fresh.step_ms.items():
                await bus.publish(subjects.sim("usage_override"), bus.stamp(SimMutation(op="usage_override", payload={
                    "node": node, "pod_key": None, "cpu_factor": STEP_FACTOR, "memory_factor": 1.0,
                    "from_ms": at, "to_ms": None})))  # fmt: skip
            groups = {r.spec.name: [r.process.pid] for r in launcher.running}
            if launcher.nats and launcher.nats.process:
                groups["nats-server"] = [launcher.nats.process.pid]
            if db_url:
                groups["postgresql (all)"] = postgres_pids()
            meter = CpuMeter(groups)
            seq0 = await stream_last_seq(bus, subjects.METRICS_STREAM)
            am0 = await agent_metrics(client, agents)
            w0_ms = clock.now_ms()
            meter.start()
            # the window, and for freshness at most two NodeMetric intervals after the last step
            last_step_s = (max(fresh.step_ms.values()) - clock.now_ms()) / 1000
            polling = asyncio.create_task(poll_freshness(
                fresh, clock, engine, urls, client, base, time.monotonic() + last_step_s + 2 * NODEMETRIC_S + 10))
            await asyncio.sleep(max(0.0, window_s - (clock.now_ms() - w0_ms) / 1000))
            meter.stop()
            w1_ms = clock.now_ms()
            seq1 = await stream_last_seq(bus, subjects.METRICS_STREAM)
            am1 = await agent_metrics(client, agents)
            streams = await stream_report(bus)
            await polling
            await asyncio.sleep(REPORT_S + 5)  # what was published in the window is persisted by now
            with engine.connect() as conn:
                node_rows = conn.execute(sa.text("SELECT count(*) FROM node_samples WHERE ts >= :a AND ts < :b"),
                                         {"a": w0_ms, "b": w1_ms}).scalar()  # fmt: skip
                pod_rows = conn.execute(sa.text("SELECT count(*) FROM pod_samples WHERE ts >= :a AND ts < :b"),
                                        {"a": w0_ms, "b": w1_ms}).scalar()  # fmt: skip
            window = (w1_ms - w0_ms) / 1000
            due = n / REPORT_S
            result.update(
                window_s=window, due_per_s=due, published_per_s=(seq1 - seq0) / window,
                persisted_per_s=node_rows / window, pod_rows_per_s=pod_rows / window,
                freshness=fresh.summary(), cpu=meter.share, rss=meter.rss, streams=streams,
                rounds=am1["koord_agent_collect_rounds_total"] - am0["koord_agent_collect_rounds_total"],
                skipped=am1["koord_agent_skipped_rounds_total"] - am0["koord_agent_skipped_rounds_total"],
                round_s=((am1["koord_agent_round_seconds_sum"] - am0["koord_agent_round_seconds_sum"])
                         / max(am1["koord_agent_round_seconds_count"] - am0["koord_agent_round_seconds_count"], 1)),
            )  # fmt: skip
            ext = urls["scheduler-extender"]
            default_candidates = max(100, n * (50 - n // 125) // 100) if n > 100 else n
            result["extender"] = {
                f"{min(default_candidates, n)} candidates": await extender_latency(client, ext, names, default_candidates,
                                                                                 args.latency_pods),
                f"all {n} nodes": await extender_latency(client, ext, names, n, args.latency_pods),
            }  # fmt: skip
            result["dashboard"] = await dashboard_latency(client, urls["metrics-collector"])
            result["behind"] = judge(result)
            if result["behind"] and args.profile_s > 0:
                busiest = max((r for r in launcher.running), key=lambda r: meter.share.get(r.spec.name, 0))
                result["profile"] = (busiest.spec.name, profile(busiest.process.pid, args.profile_s,
                                                                workdir / f"profile-{n}-{busiest.spec.name}"))  # fmt: skip
        engine.dispose()
        return result
    finally:
        if bus is not None:
            await bus.close()
        launcher.stop()
        if db_url:
            with contextlib.suppress(Exception):
                drop_database(pg, db_name)


def judge(r: dict) -> list[tuple[str, str]]:
    """Which service fell behind at this size, and the figure that says so."""
    behind = []
    due, n = r["due_per_s"], r["nodes"]
    # rows are counted by measurement time and rounds by the agents' counters, both over the window;
    # the stream's messages by when they were stored (a report interval's worth may straddle an edge)
    if r["skipped"] > 0 or r["rounds"] < 0.95 * r["window_s"] * r["agents"]:
        behind.append(("node-agent", (f"{r['rounds']:.0f} rounds of {r['window_s'] * r['agents']:.0f} due, "
                                     f"{r['skipped']:.0f} skipped, round {r['round_s'] * 1000:.0f} ms")))  # fmt: skip
    if r["persisted_per_s"] < 0.95 * due:
        behind.append(("metrics-collector", f"persisted {r['persisted_per_s']:.0f}/s of {due:.0f}/s due"))
    for stream, rows in r["streams"].items():
        for c in rows:
            if c["consumer"] != "(tail)" and c["pending"] > n / REPORT_S * REPORT_S:
                behind.append((c["consumer"], f"{c['pending']} messages pending on {stream}"))
    count, _, p99, _ = r["freshness"]["extender"]
    steps = r["freshness"]["collector"][0] or 1
    if count < steps or (p99 is not None and p99 > 2 * NODEMETRIC_S):
        behind.append(("scheduler-extender feed", f"freshness p99 {p99} s, {count}/{steps} steps seen"))
    return behind


def report(r: dict) -> None:
    n = r["nodes"]
    print(f"\n== {n} nodes x {r['pods'] // max(n, 1)} pods ({r['pods']} pods), {r['backend']}, "
          f"{r['agents']} agent process(es), QoS {'on' if r['qos'] else 'off'}, ready in {r.get('startup_s', 0):.0f} s")  # fmt: skip
    if "window_s" not in r:
        print(f"   behind: {r.get('behind')}")
        return
    print(f"   window {r['window_s']:.0f} s: samples due {r['due_per_s']:.0f}/s, published {r['published_per_s']:.1f}/s, "
          f"persisted {r['persisted_per_s']:.1f}/s ({r['pod_rows_per_s']:.0f} pod rows/s)")  # fmt: skip
    print(f"   agent rounds {r['rounds']:.0f} (skipped {r['skipped']:.0f}), mean round {r['round_s'] * 1000:.0f} ms")
    print("   freshness after a usage step (s)   seen   p50    p99   moved the right way")
    for stage, (count, p50, p99, rose) in r["freshness"].items():
        print(f"     {stage:30s} {count:5d} {fmt_s(p50)} {fmt_s(p99)}   {rose}/{count}")
    print("   extender over HTTP (ms)          filter p50/p99     prioritize p50/p99")
    for mode, v in r["extender"].items():
        f, p = v["filter"], v["prioritize"]
        print(f"     {mode:30s} {f[0]:7.1f} {f[1]:7.1f}   {p[0]:7.1f} {p[1]:7.1f}")
    print("   dashboard API (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in r["dashboard"].items() if v is not None))
    print("   CPU (% of one core) and RSS (MB)")
    for name in sorted(r["cpu"], key=lambda k: -r["cpu"][k]):
        print(f"     {name:30s} {100 * r['cpu'][name]:6.1f} %  {r['rss'][name]:7.0f} MB")
    print(f"     {'total':30s} {100 * sum(r['cpu'].values()):6.1f} %")
    print("   consumers (pending / ack pending / redelivered)")
    for stream, rows in r["streams"].items():
        for c in rows:
            print(f"     {stream:18s} {c['consumer']:20s} {c['pending']:7d} {c['ack_pending']:6d} {c['redelivered']:6d}")
    for who, why in r["behind"]:
        print(f"   BEHIND: {who}: {why}")
    if r.get("profile"):
        name, rows = r["profile"]
        print(f"   profile of {name} (py-spy): self %, inclusive %")
        for f, own, incl in rows:
            print(f"     {own:5.1f} {incl:5.1f}  {f}")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1000", help="the ramp: comma-separated node counts")
    ap.add_argument("--pods", type=int, default=30, help="online pods per node")
    ap.add_argument("--intervals", type=int, default=2, help="NodeMetric intervals (60 s) measured per size")
    ap.add_argument("--steps", type=int, default=20, help="nodes given a usage step")
    ap.add_argument("--agent-shards", type=int, default=0, help="sim node-agent processes (0: the launcher's choice)")
    ap.add_argument("--qos", action=argparse.BooleanOptionalAction, default=True,
                    help="the node agents' QoS rounds (on by default, as deployed)")
    ap.add_argument("--latency-pods", type=int, default=40)
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--profile-s", type=float, default=15)
    ap.add_argument("--keep", action="store_true", help="keep the logs and data of every run")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="koord-scale-"))
    os.environ.setdefault("KOORD_LOG_LEVEL", "WARNING")  # the launcher hands it to every service
    sizes = [int(x) for x in args.nodes.split(",")]
    print(f"machine: {os.cpu_count()} cores; data and logs in {workdir}")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    largest = None
    try:
        for n in sizes:
            r = await run_size(n, args, workdir)
            report(r)
            if r.get("behind"):
                print(f"\nstopped at {n} nodes: {', '.join(w for w, _ in r['behind'])} fell behind")
                break
            largest = n
            if stop.is_set():
                break
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nlargest size sustained: {largest if largest else 'none of ' + args.nodes} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
