"""The running recommender: state + checkpoint store + bus + cluster, and its periodic loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.cluster.port import ClusterPort
from prometheus_client import Counter, Gauge

from . import bus as busio
from . import cluster as clusterio
from .core.engine import RecommenderState
from .core.workload import WorkloadKey
from .store import CheckpointStore

log = logging.getLogger("recommender")

CHECKPOINTS = Counter("koord_recommender_checkpoints_written_total", "Container checkpoints written")
PUBLISHED = Counter("koord_recommender_recommendations_published_total", "Recommendations published on change")
RETRACTED = Counter("koord_recommender_recommendations_retracted_total",
                    "Recommendations withdrawn because their workload was forgotten")
TRACKED = Gauge("koord_recommender_tracked_containers", "Workload containers with state")
SAMPLES = Counter("koord_recommender_samples_total", "Container usage samples", ["outcome"])


@dataclass
class Intervals:
    checkpoint_s: float = 60.0  # 0: checkpoint every batch before it is acked
    publish_s: float = 30.0


class Recommender:
    def __init__(
        self,
        state: RecommenderState,
        store: CheckpointStore,
        bus: Bus | None = None,
        cluster: ClusterPort | None = None,
        intervals: Intervals | None = None,
        write_custom_objects: bool = True,
    ) -> None:
        self.state = state
        self.store = store
        self.bus = bus
        self.cluster = cluster
        self.intervals = intervals or Intervals()
        self.write_custom_objects = write_custom_objects
        self.resolve = clusterio.WorkloadResolver(cluster)
        self.method_of = clusterio.MethodResolver(cluster, ("vpa", *state.methods))
        self.consumer = None
        self._lock = asyncio.Lock()  # one checkpoint at a time
        self._last_checkpoint = time.monotonic()
        self._counted = (0, 0)

    # ------------------------------------------------------------------ checkpoints

    async def load(self) -> int:
        rows = await asyncio.to_thread(self.store.load)
        for key, data in rows.items():
            try:
                self.state.restore(key, data)
            except (ValueError, IndexError) as exc:  # struct.error is a ValueError
                log.warning("checkpoint unreadable; starting that container afresh", extra={"key": str(key), "error": str(exc)})
        TRACKED.set(len(self.state.containers))
        log.info("checkpoints loaded", extra={"containers": len(self.state.containers)})
        return len(rows)

    async def checkpoint(self) -> int:
        async with self._lock:
            gone = self.state.expire()
            await self.retract(self.state.take_retracted())
            dirty = self.state.take_dirty()
            try:
                n = await asyncio.to_thread(self.store.save, dirty, gone)
            except Exception:
                # Not written: keep them dirty so the next round retries.
                self.state.dirty_checkpoint.update(dirty)
                raise
            self._last_checkpoint = time.monotonic()
            CHECKPOINTS.inc(n)
            TRACKED.set(len(self.state.containers))
            return n

    async def _after_batch(self) -> None:
        acc, disc = self.state.samples_accepted, self.state.samples_discarded
        SAMPLES.labels("accepted").inc(acc - self._counted[0])
        SAMPLES.labels("discarded").inc(disc - self._counted[1])
        self._counted = (acc, disc)
        if self.intervals.checkpoint_s <= 0:
            await self.checkpoint()

    # ------------------------------------------------------------------ output

    async def publish_changes(self) -> int:
        results = self.state.changed()
        if not results:
            return 0
        if self.bus is not None:
            await busio.publish(self.bus, results)
        if self.cluster is not None and self.write_custom_objects:
            await clusterio.apply_objects(self.cluster, results)
        PUBLISHED.inc(len(results))
        return len(results)

    async def retract(self, workloads: list[WorkloadKey]) -> None:
        """Withdraw the recommendations of forgotten workloads: an empty one on the bus (the
        extender drops the profile; the stream's last message for the workload says it is gone)
        and the Recommendation object deleted. What failed is tried again at the next checkpoint."""
        if not workloads:
            return
        try:
            if self.bus is not None:
                await busio.retract(self.bus, workloads)
            if self.cluster is not None and self.write_custom_objects:
                await clusterio.delete_objects(self.cluster, workloads)
        except Exception:
            log.exception("could not withdraw the recommendations of forgotten workloads; retrying",
                          extra={"workloads": len(workloads)})
            self.state.retract_again(workloads)
            return
        RETRACTED.inc(len(workloads))

    # ------------------------------------------------------------------ running

    async def start(self, batch: int = 500) -> None:
        await self.load()
        if self.bus is not None:
            await self.bus.ensure_streams(subjects.METRICS_STREAM, subjects.RECOMMENDATION_STREAM)
            self.consumer = await busio.consume_usage(self.bus, self.state, self.resolve, self._after_batch, batch, self.method_of)

    async def run(self, stopping: asyncio.Event) -> None:
        """Publish and checkpoint on their intervals until `stopping`; then a last checkpoint."""
        tick = max(0.05, min(x for x in (self.intervals.publish_s, self.intervals.checkpoint_s or 1.0) if x > 0))
        next_publish = time.monotonic() + self.intervals.publish_s
        try:
            while not stopping.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stopping.wait(), tick)
                now = time.monotonic()
                try:
                    if now >= next_publish:
                        next_publish = now + self.intervals.publish_s
                        await self.publish_changes()
                    if self.intervals.checkpoint_s > 0 and now - self._last_checkpoint >= self.intervals.checkpoint_s:
                        await self.checkpoint()
                except Exception:
                    log.exception("recommender round failed; retrying next tick")
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Stop consuming (the current batch finishes), then write the final checkpoint."""
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None
        await self.checkpoint()
