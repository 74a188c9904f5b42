"""The parts of a real cluster the simulated one needs someone to play.

kube-scheduler: pending pods are placed through the scheduler extender, exactly as
kube-scheduler calls it. The batch workload: Alibaba 2017 batch tasks arrive as BE pods.
Used by `koordctl up` (the demo) and `koordctl sim` (the compose stack's sim driver).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

from koordcommon.service import cancel_and_wait
from koordsim.cluster import SimCluster
from koordsim.scheduler import ExtenderScheduler, ScheduleResult

log = logging.getLogger("koordctl.driver")


class SimDriver:
    def __init__(self, cluster: SimCluster, extender_url: str, interval_s: float = 1.0):
        self.cluster = cluster
        self.scheduler = ExtenderScheduler(cluster, extender_url, node_cache_capable=True)
        self.interval_s = interval_s
        self.placed: dict[str, str] = {}  # pod key -> node
        self.unschedulable: Counter[str] = Counter()
        self.errors = 0

    async def schedule_once(self) -> list[ScheduleResult]:
        results = await self.scheduler.schedule_pending()
        for r in results:
            key = f"{r.namespace}/{r.name}"
            if r.node:
                self.placed[key] = r.node
            elif r.error:
                self.errors += 1
            else:
                self.unschedulable[key] += 1
        return results

    async def schedule_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.schedule_once()
            except Exception:  # an extender hiccup must not end the loop: pods stay queued
                self.errors += 1
                log.exception("scheduling cycle failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    async def run(self, stop: asyncio.Event, batch_stream: bool = True) -> None:
        tasks = [asyncio.create_task(self.schedule_forever(stop))]
        if batch_stream:
            tasks.append(asyncio.create_task(self.cluster.run_batch_stream(stop)))
        try:
            await asyncio.gather(*tasks)
        finally:
            await cancel_and_wait(tasks)
            await self.scheduler.aclose()
