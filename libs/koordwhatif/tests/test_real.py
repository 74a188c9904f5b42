"""The real mode: the services as processes over NATS agree with the fast mode.

One small trace (3 Alibaba 2018 machines from the bundled sample, 18 simulated minutes, a batch
burst at its start) under a configuration that makes every part act (batch on reclaimed
capacity, CPU suppress at 45 %, BE CPU eviction by satisfaction), replayed once as processes
at 40x and once in process; every figure of the two summaries must agree within
`agreement.TOLERANCES` (the reasons are written there and in the README). Then the same real
run is compared with fast replays of deliberately different configurations: each must be
caught on the figures that configuration governs.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from koordcommon.service import unknown_settings
from koordwhatif import scenario
from koordwhatif.agreement import TOLERANCES, Tolerance, compare, figure, leaves
from koordwhatif.config import WhatIfConfig, with_knob
from koordwhatif.engine import replay
from koordwhatif.real import evict_rate_per_s, replay_real, scaled_setting, service_defs, write_config_files

MINUTES = 18
SPEED = 40.0  # real.DEFAULT_SPEED: 18 simulated minutes in 27 wall seconds
STRESS = (  # colocation that reaches the online pods' limits within minutes on these machines
    ("cpuReclaimThresholdPercent", 80),
    ("cpuSuppressThresholdPercent", 45),
    ("cpuEvictBESatisfactionLowerPercent", 60),
    ("cpuEvictBESatisfactionUpperPercent", 80),
    ("extender.usage_thresholds.cpu", 90),
)


def small_trace():
    spec, _ = scenario.spec_for("alibaba2018", nodes=3, batch_load=2.0)
    # the bundled sample even when KOORD_TRACE_DIR names the full set; the batch trace from the
    # hour where a large job arrives at once, 20 pods a node pending at most (the rest waits in
    # the batch framework's queue)
    return spec.model_copy(update={"trace_set": "sample", "batch_trace_offset_s": 40_200, "batch_max_pending": 60})


def stress_config() -> WhatIfConfig:
    cfg = WhatIfConfig(name="stress")
    for knob, value in STRESS:
        cfg = with_knob(cfg, knob, value)
    return cfg


@pytest.fixture(scope="module")
def runs(nats_url):
    """The real run, once more at half the speed when the processes did not keep pace.

    A tick the machine could not keep (`RealRunResult.late`: an agent's round measured after
    half a tick, at 40x under 0.8 wall seconds) measures a later window than the fast mode's;
    the tolerances hold for runs that kept pace, and the run says when it did not. On a machine
    busy with other work the second run, at 20x, has twice the slack.
    """
    spec, cfg = small_trace(), stress_config()
    real = replay_real(spec, cfg, MINUTES * 60, 60, speed=SPEED, nats_url=nats_url)
    if real.late:
        real = replay_real(spec, cfg, MINUTES * 60, 60, speed=SPEED / 2, nats_url=nats_url)
    fast = replay(spec, cfg, MINUTES * 60, 60)
    return spec, cfg, fast, real


# --------------------------------------------------------------------------- the two modes


@pytest.mark.e2e
@pytest.mark.slow
def test_the_trace_makes_every_part_act(runs):
    """The comparison means something only if batch ran, was suppressed and evicted."""
    _, _, fast, real = runs
    for s in (fast.summary(), real.summary()):
        assert s["node_minutes"] == 3 * MINUTES
        assert s["reclaimed_cpu_pct"]["mean"] > 30
        assert s["batch_cpu_used_pct"] > 2
        assert s["be_cpu_seconds_suppressed"] > 1000
        assert figure(s, "evictions.qos:*") >= 5
        assert s["online_risk"]["node_minutes_over_own_suppress_threshold"] >= 5


@pytest.mark.e2e
@pytest.mark.slow
def test_fast_and_real_mode_agree(runs):
    _, _, fast, real = runs
    found = compare(fast.summary(), real.summary())
    assert not found, "the modes disagree:\n" + "\n".join(map(str, found)) + f"\nlate ticks: {real.late}"
    # the real mode observed the agents over the bus: each node's first tick has no sample yet; a
    # sample more than half a tick late is read from the usage model too, and counted
    assert 3 <= real.estimated <= 3 * MINUTES // 4
    assert real.processes == 3 + 3  # an agent per node, the slo-controller, the extender, the descheduler
    # the same ledger shape, tick for tick
    assert real.ledger.times == fast.ledger.times and real.ledger.nodes == fast.ledger.nodes
    np.testing.assert_array_equal(real.ledger.series("suppress_pct"), fast.ledger.series("suppress_pct"))


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize(
    "knob, value, caught",
    [
        # less reclaimed: the status the slo-controller writes
        ("cpuReclaimThresholdPercent", 70, {"reclaimed_cpu_pct.mean"}),
        # a higher suppress threshold: hardly any suppression and eviction
        ("cpuSuppressThresholdPercent", 55, {"be_cpu_seconds_suppressed", "evictions.qos:*",
                                             "online_risk.node_minutes_over_own_suppress_threshold"}),
        # no BE CPU eviction
        ("cpuEvictBESatisfactionLowerPercent", None, {"evictions.qos:*", "batch_pods.evicted"}),
    ],
)
def test_a_different_configuration_is_caught(runs, knob, value, caught):
    spec, cfg, _, real = runs
    other = with_knob(cfg, knob, value)
    if knob == "cpuEvictBESatisfactionLowerPercent":  # the pair goes together
        other = with_knob(other, "cpuEvictBESatisfactionUpperPercent", None)
    found = {d.figure for d in compare(replay(spec, other, MINUTES * 60, 60).summary(), real.summary())}
    assert caught <= found


# --------------------------------------------------------------------------- the comparison


@pytest.mark.parametrize(
    "fast, real, tolerance, differs",
    [
        ({"a": 10.0}, {"a": 11.9}, Tolerance("a", 2.0), False),
        ({"a": 10.0}, {"a": 12.1}, Tolerance("a", 2.0), True),
        ({"a": 100.0}, {"a": 111.0}, Tolerance("a", 1.0, 0.10), False),  # 1 + 10 % of 111 = 12.1
        ({"a": 100.0}, {"a": 114.0}, Tolerance("a", 1.0, 0.10), True),  # 1 + 11.4 = 12.4 < 14
        ({"x": {"a": 3.0}}, {"x": {"a": 3.0}}, Tolerance("x.a", 0), False),
        ({"x": {"a": 3.0}}, {"x": {"a": 4.0}}, Tolerance("x.a", 0), True),
        ({"a": float("nan")}, {"a": float("nan")}, Tolerance("a", 0), False),
        ({"a": float("nan")}, {"a": 1.0}, Tolerance("a", 5), True),
        ({"a": 1.0}, {}, Tolerance("a", 5), True),
        ({}, {}, Tolerance("a", 0), False),
        ({"e": {"qos:cpu_evict": 20, "qos:memory_evict": 4, "descheduler": 9}},
         {"e": {"qos:cpu_evict": 22}}, Tolerance("e.qos:*", 2), False),  # 24 vs 22
        ({"e": {"qos:cpu_evict": 20, "qos:memory_evict": 4}}, {"e": {}}, Tolerance("e.qos:*", 2), True),
    ],
)
def test_compare(fast, real, tolerance, differs):
    assert bool(compare(fast, real, [tolerance])) is differs


def test_every_figure_of_the_summary_has_one_tolerance():
    """A figure added to the summary is compared once someone says how far the modes may differ."""
    spec = small_trace()
    s = replay(spec, stress_config(), 3 * 60, 60).summary()
    for t in TOLERANCES:
        assert figure(s, t.figure) is not None, f"{t.figure} is not a figure of the summary"
        assert t.why
    covered = {t.figure for t in TOLERANCES}
    grouped = [t.figure[:-1] for t in TOLERANCES if t.figure.endswith("*")]
    missing = [f for f in leaves(s) if f not in covered and not any(f.startswith(g) for g in grouped)]
    assert missing == [], f"figures without a tolerance in agreement.TOLERANCES: {missing}"
    assert len(covered) == len(TOLERANCES)


def test_the_readme_states_the_tolerances():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Do the two modes agree?", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows[cells[0].split("`")[1]] = cells[1]
    assert rows == {t.figure: f"{t.abs:g}" + (f" + {t.rel * 100:g} %" if t.rel else "") for t in TOLERANCES}


# --------------------------------------------------------------------------- the processes


@pytest.mark.parametrize(
    "tick_s, speed, rate",
    [
        (60, 30.0, 1.0),  # a tick of 2 wall seconds: production's one a second refills in time
        (60, 40.0, 1.0),
        (60, 60.0, 1.25),  # a tick of 1 s: refilled within 80 % of it
        (60, 90.0, 1.875),
        (60, 120.0, 1.95),  # never 2 a second: the burst would become 2
    ],
)
def test_eviction_rate_allows_one_eviction_a_node_and_tick(tick_s, speed, rate):
    assert evict_rate_per_s(tick_s, speed) == pytest.approx(rate)


SETTINGS = {
    "node_agent": ("node_agent.settings", "AgentSettings"),
    "slo_controller": ("slo_controller.settings", "SLOSettings"),
    "scheduler_extender": ("scheduler_extender.settings", "Settings"),
    "descheduler": ("descheduler.main", "Settings"),
}


def test_every_variable_set_is_a_setting_of_its_service(tmp_path):
    cfg = stress_config()
    defs = service_defs(cfg, ["n0", "n1", "n2"], 60, SPEED, write_config_files(cfg, tmp_path))
    assert [d.name for d in defs] == ["node-agent-0", "node-agent-1", "node-agent-2", "slo-controller",
                                      "scheduler-extender", "descheduler"]
    for d in defs:
        module, name = SETTINGS[d.module]
        cls = getattr(importlib.import_module(module), name)
        assert unknown_settings(cls, environ=dict(d.env)) == [], d.name
    env = {d.name: dict(d.env) for d in defs}
    assert env["node-agent-1"]["KOORD_AGENT_NODES"] == "n1"
    assert env["slo-controller"]["KOORD_SLO_RESYNC_S"] == "0.75"  # 30 s of cluster time at 40x
    assert env["descheduler"]["KOORD_DESCHEDULER_INTERVAL_S"] == "1.5"  # its 60 s rounds at 40x
    # the files hold the configuration as the services parse it
    import yaml

    assert yaml.safe_load((tmp_path / "scheduler-extender.yaml").read_text()) == cfg.extender
    assert yaml.safe_load((tmp_path / "descheduler-args.yaml").read_text()) == cfg.descheduler


def test_many_nodes_share_agents_and_no_descheduler_means_none(tmp_path):
    cfg = WhatIfConfig(descheduler=None)
    nodes = [f"n{i}" for i in range(20)]
    defs = service_defs(cfg, nodes, 60, SPEED, write_config_files(cfg, tmp_path))
    agents = [dict(d.env)["KOORD_AGENT_NODES"].split(",") for d in defs if d.module == "node_agent"]
    assert len(agents) == 8 and sorted(n for a in agents for n in a) == sorted(nodes)
    assert "descheduler" not in {d.module for d in defs}


def test_a_scaled_setting_keeps_its_cadence_in_simulated_time():
    from slo_controller.settings import SLOSettings

    assert scaled_setting(SLOSettings, "resync_s", 60.0) == "0.5"
    assert scaled_setting(SLOSettings, "resync_s", 1.0) == "30"
    assert scaled_setting(SLOSettings, "resync_s", 10_000.0) == "0.05"  # never a busier loop than 50 ms


def test_a_descheduler_configuration_keeps_its_interval_scaled(tmp_path):
    """A DeschedulerConfiguration's 10 s rounds reach the real descheduler as 10 s of cluster time
    at the replay's speed, the file's own deschedulingInterval not contradicting it."""
    from descheduler.main import Settings, load_config, round_interval
    from koordwhatif.config import with_descheduler

    doc = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration", "deschedulingInterval": "10s",
           "profiles": [{"name": "p", "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                         "pluginConfig": [{"name": "LowNodeLoad", "args": {"highThresholds": {"cpu": 70, "memory": 80},
                                                                           "lowThresholds": {"cpu": 40, "memory": 50}}}]}]}
    cfg = with_descheduler(WhatIfConfig(), doc)
    files = write_config_files(cfg, tmp_path)
    [d] = [d for d in service_defs(cfg, ["n0"], 60, SPEED, files) if d.module == "descheduler"]
    env = dict(d.env)
    settings = Settings(interval_s=float(env["KOORD_DESCHEDULER_INTERVAL_S"]), args_file=str(files["descheduler"]))
    loaded = load_config(settings.args_file)
    assert round_interval(settings, loaded) == 10 / SPEED
    assert loaded.args.nodePools[0].highThresholds == {"cpu": 70, "memory": 80}
