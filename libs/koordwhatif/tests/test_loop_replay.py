"""A configuration check-config refuses shows its loop when replayed: batch capacity up to 65 %
of a node's CPU with a descheduler that drains nodes above 40 % evicts batch pods that come back
and are evicted again; with the descheduler's thresholds above the batch capacity nothing moves.
Three hours of the 14 Alibaba 2018 machines (the bundled sample holds them)."""

from __future__ import annotations

from koordwhatif.checkconfig import ERROR, check
from koordwhatif.config import WhatIfConfig, with_knob
from koordwhatif.runner import _run_one
from koordwhatif.scenario import spec_for


def config(name: str, high: int, low: int) -> WhatIfConfig:
    cfg = with_knob(WhatIfConfig(name=name), "cpuReclaimThresholdPercent", 65)
    cfg = with_knob(cfg, "descheduler.highThresholds", {"cpu": high, "memory": 95})
    return with_knob(cfg, "descheduler.lowThresholds", {"cpu": low, "memory": 90})


def test_the_refused_combination_loops_in_the_replay():
    spec, _ = spec_for("alibaba2018", batch_load=0.2)
    good, bad = config("good", 75, 45), config("bad", 40, 25)
    assert any(f.level == ERROR and f.settings[0] == "cpuReclaimThresholdPercent=65" for f in check(bad))
    assert not any(f.settings[0] == "cpuReclaimThresholdPercent=65" for f in check(good))
    runs = {cfg.name: _run_one(spec.model_dump(), cfg, 3 * 3600, 60, None) for cfg in (good, bad)}
    assert runs["good"].summary["evictions"].get("descheduler", 0) == 0 and runs["good"].loops == 0
    assert runs["bad"].summary["evictions"]["descheduler"] >= 10  # 23 when written
    assert runs["bad"].loops >= 3  # pods evicted twice or more: 7 when written
