"""The running recommender over a real NATS server and a real database (SQLite and PostgreSQL)."""

import asyncio
import time

from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.schemas import Recommendation
from recommender.core.engine import RecommenderState
from recommender.core.estimator import EstimatorConfig
from recommender.core.workload import WorkloadKey
from recommender.runner import Intervals, Recommender
from recommender.store import CheckpointStore

MIB = 1024 * 1024
WEB = WorkloadKey("prod", "Deployment", "web")
LONE = WorkloadKey("dev", "Pod", "lone")


async def wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def publish(bus: Bus, msgs) -> None:
    await bus.ensure_streams(subjects.METRICS_STREAM)
    await bus.publish_many([(subjects.metrics(m.node), bus.stamp(m)) for m in msgs])


def view(state: RecommenderState):
    """What a user sees: targets, bounds, confidence and profiles of every workload."""
    return {wl: state.recommend(wl) for wl in state.workloads()}  # as of the newest sample


async def started(nats_url, namespace, database_url, checkpoint_s):
    b = Bus(nats_url, service="recommender", namespace=namespace)
    await b.connect(timeout_s=10)
    rec = Recommender(
        RecommenderState(estimator=EstimatorConfig(sample_interval_s=60)),
        CheckpointStore(database_url),
        b,
        None,
        Intervals(checkpoint_s=checkpoint_s, publish_s=0.1),
    )
    await rec.start(batch=200)
    return rec, b


async def test_kill_and_restart_keeps_the_recommendation(metric_samples, bus, nats_url, bus_namespace, database_url):
    await publish(bus, metric_samples(0, 600))
    rec, b = await started(nats_url, bus_namespace, database_url, checkpoint_s=3600)
    per_msg = 5  # 2 containers x 2 pods + the lone pod
    await wait_for(lambda: rec.state.samples_accepted == 600 * per_msg)
    assert await rec.checkpoint() == 3  # web/app, web/proxy, lone/_pod
    at_checkpoint = view(rec.state)
    assert at_checkpoint[WEB].containers[0].estimate.target.cpu_milli > 0

    # New data after the checkpoint, then the process dies without a final checkpoint.
    await publish(bus, metric_samples(600, 60, cpu=lambda i: 3000))
    await wait_for(lambda: rec.state.samples_accepted == 660 * per_msg)
    assert view(rec.state) != at_checkpoint
    await rec.consumer.stop()
    await b.close()
    rec.store.close()

    rec2, b2 = await started(nats_url, bus_namespace, database_url, checkpoint_s=3600)
    try:
        await asyncio.sleep(0.5)  # anything pending would arrive now; all was acked
        assert view(rec2.state) == at_checkpoint  # lost at most the one checkpoint interval
        # and it goes on consuming where the durable stands
        await publish(bus, metric_samples(660, 10))
        await wait_for(lambda: rec2.state.samples_accepted == 10 * per_msg)
    finally:
        await rec2.stop()
        await b2.close()
        rec2.store.close()


async def test_graceful_stop_checkpoints_everything(metric_samples, bus, nats_url, bus_namespace, database_url):
    await publish(bus, metric_samples(0, 300))
    rec, b = await started(nats_url, bus_namespace, database_url, checkpoint_s=3600)
    await wait_for(lambda: rec.state.samples_accepted == 300 * 5)
    before = view(rec.state)
    stopping = asyncio.Event()
    runner = asyncio.create_task(rec.run(stopping))
    stopping.set()
    await runner  # stop: consumer drained, final checkpoint written
    await b.close()
    rec.store.close()
    rec2, b2 = await started(nats_url, bus_namespace, database_url, checkpoint_s=3600)
    try:
        assert view(rec2.state) == before
    finally:
        await rec2.stop()
        await b2.close()
        rec2.store.close()


async def test_publishes_recommendations_on_change(metric_samples, bus, nats_url, bus_namespace, sqlite_url):
    await bus.ensure_streams(subjects.RECOMMENDATION_STREAM)
    await publish(bus, metric_samples(0, 120))
    rec, b = await started(nats_url, bus_namespace, sqlite_url, checkpoint_s=3600)
    stopping = asyncio.Event()
    runner = asyncio.create_task(rec.run(stopping))
    try:
        await wait_for(lambda: rec.state.samples_accepted == 120 * 5)
        got = {}

        async def collect():
            async for d in bus.tail(subjects.RECOMMENDATION_STREAM, "koord.recommendation.>", Recommendation):
                got.setdefault(d.subject, []).append(d.msg)

        tail = asyncio.create_task(collect())
        web_subject = "koord.recommendation.prod.deployment-web"
        await wait_for(lambda: web_subject in got and "koord.recommendation.dev.pod-lone" in got)
        msg = got[web_subject][-1]
        assert (msg.namespace, msg.owner_kind, msg.owner_name) == ("prod", "Deployment", "web")
        app = next(c for c in msg.containers if c.container == "app")
        expected = rec.state.recommend(WEB).containers[0].estimate
        assert app.target.cpu_milli == expected.target.cpu_milli
        assert app.current_requests.memory_bytes == 1024 * MIB
        assert {p.window_s for p in app.profiles} == {3600, 86400, 7 * 86400}
        # A few more samples of the same shape change nothing beyond 10 %: no new message.
        n = len(got[web_subject])
        await publish(bus, metric_samples(120, 5))
        await wait_for(lambda: rec.state.samples_accepted == 125 * 5)
        await asyncio.sleep(0.4)
        assert len(got[web_subject]) == n
        # A jump in usage does.
        await publish(bus, metric_samples(125, 200, cpu=lambda i: 4000))
        await wait_for(lambda: len(got[web_subject]) > n)
        tail.cancel()
    finally:
        stopping.set()
        await runner
        await b.close()
        rec.store.close()
