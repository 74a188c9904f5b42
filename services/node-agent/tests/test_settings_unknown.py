"""A setting the service does not have is refused at start-up, named, never dropped."""

from __future__ import annotations

import os

import pytest
from koordcommon.service import load_settings
from node_agent.settings import AgentSettings
from pydantic import ValidationError

PREFIX = "KOORD_AGENT_"


@pytest.fixture
def env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(PREFIX):
            monkeypatch.delenv(key)
    return monkeypatch


@pytest.mark.parametrize(
    "variables, yaml_text, named",
    [
        ({f"{PREFIX}SHARDS": "1"}, None, f"unknown setting: {PREFIX}SHARDS (did you mean shard?)"),
        ({}, "qos_dryrun: true\n", "unknown setting: qos_dryrun (did you mean qos_dry_run?)"),
    ],
)
def test_an_unknown_setting_is_refused_naming_it(env, tmp_path, variables, yaml_text, named):
    for k, v in variables.items():
        env.setenv(k, v)
    if yaml_text is not None:
        (tmp_path / "settings.yaml").write_text(yaml_text)
        env.setenv(f"{PREFIX}CONFIG_FILE", str(tmp_path / "settings.yaml"))
    with pytest.raises(ValidationError) as err:
        load_settings(AgentSettings)
    assert named in str(err.value)


def test_the_same_keys_spelt_right_load(env, tmp_path):
    (tmp_path / "settings.yaml").write_text("mode: sim\n")
    env.setenv(f"{PREFIX}CONFIG_FILE", str(tmp_path / "settings.yaml"))
    env.setenv(f"{PREFIX}LOG_LEVEL", "DEBUG")
    settings = load_settings(AgentSettings)
    assert settings.log_level == "DEBUG"
