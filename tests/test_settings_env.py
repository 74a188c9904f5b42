"""Every variable the deployments and the demo launcher set is a setting of the service it is
set for: services refuse unknown `<PREFIX>*` variables at start-up, so a stale name here would
stop the service (the Helm chart: tests/test_helm_chart.py). And that refusal itself, for every
service: a misspelt variable or settings-file key stops it, named, with what it likely meant."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import yaml
from koordcommon.service import load_settings, unknown_settings
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "node-agent": ("KOORD_AGENT_", "node_agent.settings", "AgentSettings"),
    "metrics-collector": ("KOORD_COLLECTOR_", "metrics_collector.settings", "Settings"),
    "slo-controller": ("KOORD_SLO_", "slo_controller.settings", "SLOSettings"),
    "scheduler-extender": ("KOORD_EXTENDER_", "scheduler_extender.settings", "Settings"),
    "descheduler": ("KOORD_DESCHEDULER_", "descheduler.main", "Settings"),
    "recommender": ("KOORD_RECOMMENDER_", "recommender.main", "Settings"),
}


def settings_class(service: str):
    _, module, name = SETTINGS[service]
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_docker_compose_sets_only_settings(service):
    env = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][service]["environment"]
    assert unknown_settings(settings_class(service), environ={k: str(v) for k, v in env.items()}) == []


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_the_demo_launcher_sets_only_settings(service, tmp_path, monkeypatch):
    from koordctl.launcher import SERVICES, DemoPlan, Launcher

    for k in list(os.environ):
        if k.startswith(SETTINGS[service][0]):
            monkeypatch.delenv(k)
    spec = next(s for s in SERVICES if s.name == service)
    launcher = Launcher(DemoPlan(data_dir=tmp_path))
    env = launcher.service_env(spec, 8000, {s.name: "http://127.0.0.1:1" for s in SERVICES})
    assert spec.env_prefix == SETTINGS[service][0]
    assert unknown_settings(settings_class(service), environ=env) == []


def test_a_variable_of_another_service_is_not_this_ones_business():
    # each service judges only its own prefix: the agent's variables never stop the collector
    env = {"KOORD_AGENT_SHARD": "0/2", "KOORD_COLLECTOR_BATCH_SIZE": "10"}
    assert unknown_settings(settings_class("metrics-collector"), environ=env) == []
    assert unknown_settings(settings_class("node-agent"), environ=env) == []


# A setting the service does not have is refused at start-up, named, with the setting it most
# likely meant, never dropped: per service, a misspelt variable, a misspelt YAML key, and a YAML
# key spelt right (which loads).
UNKNOWN = {
    "node-agent": ("SHARDS", "shard", "qos_dryrun: true", "qos_dry_run", "mode: sim"),
    "metrics-collector": ("BATCHSIZE", "batch_size", "recommender: http://r:8085", "recommender_url", "batch_size: 100"),
    "slo-controller": ("RESYNC", "resync_s", "config_map: /etc/slo.yaml", "config_map_file", "resync_s: 5"),
    "scheduler-extender": ("USAGE_THRESHOLD", "usage_thresholds", "url_prefx: /scheduler", "url_prefix",
                           "url_prefix: /scheduler"),
    "descheduler": ("INTERVAL", "interval_s", "dryrun: true", "dry_run", "interval_s: 30"),
    "recommender": ("SAFETY_MARGINS", "safety_margin", "checkpoint_interval: 5", "checkpoint_interval_s",
                    "safety_margin: 0.2"),
}  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("KOORD_"):
            monkeypatch.delenv(key)
    return monkeypatch


def _load(service: str):
    return load_settings(settings_class(service))


def _settings_file(env, tmp_path, service: str, line: str) -> None:
    """The service reads `line` as its settings file (<PREFIX>CONFIG_FILE)."""
    (tmp_path / "settings.yaml").write_text(line + "\n")
    env.setenv(f"{SETTINGS[service][0]}CONFIG_FILE", str(tmp_path / "settings.yaml"))


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_an_unknown_variable_is_refused_naming_it(service, clean_env):
    prefix = SETTINGS[service][0]
    variable, meant, _, _, _ = UNKNOWN[service]
    clean_env.setenv(f"{prefix}{variable}", "1")
    with pytest.raises(ValidationError) as err:
        _load(service)
    assert f"unknown setting: {prefix}{variable} (did you mean {meant}?)" in str(err.value)


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_an_unknown_key_of_the_settings_file_is_refused_naming_it(service, clean_env, tmp_path):
    _, _, line, meant, _ = UNKNOWN[service]
    _settings_file(clean_env, tmp_path, service, line)
    with pytest.raises(ValidationError) as err:
        _load(service)
    assert f"unknown setting: {line.split(':')[0]} (did you mean {meant}?)" in str(err.value)


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_the_same_keys_spelt_right_load(service, clean_env, tmp_path):
    line = UNKNOWN[service][4]
    _settings_file(clean_env, tmp_path, service, line)
    clean_env.setenv(f"{SETTINGS[service][0]}LOG_LEVEL", "DEBUG")
    settings = _load(service)
    key, value = (part.strip() for part in line.split(":", 1))
    assert getattr(settings, key) == yaml.safe_load(value)
    assert settings.log_level == "DEBUG"
