"""What the services keep as simulated days go by: retained memory by allocation site, measured
in-process on the what-if replay (the services' own cores on one simulated clock).

A soak runs in wall-clock time, so it cannot show a day of pod churn, and an RSS slope mixes a
growing live cluster with state that outlives what it was about. This replays the 14 Alibaba 2018
machines with the Alibaba 2017 batch stream (pods arrive, run, are deleted, all along) through
the node agent, slo-controller, scheduler-extender and descheduler, takes a tracemalloc snapshot
at two simulated instants once the batch backlog has formed, and prints what was allocated
between them and is still held, by the innermost project frame that allocated it.

What grows by design is printed apart: the replay's own ledger (a row a minute) and the batch
driver's record of every pod's life (the report's queueing and completion figures). Anything else
that grows with the hours is state kept for pods, nodes or workloads that are gone.

    .venv/bin/python bench/state_growth.py [--hours 48] [--from-hour 12] [--top 15]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from koordwhatif.config import WhatIfConfig
from koordwhatif.engine import Replay
from koordwhatif.scenario import spec_for

ROOT = str(Path(__file__).resolve().parents[1]) + "/"
BY_DESIGN = ("libs/koordwhatif/", "libs/koordsim/src/koordsim/jobs.py")  # the report's own records


def site(tb: tracemalloc.Traceback) -> str:
    """The innermost frame in the project's code (a library call is charged to its caller)."""
    for frame in reversed(tb):
        if frame.filename.startswith(ROOT) and "/.venv/" not in frame.filename:
            return f"{frame.filename[len(ROOT):]}:{frame.lineno}"
    return f"(outside the project) {tb[-1].filename}:{tb[-1].lineno}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, default=48, help="simulated hours replayed")
    ap.add_argument("--from-hour", type=int, default=12, help="the first snapshot (after the backlog formed)")
    ap.add_argument("--top", type=int, default=15, help="allocation sites listed")
    args = ap.parse_args()
    if not 0 < args.from_hour < args.hours:
        ap.error("--from-hour must fall inside --hours")

    spec, about = spec_for("alibaba2018", nodes=0)
    snaps: dict[int, tracemalloc.Snapshot] = {}
    replay: Replay

    def progress(done: int, total: int) -> None:
        if done % 60 or done // 60 not in (args.from_hour, args.hours):
            return
        gc.collect()
        snaps[done // 60] = tracemalloc.take_snapshot()
        pods = len(replay.cluster.state.pods)
        print(f"  hour {done // 60}: {tracemalloc.get_traced_memory()[0] / 1e6:.1f} MB traced, {pods} pods in the "
              "cluster", file=sys.stderr, flush=True)

    print(f"{about['title']}, {args.hours} h simulated; snapshots at hours {args.from_hour} and {args.hours}",
          file=sys.stderr)
    tracemalloc.start(16)
    replay = Replay(spec, WhatIfConfig(), args.hours * 3600, progress=progress)
    asyncio.run(replay.run())
    tracemalloc.stop()

    size, count = Counter(), Counter()
    for stat in snaps[args.hours].compare_to(snaps[args.from_hour], "traceback"):
        where = site(stat.traceback)
        size[where] += stat.size_diff
        count[where] += stat.count_diff
    designed = {k: v for k, v in size.items() if k.startswith(BY_DESIGN)}
    services = {k: v for k, v in size.items() if not k.startswith(BY_DESIGN)}
    span = args.hours - args.from_hour
    print(f"\nheld at hour {args.hours} and not at hour {args.from_hour} ({span} simulated hours):")
    print(f"  the replay's own records (by design): {sum(designed.values()) / 1e6:+.2f} MB")
    print(f"  everything else: {sum(services.values()) / 1e6:+.2f} MB "
          f"({sum(services.values()) / span / 1e3:+.1f} kB per simulated hour)")
    print(f"\nthe {args.top} largest sites outside the replay's records (MB, objects):")
    for where, diff in sorted(services.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {diff / 1e6:+8.3f}  {count[where]:+8d}  {where}")


if __name__ == "__main__":
    main()
