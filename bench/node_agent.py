"""Node agent costs: real-mode collection per pod per cycle, and sim-mode node-samples/s.

real   RealCollector.collect over a fake cgroup v2 tree (systemd layout, kernel file formats) of
       N pods with C containers each, plus /proc: the cost per pod per cycle. Floor, same run:
       bare open+read of exactly the same files (cpu.stat and memory.stat of every pod and
       container dir, /proc/stat, /proc/meminfo), no parsing, no rates.
sim    SimAgent.collect over M simulated nodes (usage from the simulated cluster into the rings):
       node-samples/s. Floor, same run: the same usage_snapshot calls building the same
       per-pod (cpu, memory) dicts, with no rings. Report building (NodeMetricSample every 10 s
       and NodeMetric every 60 s of every node) is timed separately and amortised per node-second.

    .venv/bin/python bench/node_agent.py [--pods 200] [--containers 2] [--cycles 50] [--nodes 1000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path

# Run as `python bench/node_agent.py`, this file's folder comes first on sys.path and its name
# would shadow the node_agent package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from koordcommon.records import ContainerSpec, PodRecord
from koordsim import traces
from koordsim.cluster import SimCluster, SimSpec
from node_agent.collect.cgroups import CgroupLayout, CgroupReader
from node_agent.collect.node import RealCollector
from node_agent.collect.procfs import ProcReader
from node_agent.core.pods import PodInfo
from node_agent.settings import AgentSettings
from node_agent.sim_mode import SimAgent

CPU_STAT = "usage_usec {u}\nuser_usec {h}\nsystem_usec {h}\nnr_periods 100\nnr_throttled 3\nthrottled_usec 900\n"
MEM_STAT = (
    "anon 1000\nfile 5000\nkernel 100\nshmem 0\nfile_mapped 40\ninactive_anon {a}\nactive_anon {a}\n"
    "inactive_file 2000\nactive_file 3000\nunevictable 0\nslab 10\npgfault 5\n"
)


def build_tree(base: Path, pods: int, containers: int, step: int) -> tuple[list[PodInfo], list[Path]]:
    root = base / "cgroup"
    (root / "kubepods.slice").mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    layout = CgroupLayout(root, "v2", "systemd")
    infos, files = [], []
    for i in range(pods):
        uid = f"00000000-0000-4000-8000-{i:012d}"
        names = [f"c{j}" for j in range(containers)]
        rec = PodRecord(namespace="bench", name=f"p{i}", uid=uid, phase="Running",
                        containers=[ContainerSpec(n, {"cpu": 100}, {"cpu": 200}) for n in names],
                        container_ids={n: f"containerd://{i:08x}{j:024x}" for j, n in enumerate(names)})
        info = PodInfo.from_record(rec)
        infos.append(info)
        pod_rel = layout.pod_dir(uid, info.kube_qos)
        dirs = [pod_rel] + [layout.container_dir(pod_rel, cid) for _, cid in info.container_ids]
        for rel in dirs:
            d = root / rel
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpu.stat").write_text(CPU_STAT.format(u=1_000_000 * (step + 1), h=500_000 * (step + 1)))
            (d / "memory.stat").write_text(MEM_STAT.format(a=4096 * (i + 1)))
            files += [d / "cpu.stat", d / "memory.stat"]
    proc = base / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "stat").write_text(f"cpu  {1000 + step * 50} 0 500 90000 10 5 5 0 0 0\ncpu0 1 0 1 1 0 0 0 0 0 0\n")
    (proc / "meminfo").write_text("MemTotal: 16000000 kB\nMemFree: 8000000 kB\nMemAvailable: 12000000 kB\n")
    files += [proc / "stat", proc / "meminfo"]
    return infos, files


def bench_real(pods: int, containers: int, cycles: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        infos, files = build_tree(base, pods, containers, 0)
        layout = CgroupLayout.detect(base / "cgroup")
        collector = RealCollector(ProcReader(base / "proc"), CgroupReader(layout))
        collector.collect(infos, 0)  # baseline
        gc.collect()
        t = time.perf_counter()
        for c in range(1, cycles + 1):
            r = collector.collect(infos, c * 1_000_000_000)
        agent_s = (time.perf_counter() - t) / cycles
        assert len(r.pods) == pods and len(r.containers) == pods * containers
        t = time.perf_counter()
        for _ in range(cycles):
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()
        floor_s = (time.perf_counter() - t) / cycles
    per_pod = agent_s / pods * 1e6
    floor_per_pod = floor_s / pods * 1e6
    print(f"real mode: {pods} pods x {containers} containers, cgroup v2 systemd, {cycles} cycles")
    print(f"  collection        {agent_s * 1000:8.2f} ms/cycle  {per_pod:8.1f} us/pod/cycle")
    print(f"  floor (bare read) {floor_s * 1000:8.2f} ms/cycle  {floor_per_pod:8.1f} us/pod/cycle"
          f"  ({len(files)} files)")
    print(f"  floor / collection = {floor_s / agent_s:.2f}")


async def bench_sim(nodes: int, rounds: int) -> None:
    t = time.perf_counter()
    cluster = SimCluster(SimSpec(nodes=nodes, seed=1))
    await cluster.start()
    setup = time.perf_counter() - t
    agent = SimAgent(cluster, AgentSettings(mode="sim"), publish=None)
    await agent.refresh()
    names = list(agent.reporter.node_names())
    pods = sum(len(agent.pods_on(n)) for n in names)
    t0 = (cluster.now_ms() // 60_000 + 1) * 60_000
    agent.collect(t0 - 1000)  # warm caches
    gc.collect()
    t = time.perf_counter()
    for i in range(rounds):
        agent.collect(t0 + i * 1000)
    agent_s = time.perf_counter() - t
    uid_of = agent._uid_of
    t = time.perf_counter()
    for i in range(rounds):
        for n in names:
            snap = cluster.usage_snapshot(n, t0 + i * 1000)
            _ = {uid_of.get(k): (float(u.cpu_milli), float(u.memory_bytes)) for k, u in snap.pods.items()}
    floor_s = time.perf_counter() - t
    last = t0 + (rounds - 1) * 1000
    hs = list(agent.reporter.nodes.values())
    t = time.perf_counter()
    samples = [h.sample(last, 10.0) for h in hs]
    sample_s = time.perf_counter() - t
    t = time.perf_counter()
    metrics = [h.node_metric(last) for h in hs]
    metric_s = time.perf_counter() - t
    assert all(samples) and all(metrics)
    rate = nodes * rounds / agent_s
    floor_rate = nodes * rounds / floor_s
    # per simulated node-second: collect + 1/10 of a sample + 1/60 of a NodeMetric
    full = agent_s / (nodes * rounds) + sample_s / nodes / 10 + metric_s / nodes / 60
    print(f"sim mode: {nodes} nodes, {pods} pods, {rounds} rounds (cluster genesis {setup:.1f} s)")
    print(f"  collect into rings   {rate:10.0f} node-samples/s")
    print(f"  floor (snapshots)    {floor_rate:10.0f} node-samples/s   collect / floor = {rate / floor_rate:.2f}")
    print(f"  NodeMetricSample     {sample_s / nodes * 1e6:8.0f} us/node   NodeMetric {metric_s / nodes * 1e6:8.0f} us/node")
    print(f"  with reports         {1 / full:10.0f} node-samples/s (one process keeps up with "
          f"{1 / full:.0f} nodes at 1 s collection, real time)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--containers", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    print(f"traces (sim mode): {traces.trace_source().describe()}", flush=True)
    bench_real(args.pods, args.containers, args.cycles)
    asyncio.run(bench_sim(args.nodes, args.rounds))


if __name__ == "__main__":
    main()
