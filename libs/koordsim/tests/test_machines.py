"""A cluster of real Alibaba 2018 machines; batch instances packed into pods; the batch jobs' driver."""

import numpy as np
import pytest
from koordcommon import resources as rn
from koordsim import batch, traces
from koordsim.cluster import SimCluster
from koordsim.jobs import COMPLETED, EVICTED, RUNNING, BatchDriver
from koordsim.machines import MACHINE_LABEL, SYNTHETIC_LABEL, full_day_machines
from koordsim.scenarios import build
from koordsim.spec import GIB, SimSpec

START = 1_514_764_800_000  # trace second 0


def machines_spec(**kw) -> SimSpec:
    base = {"scenario": "machines", "nodes": 0, "node_cpu_cores": 96, "node_memory_gib": 384, "start_ms": START, "speed": 0,
                "trace_set": "sample", "online_memory_share": 0.5, "seed": 3}
    return SimSpec(**{**base, **kw})


def test_the_fourteen_machines_that_report_over_eight_days():
    usage = traces.alibaba2018_machine_usage(traces.sample_source())
    ids = [m.machine_id for m in full_day_machines(usage)]
    assert len(ids) == 14 and "m_1932" not in ids and "m_1947" not in ids  # the two truncated ones


def test_each_node_replays_its_machine_on_the_trace_clock():
    spec = machines_spec()
    g = build(spec)
    usage = traces.alibaba2018_machine_usage(traces.sample_source())
    assert len(g.nodes) == 14 and len(g.pods) == 14
    state = SimCluster(spec).state
    for node in g.nodes[:3]:
        m = usage[node.labels[MACHINE_LABEL]]
        (pod,) = [p for p in g.pods if p.node_name == node.name]
        for minute in (0, 1000, 5000):
            t = START + (minute * 60 + 30) * 1000  # half-way between two 60-s rows: linear interpolation
            row = minute - m.start_s // 60
            if row < 0:
                continue  # before the machine's first report: that report's value
            want_cpu = (m.cpu_percent[row] + m.cpu_percent[row + 1]) / 2 / 100 * 96_000
            want_mem = (m.mem_percent[row] + m.mem_percent[row + 1]) / 2 / 100 * 384 * GIB * 0.5
            u = state.pod_usage(pod, t)
            assert abs(u.cpu_milli - want_cpu) <= 1 and abs(u.memory_bytes - want_mem) <= 1
        # it asks at least its peak, and what a scheduler filled the node with (60-80 % of allocatable)
        req = pod.request_resources()
        assert req.cpu_milli >= m.cpu_percent.max() / 100 * 96_000
        assert 0.6 * node.allocatable["cpu"] <= req.cpu_milli <= max(0.8 * node.allocatable["cpu"], m.cpu_percent.max() * 960)
    assert any("online memory: 50%" in a for a in g.assumptions)


def test_more_nodes_repeat_the_machines_shifted_and_labelled():
    g = build(machines_spec(nodes=30))
    assert len(g.nodes) == 30
    copies = [n for n in g.nodes if SYNTHETIC_LABEL in n.labels]
    assert len(copies) == 16 and {n.labels[SYNTHETIC_LABEL] for n in copies} == {"1", "2"}
    assert g.nodes[0].labels[MACHINE_LABEL] == g.nodes[14].labels[MACHINE_LABEL]
    state = SimCluster(machines_spec(nodes=30)).state
    first = next(p for p in g.pods if p.node_name == g.nodes[0].name)
    copy = next(p for p in g.pods if p.node_name == g.nodes[14].name)
    samples = [START + k * 3_600_000 for k in range(24)]
    assert [state.pod_usage(first, t) for t in samples] != [state.pod_usage(copy, t) for t in samples]
    assert any("synthetic cluster: 30 nodes" in a for a in g.assumptions)


@pytest.mark.parametrize("pod_cpu, instances, cpu, expected", [
    (4000, 75, 1000, [4000] * 18 + [3000]),  # 4 instances a pod
    (4000, 33, 500, [4000] * 4 + [500]),  # 8 a pod
    (4000, 1, 1000, [1000]),
    (0, 75, 1000, [1000]),  # unpacked: one pod asking one instance
])
def test_a_tasks_instances_packed_into_pods(pod_cpu, instances, cpu, expected):
    spec = SimSpec(nodes=1, batch_pod_cpu_milli=pod_cpu, start_ms=START, speed=0, trace_set="sample")
    pods = batch._task_pods(spec, 0, 9741, 63358, instances, cpu, 0.01, 3969, START)
    assert [p.batch_requests().cpu_milli for p in pods] == expected
    assert all(p.annotations[batch.DURATION_ANNOTATION] == "3969" for p in pods)
    if pod_cpu:
        assert {p.controller.name for p in pods} == {"job-9741-task-63358-0"} and pods[0].controller.kind == "Job"
        mem = [p.requests()[rn.batch_memory()] for p in pods]
        # 1 % of a 2017 machine: 64 cores at this node's 128 GiB / 32 cores = 2.56 GiB an instance
        assert mem[0] == expected[0] // cpu * int(0.01 * 64 * 4 * GIB)


@pytest.mark.parametrize("cores, gib, mem_norm, expected_bytes", [
    (32, 128, 0.01, int(0.01 * 64 * 4 * GIB)),
    (96, 384, 0.01, int(0.01 * 64 * 4 * GIB)),  # same GiB per core: same bytes on a bigger node
    (96, 192, 0.01, int(0.01 * 64 * 2 * GIB)),
    (32, 128, 0.00001, 64 << 20),  # floor
    (32, 128, float("nan"), 64 << 20),  # no plan_mem
])
def test_an_instances_memory_is_its_share_of_a_2017_machine(cores, gib, mem_norm, expected_bytes):
    spec = SimSpec(nodes=1, node_cpu_cores=cores, node_memory_gib=gib, start_ms=START, speed=0, trace_set="sample")
    assert batch._memory(spec, mem_norm) == expected_bytes


def test_batch_load_thins_the_stream_to_the_demand_asked():
    spec = SimSpec(nodes=14, node_cpu_cores=96, batch_pod_cpu_milli=4000, batch_load=0.05, start_ms=START, speed=0,
                   trace_set="sample")
    for load in (0.05, 0.1, 0.3):
        asked = spec.model_copy(update={"batch_load": load})
        period = batch._schedule(asked)[0]
        pods = batch.batch_arrivals(asked, START, START + period * 1000)
        demand = sum(p.batch_requests().cpu_milli * int(p.annotations[batch.DURATION_ANNOTATION]) for p in pods)
        # over one period of submissions the requested CPU-seconds are the asked share of the nodes' CPU
        assert demand / (14 * 96_000 * period) == pytest.approx(load, rel=0.1)
    assert any("every" in a and "asked: 5%" in a for a in batch.assumptions(spec))


async def driven_an_hour(spec: SimSpec) -> tuple[dict, SimCluster, BatchDriver]:
    """A cluster on a clock the test moves, and a batch driver that has stepped its first hour."""
    from koordsim.spec import SimClock

    clock = {"ms": START}
    cluster = SimCluster(spec, clock=SimClock(START, 1.0, START, wall=lambda: clock["ms"] / 1000))
    await cluster.start()
    driver = BatchDriver(cluster, spec)
    clock["ms"] = START + 3_600_000
    await driver.step(clock["ms"])
    return clock, cluster, driver


async def test_the_driver_submits_finishes_and_resubmits_what_was_evicted():
    spec = SimSpec(nodes=2, online_pods_per_node=0, node_cpu_cores=64, batch_pod_cpu_milli=4000, batch_load=0.3,
                   start_ms=START, speed=0, trace_set="sample", seed=1)
    clock, cluster, driver = await driven_an_hour(spec)
    pending = [p for p in await cluster.list_pods(namespace=batch.BATCH_NAMESPACE)]
    assert pending and all(p.node_name is None for p in pending)
    first, second = pending[0], pending[1]
    await cluster.bind_pod(first.namespace, first.name, "sim-node-000", first.uid)
    await cluster.bind_pod(second.namespace, second.name, "sim-node-001", second.uid)
    clock["ms"] += 1000
    driver.sync_started(clock["ms"])
    await driver.step(clock["ms"])
    running = driver.uids_running()
    assert running[first.uid] == first.key and running[second.uid] == second.key
    driver.ran(first.key, 1000 * 60_000)
    await cluster.evict_pod(second.namespace, second.name, reason="suppressed")
    duration = int(first.annotations[batch.DURATION_ANNOTATION])
    clock["ms"] += duration * 1000
    await driver.step(clock["ms"])
    lives = driver.lives(clock["ms"])
    assert lives[first.key].outcome == COMPLETED and lives[first.key].cpu_ms == 60_000_000
    assert lives[second.key].outcome == EVICTED
    again = lives[f"{second.key}#1"]
    assert again.arrival_ms == lives[second.key].arrival_ms and again.outcome != RUNNING
    assert await cluster.get_pod(second.namespace, f"{second.name}-r1") is not None
    assert await cluster.get_pod(first.namespace, first.name) is None
    assert np.isfinite(lives[second.key].ended_ms)


@pytest.mark.parametrize("held_per_minute_ms, minutes_late", [
    ([], 0),  # never throttled: ends at its traced duration
    ([30_000, 30_000], 1),  # granted half of what it asked for two minutes: one minute later
    ([30_000, 20_000], 1),  # 50 s withheld: the first tick at or past duration + 50 s
    ([60_000, 60_000, 5_000], 3),  # two minutes with nothing, then 5 s: ends three ticks later
])
async def test_a_pod_held_back_by_cpu_suppress_ends_that_much_later(held_per_minute_ms, minutes_late):
    spec = SimSpec(nodes=2, online_pods_per_node=0, node_cpu_cores=64, batch_pod_cpu_milli=4000, batch_load=0.3,
                   start_ms=START, speed=0, trace_set="sample", seed=1)
    clock, cluster, driver = await driven_an_hour(spec)
    pod = (await cluster.list_pods(namespace=batch.BATCH_NAMESPACE))[0]
    await cluster.bind_pod(pod.namespace, pod.name, "sim-node-000", pod.uid)
    driver.sync_started(clock["ms"])
    started = (await cluster.get_pod(pod.namespace, pod.name)).start_ms
    for held in held_per_minute_ms:
        driver.ran(pod.key, 1000 * 60_000, held)
    duration_ms = int(pod.annotations[batch.DURATION_ANNOTATION]) * 1000
    due = started + duration_ms + sum(held_per_minute_ms)
    # a tick just before the (lengthened) end: still running; the tick at or after it: completed
    ends = [started + duration_ms + k * 60_000 for k in range(4)]
    for t in ends:
        clock["ms"] = t
        await driver.step(t)
        life = driver.lives(t)[pod.key]
        assert life.outcome == (COMPLETED if t >= due else RUNNING), (t - started, due - started)
    assert driver.lives(clock["ms"])[pod.key].ended_ms == ends[minutes_late]
    assert driver.lives(clock["ms"])[pod.key].held_ms == sum(held_per_minute_ms)


async def test_the_framework_holds_pods_beyond_its_pending_limit_first_in_first_out():
    spec = SimSpec(nodes=2, online_pods_per_node=0, node_cpu_cores=64, batch_pod_cpu_milli=4000, batch_load=1.0,
                   batch_max_pending=3, start_ms=START, speed=0, trace_set="sample", seed=1)
    clock, cluster, driver = await driven_an_hour(spec)
    arrived = batch.batch_arrivals(spec.resolved(wall_ms=START), START, clock["ms"])
    pending = await cluster.list_pods(namespace=batch.BATCH_NAMESPACE)
    # three in the cluster, the first three to arrive; the rest held, yet counted as pending work
    assert [p.key for p in pending] == [p.key for p in arrived[:3]]
    assert driver.held == len(arrived) - 3 > 0
    assert sum(1 for life in driver.lives(clock["ms"]).values() if life.outcome == "pending") == len(arrived)
    # one binds: the next in line enters the cluster, its queueing counted from the hour it arrived in
    first = pending[0]
    await cluster.bind_pod(first.namespace, first.name, "sim-node-000", first.uid)
    driver.sync_started(clock["ms"])
    clock["ms"] += 60_000
    await driver.step(clock["ms"])
    now_pending = [p.key for p in await cluster.list_pods(namespace=batch.BATCH_NAMESPACE) if not p.node_name]
    assert now_pending[-1] == arrived[3].key and len(now_pending) == 3
    assert driver.lives(clock["ms"])[arrived[3].key].queued_ms == START + 3_600_000
