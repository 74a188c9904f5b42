"""Soak: the whole system as `koordctl up` runs it, for a set time, with services and NATS
killed at random along the way.

The launcher starts everything exactly as the demo does (a private NATS server with TLS and one
nkey identity per service, the API token, the six services as processes on SQLite, the sim node
agent split into its shards); this process publishes the simulated cluster, plays kube-scheduler
and the batch users for it (koordctl's sim driver) and sends the extender a steady stream of
filter + prioritize calls of its own. Every `--kill-every` seconds after the warm-up a random
target (any service process, or the NATS server) is killed with SIGKILL and started again, as an
orchestrator would. The kills stop one kill interval before the end, the collector is given time
to drain, and the run reports:

* memory of every service: RSS at the start and end of each process's life after its warm-up
  (`--memory-warmup`), the peak, and the growth rate (least squares over each life, weighted by
  its length) in MB/h. The node agent's history rings are allocated whole but their pages are
  touched as they first fill (pod rings in 5 minutes, node rings in 30 on the sim agent), so its
  steady state shows only after `--memory-warmup 1860` in a run longer than that. The growth is
  also fitted over each half of the longest life judged: a slope that falls in the second half is
  memory levelling off, one that holds is a leak. `--memory-out DIR` writes every RSS sample
  (memory.csv) and their plot (memory.png);
* samples: published (accepted by JetStream: the KOORD_METRICS stream's messages), stored (the
  collector's node rows), dead-lettered, lost (published, not stored, not dead-lettered), rows
  stored twice for one (node, time), and the duplicates the collector dropped (redeliveries);
* redeliveries per durable consumer (deliveries beyond the messages delivered, from JetStream's
  own accounting: the server's monitoring endpoint) and what is still pending;
* dead letters by service and reason, error lines in every service's log, and the extender calls
  that failed (refused while it was down are counted apart).

    .venv/bin/python bench/soak.py                        # 10 minutes, 1,000 nodes, a kill a minute
    .venv/bin/python bench/soak.py --duration 240 --nodes 200 --kill-every 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from koordcommon.bus import Bus
from koordctl.driver import SimDriver
from koordctl.launcher import DemoPlan, Launcher
from koordsim.cluster import SimCluster, SimSpec

SAMPLE_EVERY_S = 5.0


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass
class Life:
    """One process of a service, from start to kill (or the end); its memory is judged after its
    warm-up (imports, caches, buffers filled)."""

    pid: int
    started: float
    warmup_s: float
    points: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, RSS MB)

    def judged(self) -> list[tuple[float, float]]:
        return [(t, m) for t, m in self.points if t - self.started >= self.warmup_s]


class Memory:
    def __init__(self, warmup_s: float) -> None:
        self.warmup_s = warmup_s
        self.lives: dict[str, list[Life]] = defaultdict(list)

    def sample(self, processes: dict[str, int], now: float) -> None:
        for name, pid in processes.items():
            lives = self.lives[name]
            if not lives or lives[-1].pid != pid:
                lives.append(Life(pid, now, self.warmup_s))
            mb = rss_mb(pid)
            if mb is not None:
                lives[-1].points.append((now, mb))

    def summary(self) -> dict[str, dict]:
        out = {}
        for name, lives in self.lives.items():
            slopes, weights, judged_all = [], [], []
            for life in lives:
                pts = life.judged()
                judged_all += pts
                if len(pts) >= 3 and pts[-1][0] - pts[0][0] >= 30:
                    t = np.array([p[0] for p in pts])
                    m = np.array([p[1] for p in pts])
                    slopes.append(np.polyfit(t - t[0], m, 1)[0] * 3600)  # MB per hour
                    weights.append(t[-1] - t[0])
            peak = max((m for life in lives for _, m in life.points), default=0.0)
            first = judged_all[0][1] if judged_all else None
            last = lives[-1].judged()[-1][1] if lives and lives[-1].judged() else None
            growth = float(np.average(slopes, weights=weights)) if slopes else None
            longest = max(lives, key=lambda life: len(life.judged()), default=None)
            out[name] = {"lives": len(lives), "first_mb": first, "last_mb": last, "peak_mb": peak,
                         "growth_mb_h": growth, "judged_s": sum(weights),
                         "halves_mb_h": halves(longest.judged()) if longest else None}  # fmt: skip
        return out

    def write_csv(self, path: Path, t0: float) -> None:
        """Every RSS sample: process, pid, seconds since the start, MB."""
        with path.open("w") as f:
            f.write("process,pid,t_s,rss_mb\n")
            for name, lives in sorted(self.lives.items()):
                for life in lives:
                    for t, mb in life.points:
                        f.write(f"{name},{life.pid},{t - t0:.1f},{mb:.1f}\n")

    def plot(self, path: Path, t0: float) -> None:
        """RSS of every process over the run, its warm-up shaded (matplotlib, when installed)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"   (no matplotlib: {path.name} not drawn)")
            return
        fig, ax = plt.subplots(figsize=(10, 5))
        for name, lives in sorted(self.lives.items()):
            for i, life in enumerate(lives):
                t = [(p[0] - t0) / 60 for p in life.points]
                ax.plot(t, [p[1] for p in life.points], label=name if i == 0 else None,
                        color=f"C{sorted(self.lives).index(name)}")  # fmt: skip
        ax.axvspan(0, self.warmup_s / 60, color="0.9", label="warm-up (not judged)")
        ax.set_xlabel("minutes")
        ax.set_ylabel("RSS (MB)")
        ax.set_title("memory of every process over the soak")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def halves(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Growth (MB/h, least squares) over the first and the second half of a judged span: a
    slope that falls in the second half is memory levelling off, one that holds is a leak."""
    if len(points) < 6 or points[-1][0] - points[0][0] < 120:
        return None
    mid = (points[0][0] + points[-1][0]) / 2
    out = []
    for part in ([p for p in points if p[0] <= mid], [p for p in points if p[0] >= mid]):
        t = np.array([p[0] for p in part])
        m = np.array([p[1] for p in part])
        out.append(float(np.polyfit(t - t[0], m, 1)[0] * 3600))
    return out[0], out[1]


class Jetstream:
    """JetStream's accounting from the server's monitoring endpoint (no bus identity needed)."""

    def __init__(self, port: int, namespace: str) -> None:
        self.url = f"http://127.0.0.1:{port}/jsz?streams=true&consumers=true"
        self.prefix = f"{namespace}_"

    async def streams(self, client: httpx.AsyncClient) -> dict[str, dict]:
        data = (await client.get(self.url, timeout=10)).json()
        out = {}
        for account in data.get("account_details") or []:
            for s in account.get("stream_detail") or []:
                if s["name"].startswith(self.prefix):
                    out[s["name"][len(self.prefix):]] = s
        return out


async def prometheus(client: httpx.AsyncClient, url: str, names: tuple[str, ...]) -> dict[tuple, float]:
    """{(metric, labels...): value} of the named series of one process's /metrics."""
    out: dict[tuple, float] = {}
    text = (await client.get(url + "/metrics", timeout=5)).text
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            labels = tuple(sorted(kv for kv in line[line.find("{") + 1:line.find("}")].split(",") if kv)) \
                if "{" in line else ()  # fmt: skip
            out[(name, *labels)] = float(line.rsplit(" ", 1)[1])
    return out


class Counters:
    """Process counters summed over restarts: a value lower than the last seen is a new process
    (counting from 0); what a killed process counted after its last scrape is lost (so: at least)."""

    def __init__(self) -> None:
        self.last: dict[tuple, float] = {}
        self.total: Counter = Counter()

    def update(self, service: str, values: dict[tuple, float]) -> None:
        for key, v in values.items():
            k = (service, *key)
            prev = self.last.get(k, 0.0)
            self.total[k] += v - prev if v >= prev else v
            self.last[k] = v


async def extender_load(url: str, names: list[str], rps: float, stop: asyncio.Event, stats: Counter) -> None:
    """filter + prioritize of a new probe pod `rps` times a second over 100 random candidates."""
    rng = random.Random(7)
    async with httpx.AsyncClient(timeout=5) as client:
        while not stop.is_set():
            t = time.monotonic()
            pod = {"metadata": {"name": f"soak-{uuid.uuid4().hex[:8]}", "namespace": "soak", "uid": str(uuid.uuid4())},
                   "spec": {"containers": [{"name": "c", "resources": {
                       "requests": {"cpu": f"{rng.choice([250, 500, 1000, 2000])}m", "memory": "1Gi"}}}]}}  # fmt: skip
            body = {"Pod": pod, "NodeNames": rng.sample(names, min(100, len(names)))}
            for verb in ("filter", "prioritize"):
                try:
                    r = await client.post(f"{url}/{verb}", json=body)
                    ok = r.status_code == 200 and (verb != "filter" or not r.json().get("Error"))
                    stats["ok" if ok else "failed"] += 1
                except httpx.HTTPError:
                    stats["refused (down)"] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, 1 / rps - (time.monotonic() - t)))


def log_errors(data_dir: Path) -> dict[str, Counter]:
    """Error lines of every log, by service and message."""
    out: dict[str, Counter] = {}
    for path in sorted(data_dir.glob("*.log")):
        c: Counter = Counter()
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                if "Traceback" in line or line.startswith("[ERR]") or " [ERR] " in line:
                    c[line[:120]] += 1
                continue
            if isinstance(rec, dict) and rec.get("level") in ("ERROR", "CRITICAL"):
                c[str(rec.get("msg"))[:120]] += 1
        out[path.stem] = c
    return out


async def run(args) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="koord-soak-"))
    env = {"KOORD_LOG_LEVEL": "INFO"}
    plan = DemoPlan(nodes=args.nodes, data_dir=workdir, private_nats=True, nats_monitor=True, record_state=False,
                    extra_env=env, agent_shards=args.agent_shards)  # fmt: skip
    launcher = Launcher(plan)
    rng = random.Random(args.seed)
    memory, counters, extender_stats = Memory(args.memory_warmup), Counters(), Counter()
    kills: list[tuple[float, str, float]] = []  # (at s, target, s until ready again)
    stop_load = asyncio.Event()
    tasks: list[asyncio.Task] = []
    bus = cluster = None
    print(f"soak: {args.nodes} nodes, {args.duration:.0f} s, a kill every {args.kill_every:.0f} s, "
          f"extender {args.extender_rps:g} pods/s; data and logs in {workdir}")  # fmt: skip
    try:
        nats_url = launcher.start_nats()
        js = Jetstream(launcher.nats.monitor_port, launcher.namespace)
        bus = Bus(nats_url, service="koordctl", namespace=launcher.namespace,
                  credentials=launcher.bus_credentials("koordctl"))  # fmt: skip
        await bus.connect()
        spec = SimSpec(nodes=args.nodes, batch_stream=True, batch_tasks_per_node_hour=args.batch_per_node_hour,
                       batch_trace_offset_s=11 * 3600)  # fmt: skip
        cluster = SimCluster(spec, bus=bus, genesis=True)
        await cluster.start()
        launcher.start_services()
        ready = await launcher.wait_ready(args.ready_timeout)
        assert all(ready.values()), f"not ready: {ready}"
        t0 = time.monotonic()
        urls = {r.spec.name: r.url for r in launcher.running}
        print(f"ready: {', '.join(urls)} and nats-server ({len(launcher.running)} processes)", flush=True)
        names = [spec.resolved().node_name(i) for i in range(args.nodes)]
        driver = SimDriver(cluster, urls["scheduler-extender"])
        tasks.append(asyncio.create_task(driver.run(stop_load, batch_stream=True)))
        tasks.append(asyncio.create_task(
            extender_load(urls["scheduler-extender"], names, args.extender_rps, stop_load, extender_stats)))

        def processes() -> dict[str, int]:
            out = {r.spec.name: r.process.pid for r in launcher.running}
            if launcher.nats and launcher.nats.process:
                out["nats-server"] = launcher.nats.process.pid
            return out

        watched = ("koord_bus_deadletter_total", "koord_collector_duplicate_rows_total")

        async def scrape(client: httpx.AsyncClient) -> None:
            for r in launcher.running:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    counters.update(r.spec.name, await prometheus(client, r.url, watched))

        async with httpx.AsyncClient() as client:
            next_kill = t0 + args.warmup
            end_kills = t0 + args.duration - args.kill_every
            while (now := time.monotonic()) < t0 + args.duration:
                memory.sample(processes(), now)
                await scrape(client)
                if now >= next_kill and now < end_kills:
                    target = rng.choice([*sorted(urls), "nats-server"])
                    killed_at = time.monotonic()
                    if target == "nats-server":
                        launcher.nats.process.kill()
                        launcher.nats.process.wait()
                        await asyncio.sleep(2)
                        launcher.nats.start()
                    else:
                        await scrape(client)  # the counters as they stand before the kill
                        launcher.restart(target)
                    back = await launcher.wait_ready(120)
                    took = time.monotonic() - killed_at
                    kills.append((killed_at - t0, target, took if all(back.values()) else float("nan")))
                    print(f"  {killed_at - t0:6.0f} s  kill -9 {target:22s} all ready again in {took:5.1f} s"
                          + ("" if all(back.values()) else f"  NOT READY: {[k for k, v in back.items() if not v]}"),
                          flush=True)
                    next_kill += args.kill_every
                await asyncio.sleep(SAMPLE_EVERY_S)
            stop_load.set()
            await scrape(client)
            memory.sample(processes(), time.monotonic())
            # the node agents stop publishing (SIGTERM: their last samples go out), then the
            # collector drains: its durable on the samples has nothing pending or unacked
            agents = [r for r in launcher.running if r.spec.module == "node_agent"]
            for r in agents:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(r.process.pid, signal.SIGTERM)
            for r in agents:
                await asyncio.to_thread(r.process.wait, 30)
            deadline = time.monotonic() + args.drain_timeout
            while True:
                streams = await js.streams(client)
                metrics = streams.get("KOORD_METRICS", {})
                coll = {c["name"]: c for c in metrics.get("consumer_detail") or []}.get("metrics-collector", {})
                if coll and coll["num_pending"] == 0 and coll["num_ack_pending"] == 0:
                    break
                if time.monotonic() > deadline:
                    print(f"  collector not drained after {args.drain_timeout:.0f} s: {coll.get('num_pending')} pending, "
                          f"{coll.get('num_ack_pending')} unacked")  # fmt: skip
                    break
                await asyncio.sleep(1)
            await scrape(client)
        wall = time.monotonic() - t0
    finally:
        stop_load.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if cluster is not None:
            with contextlib.suppress(Exception):
                await cluster.close()
        launcher.stop_services()
        if bus is not None:
            with contextlib.suppress(Exception):
                await bus.close()

    # ---- the figures: JetStream's accounting once drained, the collector's rows once stopped
    launcher.stop_nats()
    db = sqlite3.connect(workdir / "metrics-collector" / "metrics-collector.db")
    stored = db.execute("SELECT COUNT(*) FROM node_samples").fetchone()[0]
    twice = db.execute("SELECT COUNT(*) FROM (SELECT node, ts FROM node_samples GROUP BY node, ts "
                       "HAVING COUNT(*) > 1)").fetchone()[0]  # fmt: skip
    db.close()
    published = streams.get("KOORD_METRICS", {}).get("state", {}).get("messages", 0)
    deadletters = {k: v for k, v in counters.total.items() if k[1] == "koord_bus_deadletter_total" and v}
    dl_metrics = sum(v for k, v in deadletters.items() if k[0] == "metrics-collector" and 'stream="KOORD_METRICS"' in k)
    dropped = sum(v for k, v in counters.total.items() if k[1] == "koord_collector_duplicate_rows_total"
                  and 'table="node_samples"' in k)  # fmt: skip
    lost = published - stored - dl_metrics

    print(f"\n== {wall / 60:.1f} minutes, {len(kills)} kills "
          f"({', '.join(f'{k} x{n}' for k, n in Counter(t for _, t, _ in kills).most_common())})")
    slowest = max((k for k in kills if k[2] == k[2]), key=lambda k: k[2], default=None)
    if slowest:
        print(f"   back ready after a kill: median {np.median([k[2] for k in kills]):.1f} s, "
              f"slowest {slowest[2]:.1f} s ({slowest[1]})")  # fmt: skip
    print(f"\n   memory (RSS MB, judged after {args.memory_warmup:.0f} s of a life; growth over the first /"
          " second half of the longest life judged)"
          "\n                                  lives  after warm-up  at the end   peak   growth MB/h (over s)   halves")
    for name, m in sorted(memory.summary().items()):
        g = "      -" if m["growth_mb_h"] is None else f"{m['growth_mb_h']:+7.1f}"
        first = "    -" if m["first_mb"] is None else f"{m['first_mb']:5.0f}"
        last = "    -" if m["last_mb"] is None else f"{m['last_mb']:5.0f}"
        h = "-" if m["halves_mb_h"] is None else "{:+.1f} / {:+.1f}".format(*m["halves_mb_h"])
        print(f"   {name:30s} {m['lives']:5d}  {first:>13s}  {last:>10s}  {m['peak_mb']:5.0f}   {g} ({m['judged_s']:.0f})"
              f"   {h}")
    if args.memory_out:
        out = Path(args.memory_out)
        out.mkdir(parents=True, exist_ok=True)
        memory.write_csv(out / "memory.csv", t0)
        memory.plot(out / "memory.png", t0)
        print(f"   every sample in {out / 'memory.csv'}, the plot in {out / 'memory.png'}")
    print(f"\n   samples: published {published}, stored {stored}, dead-lettered {dl_metrics:.0f}, lost {lost}, "
          f"stored twice {twice}; duplicates dropped by the collector (redeliveries) >= {dropped:.0f}")
    print("\n   consumers: deliveries beyond the messages delivered (redeliveries), pending, unacked")
    for stream, s in sorted(streams.items()):
        for c in s.get("consumer_detail") or []:
            if not c.get("config", {}).get("durable_name") and c["name"].startswith(("ord", "_")):
                continue
            d = c["delivered"]
            print(f"   {stream:22s} {c['name']:22s} {d['consumer_seq'] - d['stream_seq']:6d} "
                  f"{c['num_pending']:7d} {c['num_ack_pending']:6d}")
    print(f"\n   dead letters: {streams.get('KOORD_DEADLETTER', {}).get('state', {}).get('messages', 0)} in "
          f"KOORD_DEADLETTER; counted by the services (at least):")  # fmt: skip
    for key, v in sorted(deadletters.items()):
        print(f"     {key[0]:22s} {' '.join(key[2:])}: {v:.0f}")
    if not deadletters:
        print("     none")
    print(f"\n   extender calls: {dict(extender_stats)}; the sim driver placed {len(driver.placed)} pods, "
          f"{driver.errors} attempts to place one failed (extender or bus down; tried again)")  # fmt: skip
    errors = log_errors(workdir)
    # the launcher's reachability probe (a bare TCP connect) costs the TLS server one such line
    print("\n   error lines in the logs (nats: `TLS handshake error: EOF` is the launcher's TCP probe):")
    for name, c in errors.items():
        if c:
            print(f"     {name}: {sum(c.values())}: " + "; ".join(f"{msg} x{n}" for msg, n in c.most_common(3)))
    if not any(errors.values()):
        print("     none")
    if args.keep:
        print(f"\nlogs and data kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if lost == 0 and twice == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600, help="seconds from ready to the end of the load")
    ap.add_argument("--nodes", type=int, default=1000, help="simulated nodes")
    ap.add_argument("--kill-every", type=float, default=60, help="seconds between two kills")
    ap.add_argument("--warmup", type=float, default=60, help="seconds before the first kill")
    ap.add_argument("--memory-warmup", type=float, default=60,
                    help="seconds of a process's life before its memory is judged")
    ap.add_argument("--extender-rps", type=float, default=20, help="probe pods sent to filter + prioritize a second")
    ap.add_argument("--batch-per-node-hour", type=float, default=60, help="batch tasks submitted per node and hour")
    ap.add_argument("--agent-shards", type=int, default=0, help="sim node-agent processes (0: the launcher's choice)")
    ap.add_argument("--seed", type=int, default=1, help="which targets are killed, in which order")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--drain-timeout", type=float, default=120)
    ap.add_argument("--keep", action="store_true", help="keep the logs and data")
    ap.add_argument("--memory-out", default="", help="folder for memory.csv (every RSS sample) and memory.png")
    args = ap.parse_args()
    # this process's own bus client reconnects when NATS is killed: that is the point, not news
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    loop_stop = signal.getsignal(signal.SIGINT)  # Ctrl-C ends the run and still stops every process
    try:
        return asyncio.run(run(args))
    finally:
        signal.signal(signal.SIGINT, loop_stop)


if __name__ == "__main__":
    sys.exit(main())
