"""Small replays whose figures are computed by hand: two nodes of a recorded history with
constant usage, a few minutes, each configuration's batch allocatable and online risk exact.

node-1: 16 cores / 64 GiB; records 6000m and 20 GiB, of which web-1 (koord-prod, requests 8000m
and 24 GiB) uses 4000m and 16 GiB: system 2000m and 4 GiB. node-2: 16 cores / 64 GiB; records
2000m and 8 GiB, of which api-2 (koord-prod, requests 4000m and 8 GiB) uses 1000m and 4 GiB:
system 1000m and 4 GiB.

Batch allocatable (Koordinator's BatchResource, usage policy):
    capacity - capacity x (100 - reclaim%) / 100 - max(system, reserved) - HP used
cpuReclaimThresholdPercent 60, memoryReclaimThresholdPercent 65 (the default configuration):
    node-1 cpu 16000 - 6400 - 2000 - 4000 = 3600m      mem 64 - 22.4 - 4 - 16 = 21.6 GiB
    node-2 cpu 16000 - 6400 - 1000 - 1000 = 7600m      mem 64 - 22.4 - 4 - 4  = 33.6 GiB
maxUsageRequest takes max(usage, request) per HP pod: node-1 16000 - 6400 - 2000 - 8000 = -400 -> 0,
node-2 16000 - 6400 - 1000 - 4000 = 4600m.

The node agent reports its first NodeMetric at the first whole minute after it starts (the
replay's second tick), so the first tick offers nothing: over T ticks the mean is (T - 1) / T of
the steady value.

The descheduler's rounds run at the multiples of its interval within each tick's minute, several a
tick when the interval is shorter (Koordinator ships 10 s), so its anomaly condition counts rounds
as the service does. With node-1 at 14000m (87.5 % CPU, over LowNodeLoad's high 75 %; node-2 under
the low 45 %), a hot node acts after more than 5 consecutive hot rounds: with 60 s rounds the sixth
is at T0 + 7 min (metrics from T0 + 2 min); with 10 s rounds the six come in the first minute of
metrics, the last at T0 + 2 min 50 s.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from koordcommon.clusterhistory import COLUMNS, NODE_USAGE, NODES, POD_USAGE, csv_text
from koordwhatif import scenario
from koordwhatif.config import ConfigError, WhatIfConfig, with_knob
from koordwhatif.engine import Replay, replay
from koordwhatif.observation import NodeTick, ledger_row

GIB = 1 << 30
MIN = 60_000
T0 = 1_700_000_040_000
TICKS = 5


def write(directory: Path, table: str, rows: list[dict]) -> None:
    cols = COLUMNS[table]
    (directory / f"{table}.csv").write_text(csv_text([cols, *([r.get(c, "") for c in cols] for r in rows)]))


def history(directory: Path, node1_cpu: int = 6000, minutes: int = TICKS + 2) -> Path:
    node = {"capacity_cpu_milli": 16_000, "capacity_memory_bytes": 64 * GIB, "allocatable_cpu_milli": 16_000,
            "allocatable_memory_bytes": 64 * GIB}  # fmt: skip
    write(directory, NODES, [{"node": "node-1", **node}, {"node": "node-2", **node}])
    usage, pods = [], []
    for k in range(minutes):
        t = T0 + k * MIN
        usage += [{"ts": t, "node": "node-1", "cpu_milli": node1_cpu, "memory_bytes": 20 * GIB},
                  {"ts": t, "node": "node-2", "cpu_milli": 2000, "memory_bytes": 8 * GIB}]  # fmt: skip
        for node, name, req_c, req_m, cpu, mem in (("node-1", "web-1", 8000, 24 * GIB, 4000, 16 * GIB),
                                                   ("node-2", "api-2", 4000, 8 * GIB, 1000, 4 * GIB)):
            pods.append({"ts": t, "node": node, "namespace": "shop", "name": name, "uid": f"uid-{name}",
                         "priority_class": "koord-prod", "qos": "LS", "requests_cpu_milli": req_c,
                         "requests_memory_bytes": req_m, "cpu_milli": cpu, "memory_bytes": mem})  # fmt: skip
    write(directory, NODE_USAGE, usage)
    write(directory, POD_USAGE, pods)
    return directory


def run(directory: Path, cfg: WhatIfConfig):
    spec, _ = scenario.spec_for("history", history=directory, batch_load=0)
    return replay(spec, cfg, duration_s=TICKS * 60)


def steady(per_node: list[float]) -> list[list[float]]:
    """Per tick and node: nothing on the first tick, then the steady values."""
    return [[0.0, 0.0]] + [per_node] * (TICKS - 1)


@pytest.mark.parametrize("knobs, cpu, mem", [
    ({}, [3600, 7600], [21.6, 33.6]),
    ({"cpuReclaimThresholdPercent": 70}, [5200, 9200], [21.6, 33.6]),  # margin 4800 instead of 6400
    ({"cpuCalculatePolicy": "maxUsageRequest"}, [0, 4600], [21.6, 33.6]),
    ({"memoryCalculatePolicy": "maxUsageRequest"}, [3600, 7600], [13.6, 29.6]),  # HP memory 24 / 8 GiB
    ({"memoryReclaimThresholdPercent": 50}, [3600, 7600], [12.0, 24.0]),  # margin 32 GiB
])
def test_batch_allocatable_by_hand(tmp_path, knobs, cpu, mem):
    cfg = WhatIfConfig()
    for knob, value in knobs.items():
        cfg = with_knob(cfg, knob, value)
    result = run(history(tmp_path), cfg)
    ledger = result.ledger
    assert ledger.series("batch_alloc_cpu").tolist() == steady([float(c) for c in cpu])
    got_mem = ledger.series("batch_alloc_mem") / GIB
    assert [[round(v, 6) for v in row] for row in got_mem.tolist()] == steady(mem)
    s = result.summary()
    # percent of node capacity, mean over node-ticks: (TICKS - 1) / TICKS of the nodes' mean
    assert s["reclaimed_cpu_pct"]["mean"] == pytest.approx((TICKS - 1) / TICKS * sum(cpu) / 2 / 16_000 * 100)
    assert s["reclaimed_memory_pct"]["mean"] == pytest.approx((TICKS - 1) / TICKS * sum(mem) / 2 / 64 * 100)
    assert s["node_minutes"] == 2 * TICKS


@pytest.mark.parametrize("node1_cpu, over, strict, core_hours", [
    (6000, 0, 0, 0.0),  # 37.5 % and 12.5 %: under the 65 % reference
    (10_400, 0, 0, 0.0),  # exactly 65 %: not over
    (10_410, 0, TICKS, 0.01 * TICKS / 60),  # 65.06 %: over strictly, within the 0.1-point tolerance
    (11_000, TICKS, TICKS, 0.6 * TICKS / 60),  # 68.75 % every minute on node-1: 0.6 core over
])
def test_online_risk_by_hand(tmp_path, node1_cpu, over, strict, core_hours):
    result = run(history(tmp_path, node1_cpu), WhatIfConfig(colocation=False))
    risk = result.summary()["online_risk"]
    assert risk["risk_threshold_pct"] == 65.0
    assert risk["node_minutes_over_risk_threshold"] == over
    assert risk["node_minutes_over_risk_threshold_strict"] == strict
    assert risk["core_hours_over_risk_threshold"] == pytest.approx(core_hours)
    assert risk["node_minutes_over_cpu_capacity"] == 0
    assert result.ledger.series("online_cpu").tolist() == [[float(node1_cpu), 2000.0]] * TICKS
    # the online pods' memory and the system's: all the node holds without batch
    assert result.ledger.series("online_mem").tolist() == [[20.0 * GIB, 8.0 * GIB]] * TICKS


SEC = 1000


class Recorded(Replay):
    """The replay, noting when each descheduler round ran and which nodes it found abnormal."""

    async def _build(self) -> None:
        await super()._build()
        self.rounds: list[tuple[int, list[str]]] = []
        run_round = self.descheduler.run_round

        async def noted(now_ms: int):
            report = await run_round(now_ms)
            self.rounds.append((now_ms, list(report.plan.abnormal)))
            return report

        self.descheduler.run_round = noted


def descheduler_rounds(directory: Path, interval_s: float, minutes: int) -> list[tuple[int, list[str]]]:
    spec, _ = scenario.spec_for("history", history=history(directory, 14_000, minutes + 2), batch_load=0)
    r = Recorded(spec, WhatIfConfig(descheduler_interval_s=interval_s), duration_s=minutes * 60)
    asyncio.run(r.run())
    return r.rounds


@pytest.mark.parametrize("interval_s, times", [
    (60, [T0 + k * MIN for k in (1, 2, 3)]),
    (10, [T0 + k * MIN + s * SEC for k in (1, 2, 3) for s in (0, 10, 20, 30, 40, 50)]),
    (90, [T0 + 60 * SEC, T0 + 150 * SEC]),  # T0 + 1 min is a multiple of 90 s (and of 5 min)
    (300, [T0 + 60 * SEC]),
])
def test_descheduler_rounds_run_at_the_multiples_of_its_interval(tmp_path, interval_s, times):
    assert [t for t, _ in descheduler_rounds(tmp_path, interval_s, 3)] == times


@pytest.mark.parametrize("interval_s, first_abnormal", [(60, T0 + 7 * MIN), (10, T0 + 2 * MIN + 50 * SEC)])
def test_a_hot_node_turns_abnormal_after_six_hot_descheduler_rounds(tmp_path, interval_s, first_abnormal):
    seen = [t for t, abnormal in descheduler_rounds(tmp_path, interval_s, 8) if "node-1" in abnormal]
    assert seen and seen[0] == first_abnormal


def test_a_descheduler_interval_under_a_second_is_refused(tmp_path):
    from koordwhatif.real import RealReplay

    spec, _ = scenario.spec_for("history", history=history(tmp_path), batch_load=0)
    for mode in (Replay, RealReplay):  # before anything starts
        with pytest.raises(ConfigError, match="descheduler_interval_s 0.5: at least 1 s"):
            mode(spec, WhatIfConfig(descheduler_interval_s=0.5), duration_s=60)


def test_the_report_states_each_configurations_timing_once(tmp_path):
    from koordwhatif.report import report_doc
    from koordwhatif.runner import _run_one

    spec, _ = scenario.spec_for("history", history=history(tmp_path), batch_load=0)
    runs = [_run_one(spec.model_dump(), WhatIfConfig(name=f"every {s} s", descheduler_interval_s=s), 120, 60, None)
            for s in (60, 10)]
    stated = report_doc(runs, {})["assumptions"]
    timing = [a for a in stated if "one tick is 60 s" in a or "LowNodeLoad round" in a or "no recommender" in a]
    assert [a.split(":")[0] if "one tick" in a else a for a in timing] == [
        "one tick is 60 s of simulated time",
        "the descheduler runs a LowNodeLoad round every 60 s",
        ("no recommender runs in the replay: the scheduler-extender estimates every pod's load from its requests "
         "and estimated_scaling_factors (use_profiles finds no workload profile)"),
        "the descheduler runs a LowNodeLoad round every 10 s (6 a tick, on that tick's NodeMetrics)",
    ]


def test_the_report_names_the_settings_the_slo_controller_accepts_without_effect(tmp_path):
    from koordwhatif.engine import service_assumptions

    cfg = with_knob(WhatIfConfig(name="half-minute"), "colocation.metricReportIntervalSeconds", 30)
    assert "half-minute: colocation-config.metricReportIntervalSeconds 30 is not supported: the node agent's " \
           "metric collection is set by KOORD_AGENT_NODEMETRIC_INTERVAL_S, default 60" in service_assumptions(cfg, 60)
    assert not any("not supported" in a for a in service_assumptions(WhatIfConfig(), 60))


@pytest.mark.parametrize("interval_s, timeout_s", [(60, 300), (600, 600)])
def test_the_descheduler_s_detectors_outlive_its_round_as_in_the_service(tmp_path, interval_s, timeout_s):
    # Koordinator raises detectorCacheTimeout (5 min) to the round interval: a hot node's count
    # must survive from one 10-minute round to the next
    spec, _ = scenario.spec_for("history", history=history(tmp_path), batch_load=0)
    r = Replay(spec, WhatIfConfig(descheduler_interval_s=interval_s), duration_s=60)
    asyncio.run(r.run())
    assert r.descheduler.args.detectorCacheTimeoutSeconds == timeout_s


@pytest.mark.parametrize("asked, granted, tick_s, held_ms", [
    (2000.0, 2000.0, 60, 0.0),  # granted all it asked: no run time lost
    (2000.0, 1000.0, 60, 30_000.0),  # half: half the minute
    (2000.0, 500.0, 60, 45_000.0),
    (2000.0, 0.0, 60, 60_000.0),  # nothing: the whole minute
    (2000.0, 1000.0, 10, 5_000.0),  # a 10-s tick
    (0.0, 0.0, 60, 0.0),  # asked for nothing: nothing withheld
    (1000.0, 1200.0, 60, 0.0),  # ran more than it asked (a burst): no time lost, none gained
])
def test_the_run_time_cpu_suppress_withholds_from_a_batch_pod(asked, granted, tick_s, held_ms):
    told = []
    tick = NodeTick(allocatable={}, node_cpu=granted + 3000.0, pods={"uid-b": (granted, 1.0), "uid-o": (3000.0, 1.0)},
                    asked={"uid-b": asked, "uid-o": 3000.0})
    row = ledger_row([tick], {"uid-b": "batch/b"}, np.array([65.0]), lambda *a: told.append(a), tick_s)
    # only the batch pod is told, with the CPU it ran and the run time it was denied
    assert told == [("batch/b", granted * tick_s * 1000, held_ms)]
    assert row["batch_cpu_asked"].tolist() == [asked] and row["online_cpu"].tolist() == [3000.0]
