"""The recommendation rule and the report's files, on summaries written by hand."""

from __future__ import annotations

import json
import math

import pytest
from koordwhatif.config import WhatIfConfig, with_knob
from koordwhatif.report import finite, markdown_table, recommend, write
from koordwhatif.runner import ConfigRun

# settings check-config calls a fight (an error): the load-aware threshold above CPU suppress's
FIGHT = {"extender.usage_thresholds.cpu": 75, "extender.usage_thresholds.memory": 75}
CLEAN = {"extender.usage_thresholds.memory": 75}  # Koordinator's defaults warn of memory 95 over 80


def run(name: str, reclaimed: float, over: float, evictions: int = 0, baseline: bool = False,
        knobs: dict | None = None) -> ConfigRun:
    summary = {
        "baseline": baseline,
        "reclaimed_cpu_pct": {"mean": math.nan if baseline else reclaimed, "p10": 0.0, "p50": 0.0},
        "reclaimed_memory_pct": {"mean": 20.0, "p10": 0.0, "p50": 0.0},
        "batch_cpu_used_pct": 7.0, "batch_cpu_hours_completed": 100.0,
        "queueing_delay_s": {"p50": 60.0, "p95": 600.0}, "held_back_by": {"Insufficient koordinator.sh/batch-memory": 0.5},
        "be_cpu_seconds_suppressed": 10.0, "evictions": {"qos:cpu_evict": evictions},
        "online_risk": {"node_minutes_over_risk_threshold": over, "core_hours_over_risk_threshold": over / 100,
                        "node_minutes_over_cpu_capacity": 0.0, "node_minutes_over_memory_capacity": 0.0},
        "utilisation_cpu_pct": {"mean": 40.0, "p95": 60.0, "stddev_across_nodes": 10.0},
    }  # fmt: skip
    hourly = {"hours": [], "nodes": [], "batch_alloc_cpu": [], "online_cpu": [], "batch_cpu": [], "capacity_cpu": []}
    cfg = WhatIfConfig(name=name)
    for knob, value in (CLEAN if knobs is None else knobs).items():
        cfg = with_knob(cfg, knob, value)
    return ConfigRun(cfg.doc(), summary, hourly, ["an assumption"], 1.0, 0)


BASE = run("no colocation", 0, 100, baseline=True)


@pytest.mark.parametrize("runs, expected, why", [
    # the most reclaimed among those no riskier than the baseline
    ([BASE, run("a", 25, 120), run("b", 20, 100), run("c", 15, 90)], "b", "reclaims the most CPU (20.0 %"),
    # a tie in reclaimed capacity goes to fewer evictions
    ([BASE, run("a", 20, 100, evictions=5), run("b", 20, 100, evictions=1)], "b", "2 of 2 configurations"),
    # offering (almost) nothing is safe but never the answer
    ([BASE, run("nothing", 0.5, 100), run("a", 25, 130), run("b", 22, 110)], "b",
     "no configuration offering batch keeps the online risk at the baseline's; this one has the least (110"),
    ([BASE, run("nothing", 0.0, 100)], None, "no configuration offers batch capacity"),
    ([run("a", 25, 130), run("b", 30, 140)], "b", "no baseline to compare risk with"),
    # settings that fight each other are set aside, however well they replayed
    ([BASE, run("a", 25, 100, knobs=FIGHT), run("b", 20, 100)], "b",
     ("1 of 1 configurations offering batch whose online risk is no worse than without colocation (100 node-minutes "
     "above 65 % CPU, 0 / 0 over CPU / memory capacity); 1 more offering batch were set aside")),
    ([BASE, run("a", 25, 100, knobs=FIGHT)], None, "every configuration offering batch has settings that fight"),
])  # fmt: skip
def test_recommendation(runs, expected, why):
    best, text = recommend(runs)
    assert (best.name if best else None) == expected
    assert why in text


def test_the_report_files_carry_no_nan(tmp_path):
    runs = [BASE, run("a", 25, 100)]
    paths = write(runs, {"title": "hand-written"}, tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["runs"][0]["summary"]["reclaimed_cpu_pct"]["mean"] is None and doc["recommended"] == "a"
    assert "| a | 25.0 / 0.0 / 0.0 |" in markdown_table(runs)
    assert "batch-memory 50 %" in markdown_table(runs)
    assert finite({"x": [math.inf, 1.5, -math.nan]}) == {"x": [None, 1.5, None]}


def test_the_report_lists_each_configurations_fights(tmp_path):
    runs = [BASE, run("a", 25, 100, knobs=FIGHT), run("b", 20, 100, knobs={}), run("c", 15, 100)]
    paths = write(runs, {"title": "hand-written"}, tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["recommended"] == "b"
    assert [[(f["level"], f["settings"][0]) for f in r["findings"]] for r in doc["runs"]] == [
        [], [("error", "scheduler-extender usage_thresholds.cpu=75")],
        [("warning", "scheduler-extender usage_thresholds.memory=95")], []]
    md = paths["markdown"].read_text()
    assert ("- a: error scheduler-extender usage_thresholds.cpu=75 vs cpuSuppressThresholdPercent=65\n"
            "- b: warning scheduler-extender usage_thresholds.memory=95 vs descheduler __default_node_pool__ "
            "highThresholds.memory=80\n") in md
    assert "every configuration:" not in md
    # none: no section
    clean = write([BASE, run("c", 15, 100)], {"title": "hand-written"}, tmp_path / "clean")
    assert "fight" not in clean["markdown"].read_text()
    # shared by every configuration: once; a lone configuration's are its own
    both = write([BASE, run("a", 25, 100, knobs={}), run("b", 20, 100, knobs={})], {"title": "h"}, tmp_path / "both")
    assert ("- every configuration: warning scheduler-extender usage_thresholds.memory=95 vs descheduler "
            "__default_node_pool__ highThresholds.memory=80\n\nAssumptions") in both["markdown"].read_text()
    alone = write([BASE, run("a", 25, 100, knobs={})], {"title": "h"}, tmp_path / "alone")
    assert "- a: warning scheduler-extender usage_thresholds.memory=95" in alone["markdown"].read_text()
