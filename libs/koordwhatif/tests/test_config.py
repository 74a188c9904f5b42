"""Configurations, knobs and sweeps; the default ConfigMap is the repository's example."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from koordwhatif.config import (
    DEFAULT_SLO_CONFIG,
    ConfigError,
    WhatIfConfig,
    load_config,
    parse_sweep,
    sweep,
    with_knob,
)

REPO = Path(__file__).resolve().parents[3]


def test_default_is_the_example_configmap():
    cm = yaml.safe_load((REPO / "deploy" / "config" / "slo-controller-config.yaml").read_text())
    assert {k: json.loads(v) for k, v in cm["data"].items()} == DEFAULT_SLO_CONFIG


@pytest.mark.parametrize(
    "knob, value, where, expected",
    [
        ("cpuReclaimThresholdPercent", 50, ("slo", "colocation-config", "cpuReclaimThresholdPercent"), 50),
        ("colocation.cpuCalculatePolicy", "maxUsageRequest", ("slo", "colocation-config", "cpuCalculatePolicy"),
         "maxUsageRequest"),
        ("cpuSuppressThresholdPercent", 55,
         ("slo", "resource-threshold-config", "clusterStrategy", "cpuSuppressThresholdPercent"), 55),
        ("extender.usage_thresholds.cpu", 75, ("extender", "usage_thresholds"), {"cpu": 75, "memory": 95}),
        ("descheduler.nodePools.0.highThresholds.cpu", 80, ("descheduler", "nodePools", 0, "highThresholds"),
         {"cpu": 80}),
    ],
)
def test_knobs_land_where_the_service_reads_them(knob, value, where, expected):
    cfg = with_knob(WhatIfConfig(), knob, value)
    doc = cfg.__dict__[where[0]]
    for key in where[1:]:
        doc = doc[key]
    assert doc == expected
    cfg.extender_settings()
    cfg.descheduler_args()


def test_sweep_is_the_product_named_by_what_differs():
    knobs = parse_sweep(["cpuReclaimThresholdPercent=50,60,70", "cpuCalculatePolicy=usage,maxUsageRequest",
                         "extender.usage_thresholds.cpu=65,75"])
    configs = sweep(WhatIfConfig(), knobs)
    assert len(configs) == 12
    assert configs[0].name == "cpuReclaimThresholdPercent=50 cpuCalculatePolicy=usage usage_thresholds.cpu=65"
    assert configs[-1].slo["colocation-config"]["cpuReclaimThresholdPercent"] == 70
    assert configs[-1].extender["usage_thresholds"]["cpu"] == 75
    assert len({c.name for c in configs}) == 12


@pytest.mark.parametrize(
    "spec, message",
    [(["oops"], "write knob=value1,value2"), (["nosuch.knob=1"], "unknown knob"), (["=1"], "knob=value")],
)
def test_bad_sweeps_say_why(spec, message):
    with pytest.raises(ConfigError, match=message):
        sweep(WhatIfConfig(), parse_sweep(spec))


def test_a_value_the_service_refuses_is_refused():
    with pytest.raises(ConfigError, match="threshold cpu=150 must be within 0..100"):
        sweep(WhatIfConfig(), parse_sweep(["extender.usage_thresholds.cpu=150"]))


@pytest.mark.parametrize(
    "spec, message",
    [
        (["cpuCalculatePolicy=bogus"],
         ('cpuCalculatePolicy=bogus: slo-controller-config rejected: colocation-config: cpuCalculatePolicy must be one '
         'of usage, request, maxUsageRequest, predict, got "bogus"')),
        (["threshold.cpuSuppressPolicy=quota"],
         ("cpuSuppressPolicy=quota: slo-controller-config rejected: resource-threshold-config.clusterStrategy."
         'cpuSuppressPolicy: must be one of cpuset, cfsQuota, got "quota"')),
    ],
)
def test_a_configmap_the_slo_controller_refuses_is_refused_before_any_replay(spec, message):
    with pytest.raises(ConfigError) as exc:
        sweep(WhatIfConfig(), parse_sweep(spec))
    assert str(exc.value) == message
    from koordwhatif.config import variations

    with pytest.raises(ConfigError, match="slo-controller-config rejected"):
        variations(WhatIfConfig(), parse_sweep(spec))


def test_load_config_refuses_a_field_the_slo_controller_does_not_know(tmp_path):
    p = tmp_path / "typo.yaml"
    p.write_text(yaml.safe_dump({"slo-controller-config": {"data": {
        "colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercnt": 70})}}}))
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value) == (f"{p}: typo: slo-controller-config rejected: colocation-config: unknown field "
                              "cpuReclaimThresholdPercnt (did you mean cpuReclaimThresholdPercent?)")


def test_load_config_file(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump({
        "slo-controller-config": {"kind": "ConfigMap", "data": {
            "colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": 70})}},
        "scheduler-extender": {"usage_thresholds": {"cpu": 70, "memory": 90}},
        "descheduler": None,
    }))
    cfg = load_config(p)
    assert cfg.name == "mine" and cfg.descheduler is None
    assert cfg.slo == {"colocation-config": {"enable": True, "cpuReclaimThresholdPercent": 70}}
    assert cfg.extender_settings().usage_thresholds == {"cpu": 70, "memory": 90}
    p.write_text(yaml.safe_dump({"slo-controller-confg": {}}))
    with pytest.raises(ConfigError, match="unknown key.*slo-controller-confg"):
        load_config(p)


def test_variations_change_one_setting_at_a_time_and_skip_the_defaults():
    from koordwhatif.config import parse_sweep, variations

    knobs = parse_sweep(["cpuReclaimThresholdPercent=50,60,70", "cpuCalculatePolicy=usage,maxUsageRequest",
                         "extender.usage_thresholds.cpu=65,75"])
    got = variations(WhatIfConfig(), knobs)
    # 60, usage and 65 are what the default configuration already does (written or by default)
    assert [c.name for c in got] == ["default", "cpuReclaimThresholdPercent=50", "cpuReclaimThresholdPercent=70",
                                     "cpuCalculatePolicy=maxUsageRequest", "usage_thresholds.cpu=75"]
    default = WhatIfConfig().slo["colocation-config"]
    assert got[1].slo["colocation-config"] == {**default, "cpuReclaimThresholdPercent": 50}
    assert got[3].slo["colocation-config"] == {**default, "cpuCalculatePolicy": "maxUsageRequest"}
    assert got[4].extender == {"usage_thresholds": {"cpu": 75, "memory": 95}} and got[4].slo == WhatIfConfig().slo


DESCHEDULER_CONFIGURATION = {
    "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration", "deschedulingInterval": "10s",
    "profiles": [{"name": "koord-descheduler",
                  "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]},
                              "deschedule": {"disabled": [{"name": "*"}]}},
                  "pluginConfig": [{"name": "LowNodeLoad", "args": {
                      "apiVersion": "descheduler/v1alpha2", "kind": "LowNodeLoadArgs",
                      "lowThresholds": {"cpu": 45, "memory": 55}, "highThresholds": {"cpu": 60, "memory": 80}}}]}],
}  # fmt: skip


def test_a_whole_descheduler_configuration_is_read_as_the_service_reads_it(tmp_path):
    from koordwhatif.config import with_descheduler

    cfg = with_descheduler(WhatIfConfig(), copy.deepcopy(DESCHEDULER_CONFIGURATION))
    assert cfg.descheduler_interval_s == 10.0  # its deschedulingInterval is the replay's round interval
    [pool] = cfg.descheduler_args().nodePools
    assert (pool.lowThresholds, pool.highThresholds) == ({"cpu": 45, "memory": 55}, {"cpu": 60, "memory": 80})
    # a knob reaches the LowNodeLoad plugin's arguments inside the profile
    swept = with_knob(cfg, "descheduler.highThresholds.cpu", 70)
    assert swept.descheduler_args().nodePools[0].highThresholds == {"cpu": 70, "memory": 80}
    assert cfg.descheduler_args().nodePools[0].highThresholds["cpu"] == 60  # cfg itself untouched
    # a configuration file: the interval once, or refused
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump({"descheduler": DESCHEDULER_CONFIGURATION}))
    assert load_config(p).descheduler_interval_s == 10.0
    p.write_text(yaml.safe_dump({"descheduler": DESCHEDULER_CONFIGURATION, "descheduler_interval_s": 30}))
    with pytest.raises(ConfigError, match=r"descheduler_interval_s 30 and the DeschedulerConfiguration's "
                                          r"deschedulingInterval \(10 s\) differ"):
        load_config(p)
    p.write_text(yaml.safe_dump({"descheduler": {**DESCHEDULER_CONFIGURATION, "profiles": [{"name": "a"}, {"name": "b"}]}}))
    with pytest.raises(ConfigError, match="one profile is supported"):
        load_config(p)
