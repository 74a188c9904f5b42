"""Every variable the deployments and the demo launcher set is a setting of the service it is
set for: services refuse unknown `<PREFIX>*` variables at start-up, so a stale name here would
stop the service (the Helm chart: tests/test_helm_chart.py)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import yaml
from koordcommon.service import unknown_settings

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
