"""settle(): an in-process driver waits until the watchers of a local simulated cluster caught up."""

import asyncio

from koordcommon.records import ContainerSpec, PodRecord
from koordsim.cluster import SimCluster, SimSpec


async def test_settle_returns_once_every_watcher_handled_every_event():
    cluster = SimCluster(SimSpec(nodes=2, seed=1, speed=0, online_pods_per_node=0, trace_set="synthetic"))
    await cluster.start()
    seen: list[str] = []
    follow_ups: list[str] = []

    async def watcher(name: str, react: bool) -> None:
        async for e in cluster.watch():
            if e.kind == "Pod":
                seen.append(f"{name}:{e.type}:{e.obj.name}")
                await asyncio.sleep(0)  # a handler that awaits something
                if react and e.type == "ADDED" and e.obj.name.startswith("p"):
                    # a handler that changes the cluster in turn: its events are settled too
                    follow_ups.append(e.obj.name)
                    await cluster.create_pod(PodRecord(namespace="x", name=f"q{e.obj.name}", uid="",
                                                       containers=[ContainerSpec("c")]))

    tasks = [asyncio.create_task(watcher("a", True)), asyncio.create_task(watcher("b", False))]
    await asyncio.sleep(0)
    for i in range(3):
        await cluster.create_pod(PodRecord(namespace="x", name=f"p{i}", uid="", containers=[ContainerSpec("c")]))
    await cluster.settle()
    assert follow_ups == ["p0", "p1", "p2"]
    assert sorted(seen) == sorted(f"{w}:ADDED:{p}" for w in "ab" for p in ("p0", "p1", "p2", "qp0", "qp1", "qp2"))
    for t in tasks:
        t.cancel()
