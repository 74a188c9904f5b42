"""End to end with processes: the node agent (sim mode) reports real trace-driven usage, the
slo-controller turns it into batch allocatable on the simulated nodes.

The simulated clock runs 30x: a NodeMetric report interval of 60 simulated seconds is 2 wall
seconds, the shortened degrade time of 120 simulated seconds is 4 wall seconds.
"""

from __future__ import annotations

import os

import pytest
from koordcommon import subjects
from koordcommon.testing.net import free_port
from koordcommon.testing.processes import poll, start, stop
from koordsim.cluster import SimCluster, SimSpec

pytestmark = pytest.mark.e2e

SPEED = 30.0
REPORT_S = 60  # simulated seconds between NodeMetrics
BATCH_CPU = "koordinator.sh/batch-cpu"
# The traces' instant the cluster starts at, the same every run: the pods' usage follows the
# trace's time of day, and with it how much batch room the nodes have when the test looks.
START_MS = 1_796_601_600_000  # 2026-12-07 00:00 UTC


async def test_agent_usage_rise_lowers_batch_and_silence_degrades(bus, bus_namespace, nats_url, tmp_path):
    pytest.importorskip("node_agent")
    sim = SimCluster(SimSpec(nodes=3, online_pods_per_node=6, seed=11, speed=SPEED, start_ms=START_MS), bus=bus, genesis=True)
    await sim.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM)
    base = dict(os.environ, NATS_URL=nats_url, KOORD_RESOURCE_PREFIX="koordinator.sh/")
    agent_env = dict(base, KOORD_AGENT_MODE="sim", KOORD_AGENT_BUS_NAMESPACE=bus_namespace,
                     KOORD_AGENT_HTTP_HOST="127.0.0.1", KOORD_AGENT_HTTP_PORT=str(free_port()),
                     KOORD_AGENT_NODEMETRIC_INTERVAL_S=str(REPORT_S), KOORD_AGENT_AGGREGATE_WINDOW_S="60",
                     KOORD_AGENT_QOS_ENABLED="false")
    slo_env = dict(base, KOORD_SLO_BUS_NAMESPACE=bus_namespace, KOORD_SLO_HTTP_HOST="127.0.0.1",
                   KOORD_SLO_HTTP_PORT=str(free_port()), KOORD_SLO_RESYNC_S="0.5",
                   KOORD_SLO_DEGRADE_SECONDS="120", KOORD_SLO_METRICS_CATCHUP_S="0.5",
                   KOORD_SLO_WEBHOOK_ENABLED="false")
    agent = start("node_agent", agent_env, tmp_path / "agent.log")
    slo = start("slo_controller", slo_env, tmp_path / "slo.log")
    try:
        async def batch_values():
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()[-2000:]
            assert slo.poll() is None, (tmp_path / "slo.log").read_text()[-2000:]
            values = {n.name: n.allocatable.get(BATCH_CPU) for n in await sim.list_nodes()}
            return values if all(v is not None for v in values.values()) else None

        before = await poll(batch_values, 30)
        node = max(before, key=before.get)  # the node with the most room shows the drop best
        assert before[node] > 0

        # prod usage on that node rises from now on, by half of the node's batch room: the trace
        # decides how busy the pods are, so the factor is derived from what they use now
        snap = sim.usage_snapshot(node)
        pods_cpu = max(sum(u.cpu_milli for u in snap.pods.values()), 1)
        factor = 1 + 0.5 * before[node] / pods_cpu
        t0 = sim.now_ms()
        await sim.set_usage_override(node=node, cpu_factor=factor, from_ms=t0)

        async def dropped():
            v = (await sim.get_node(node)).allocatable.get(BATCH_CPU)
            return v if v is not None and v < before[node] * 0.8 else None

        # within two report intervals: the second report after the rise averages only raised usage
        # (15 simulated seconds of slack for collection rounds and the poll step)
        bound_s = 2 * REPORT_S + 15
        try:
            after = await poll(dropped, bound_s / SPEED + 0.5)
        except AssertionError:
            print(before, node, factor, pods_cpu, (await sim.get_node(node)).allocatable)
            print((tmp_path / "slo.log").read_text()[-6000:])
            raise
        assert sim.now_ms() - t0 <= (bound_s + 0.5 * SPEED) * 1000
        assert after < before[node]

        # the agent goes away: every node degrades to no batch resources after 120 simulated seconds
        assert stop(agent) == 0
        t_stop = sim.now_ms()

        async def all_degraded():
            nodes = await sim.list_nodes()
            return True if all(BATCH_CPU not in n.allocatable for n in nodes) else None

        await poll(all_degraded, (120 + REPORT_S) / SPEED + 3.0)
        assert sim.now_ms() - t_stop >= 100 * 1000  # not before the degrade time (last report <= 60 s earlier)
    finally:
        stop(agent)
        assert stop(slo) == 0, (tmp_path / "slo.log").read_text()[-2000:]
        await sim.close()
