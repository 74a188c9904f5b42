"""The loop on a simulated cluster (local mode, frozen clock): migration jobs across rounds,
ReservationFirst with its rollbacks, PDB refusals, dry-run, rate limiting."""

from __future__ import annotations

import pytest
from desched_scenario import BATCH_NS, all_metrics, batch_pod, cpu_percent
from descheduler.core import migration as mig
from descheduler.core.config import AnomalyCondition, LowNodeLoadArgs, MigrationLimits, MigrationOptions, NodePool
from descheduler.loop import Descheduler
from koordcommon.reservations import KIND
from koordsim.cluster import PDB_KIND, SimCluster, SimSpec
from koordsim.reservations import ReservationScheduler

HOT = "sim-node-000"
RS = "crunch-7d9f6b8c5d"
START_MS = 1_717_243_200_000  # a fixed trace instant: usage is the same on every run


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def hot_cluster(replicas: int = 4, schedule_reservations: bool = True) -> SimCluster:
    # speed 0 from a fixed start on the bundled trace sample: simulated time stands still, usage is
    # exactly reproducible, with or without the full set; the simulated cluster places Reservations
    # (in-tree filter only) unless told not to
    spec = SimSpec(nodes=4, seed=5, speed=0, start_ms=START_MS, trace_set="sample")
    c = SimCluster(spec, schedule_reservations=schedule_reservations)
    await c.start()
    for i in range(replicas):
        await c.create_pod(batch_pod(RS, i, HOT))
    await c.set_usage_override(node=HOT, cpu_factor=6)
    assert cpu_percent(c, HOT) > 95
    return c


def args(mode: str = "ReservationFirst", **limits) -> LowNodeLoadArgs:
    return LowNodeLoadArgs(
        nodePools=[NodePool(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1))],
        limits=MigrationLimits(evictQPS=0, **limits),
        migration=MigrationOptions(defaultJobMode=mode, reservationWaitSeconds=30, defaultJobTTLSeconds=120),
    )


def batch_pods(c: SimCluster):
    return [p for p in c.state.pods.values() if p.namespace == BATCH_NS]


async def test_reservation_first_reserves_evicts_and_the_replacement_consumes_it():
    c = await hot_cluster()
    clock = Clock()
    d = Descheduler(args(), c, None, clock=clock)
    d.metrics = all_metrics(c)
    report = await d.run_round()
    # 100 % -> under 75 % takes two 6x-hot batch pods; maxMigratingPerNode 2 allows exactly that
    assert len(report.plan.migrations) == 2
    assert set(report.outcomes.values()) == {"evicted"}
    reservations = await c.list_custom(KIND)
    assert len(reservations) == 2
    for r in reservations:
        assert r["status"]["phase"] == "Available"
        assert r["status"]["nodeName"] != HOT
        assert r["spec"]["allocateOnce"] is True and r["spec"]["ttl"] == "120s"
        assert r["spec"]["owners"] == [{"controller": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": RS,
                                                        "uid": f"rs-{RS}", "controller": True, "namespace": BATCH_NS}}]
        term = r["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [r["status"]["nodeName"]]
    pending = [p for p in batch_pods(c) if p.phase == "Pending"]
    assert len(pending) == 2 and all(p.uid not in d.jobs for p in pending)
    assert {j.phase for j in d.jobs.values()} == {mig.WAITING}
    # a second round while the jobs are in flight: the node limit is used up by them
    d.metrics = all_metrics(c)
    assert (await d.run_round()).plan.migrations == []

    # the scheduler places the replacements on the reserved nodes
    by_target = sorted(r["status"]["nodeName"] for r in reservations)
    for p, node in zip(pending, by_target):
        await c.bind_pod(p.namespace, p.name, node, p.uid)
    await d.advance()
    assert d.jobs == {}
    assert [j.phase for j in d.finished] == [mig.SUCCEEDED, mig.SUCCEEDED]
    for r in await c.list_custom(KIND):
        assert r["status"]["phase"] == "Succeeded"
        assert r["status"]["currentOwners"][0]["name"] in {p.name for p in pending}
    assert cpu_percent(c, HOT) < 75
    d.metrics = all_metrics(c)
    assert (await d.run_round()).plan.migrations == []


async def test_a_replica_on_another_jobs_reservation_is_that_jobs_replacement():
    """Two jobs of one ReplicaSet: any of the owner's reservations suits a replacement, so the
    scheduler may put the first job's replica on the second job's node while the descheduler has
    not yet seen that reservation placed. Each job still ends on its own reservation's node."""
    c = await hot_cluster(schedule_reservations=False)
    placer = ReservationScheduler(c)  # koord-scheduler's part, done here one reservation at a time
    clock = Clock()
    d = Descheduler(args(), c, None, clock=clock)
    d.metrics = all_metrics(c)
    assert set((await d.run_round()).outcomes.values()) == {mig.RESERVING}
    first, second = list(d.jobs.values())

    async def place(job: mig.Job) -> str:
        obj = await c.get_custom(KIND, job.reservation)
        placed = await placer.place(obj, c.now_ms())
        await c.apply_custom(KIND, placed)
        return placed["status"]["nodeName"]

    first_node = await place(first)
    await d.advance()
    assert (first.phase, second.phase) == (mig.WAITING, mig.RESERVING)
    second_node = await place(second)
    assert second_node != first_node
    # the first job's replica lands on the second job's reservation
    replica = next(p for p in batch_pods(c) if p.phase == "Pending")
    await c.bind_pod(replica.namespace, replica.name, second_node, replica.uid)
    await d.advance()
    assert first.phase == mig.WAITING  # not the first job's: it stays on the second's node
    assert second.done and second.replacement == replica.key and second.reason.startswith("replacement")
    # the second job's replica takes the first job's reservation
    replica = next(p for p in batch_pods(c) if p.phase == "Pending")
    await c.bind_pod(replica.namespace, replica.name, first_node, replica.uid)
    await d.advance()
    assert d.jobs == {} and [j.phase for j in d.finished] == [mig.SUCCEEDED, mig.SUCCEEDED]
    assert first.replacement == replica.key
    consumed = {r["status"]["nodeName"]: r["status"]["currentOwners"][0]["name"] for r in await c.list_custom(KIND)}
    assert consumed == {first_node: first.replacement.split("/")[1], second_node: second.replacement.split("/")[1]}
    assert {r["status"]["phase"] for r in await c.list_custom(KIND)} == {"Succeeded"}


async def test_reservation_not_available_in_time_rolls_back_without_evicting():
    c = await hot_cluster(schedule_reservations=False)  # nobody places reservations
    clock = Clock()
    d = Descheduler(args(), c, None, clock=clock)
    d.metrics = all_metrics(c)
    report = await d.run_round()
    assert set(report.outcomes.values()) == {mig.RESERVING}
    assert len(await c.list_custom(KIND)) == 2
    clock.t += 29
    await d.advance()
    assert len(d.jobs) == 2
    clock.t += 2  # past reservationWaitSeconds (30)
    await d.advance()
    assert d.jobs == {} and await c.list_custom(KIND) == []
    assert [j.reason for j in d.finished] == ["ReservationTimeout", "ReservationTimeout"]
    assert all(p.phase == "Running" for p in batch_pods(c)) and len(batch_pods(c)) == 4
    # the two pods back off (retryBackoffSeconds 60); the node's other pods are tried meanwhile
    failed = {j.migration.pod.uid for j in d.finished}
    report = await d.run_round()
    assert len(report.plan.migrations) == 2 and failed.isdisjoint(m.pod.uid for m in report.plan.migrations)


async def test_unschedulable_reservation_rolls_back():
    c = await hot_cluster()
    planner = Descheduler(args(), c, None, dry_run=True)
    planner.metrics = all_metrics(c)
    plan = (await planner.run_round()).plan
    assert len(plan.migrations) == 2
    # the plan goes stale: its target nodes are cordoned before the reservations are placed
    for n in {m.target for m in plan.migrations}:
        await c.update_node(n, unschedulable=True)
    d = Descheduler(args(), c, None, clock=Clock())
    pods = await c.list_pods()
    by_key = {p.key: p for p in pods}
    outcomes = [await d._start(m, by_key[m.pod.key], pods) for m in plan.migrations]
    assert outcomes == ["Unschedulable", "Unschedulable"]
    assert d.finished[0].reason.startswith("Unschedulable: 0/1 nodes are available: 1 node(s) were unschedulable")
    assert await c.list_custom(KIND) == []
    assert len(batch_pods(c)) == 4 and all(p.phase == "Running" for p in batch_pods(c))


async def test_pdb_refusal_is_respected_replanned_and_retried_after_the_server_said():
    c = await hot_cluster()
    await c.apply_custom(PDB_KIND, {"metadata": {"name": "crunch", "namespace": BATCH_NS},
                                    "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "crunch"}}}})
    clock = Clock()
    d = Descheduler(args(), c, None, clock=clock)
    d.metrics = all_metrics(c)
    report = await d.run_round()
    # two planned; the Eviction API's dry run says the PDB refuses, so no reservation is made; the
    # round plans again without them (as Koordinator goes on with the next pod after a failed
    # eviction): the other two are refused as well
    assert len(report.plan.migrations) == 4
    assert set(report.outcomes.values()) == {"blocked"}
    assert report.plan.notes == ["replanned after 2 migration(s) ended at once"]
    assert await c.list_custom(KIND) == [] and d.jobs == {}
    assert len(batch_pods(c)) == 4 and all(p.phase == "Running" for p in batch_pods(c))
    assert set(d.blocked_until.values()) == {clock.t + 10}  # the server's retryAfterSeconds
    assert (await d.run_round()).plan.migrations == []
    clock.t += 11
    report = await d.run_round()
    assert len(report.plan.migrations) == 4 and len(batch_pods(c)) == 4


async def test_evict_directly_waits_for_the_replacement_and_counts_it_in_flight():
    c = await hot_cluster(replicas=6)
    d = Descheduler(args("EvictDirectly", maxMigratingPerNode=1), c, None, clock=Clock())
    d.metrics = all_metrics(c)
    report = await d.run_round()
    assert list(report.outcomes.values()) == ["evicted"]
    assert await c.list_custom(KIND) == []
    d.metrics = all_metrics(c)
    assert (await d.run_round()).plan.migrations == []  # one in flight on the node
    new = next(p for p in batch_pods(c) if p.phase == "Pending")
    await c.bind_pod(new.namespace, new.name, "sim-node-003", new.uid)
    await d.advance()
    assert d.jobs == {} and d.finished[-1].replacement == new.key
    d.metrics = all_metrics(c)
    assert len((await d.run_round()).plan.migrations) == 1


async def test_dry_run_plans_without_touching_the_cluster():
    c = await hot_cluster()
    d = Descheduler(args(), c, None, dry_run=True)
    d.metrics = all_metrics(c)
    report = await d.run_round()
    assert len(report.plan.migrations) == 2 and set(report.outcomes.values()) == {"dry-run"}
    assert await c.list_custom(KIND) == [] and len(batch_pods(c)) == 4 and d.jobs == {}


@pytest.mark.parametrize(
    "qps,burst,times,waits",
    [
        (10, 1, [0, 0, 0], [0, 0.1, 0.2]),
        (10, 3, [0, 0, 0, 0], [0, 0, 0, 0.1]),
        (2, 1, [0, 1, 1.2], [0, 0, 0.3]),
        (0, 1, [0, 0], [0, 0]),  # no limit
    ],
)
def test_token_bucket(qps, burst, times, waits):
    b = mig.TokenBucket(qps, burst)
    assert [round(b.reserve(t), 6) for t in times] == waits


async def test_reservations_left_by_an_earlier_run_are_cleaned_up():
    c = await hot_cluster(schedule_reservations=False)  # nobody places them
    first = Descheduler(args(), c, None, clock=Clock())
    first.metrics = all_metrics(c)
    await first.run_round()
    await c.apply_custom(KIND, {"metadata": {"name": "someone-elses"}, "spec": {}, "status": {"phase": "Available"}})
    assert len(await c.list_custom(KIND)) == 3
    restarted = Descheduler(args(), c, None)
    assert await restarted.clean_orphans() == 2
    assert [r["metadata"]["name"] for r in await c.list_custom(KIND)] == ["someone-elses"]
