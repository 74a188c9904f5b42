"""A setting the service does not have is refused at start-up, named, never dropped."""

from __future__ import annotations

import os

import pytest
from koordcommon.service import load_settings
from metrics_collector.settings import Settings
from pydantic import ValidationError

PREFIX = "KOORD_COLLECTOR_"


@pytest.fixture
def env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(PREFIX):
            monkeypatch.delenv(key)
    return monkeypatch


@pytest.mark.parametrize(
    "variables, yaml_text, named",
    [
        ({f"{PREFIX}BATCHSIZE": "1"}, None, f"unknown setting: {PREFIX}BATCHSIZE (did you mean batch_size?)"),
        ({}, "recommender: http://r:8085\n", "unknown setting: recommender (did you mean recommender_url?)"),
    ],
)
def test_an_unknown_setting_is_refused_naming_it(env, tmp_path, variables, yaml_text, named):
    for k, v in variables.items():
        env.setenv(k, v)
    if yaml_text is not None:
        (tmp_path / "settings.yaml").write_text(yaml_text)
        env.setenv(f"{PREFIX}CONFIG_FILE", str(tmp_path / "settings.yaml"))
    with pytest.raises(ValidationError) as err:
        load_settings(Settings)
    assert named in str(err.value)


def test_the_same_keys_spelt_right_load(env, tmp_path):
    (tmp_path / "settings.yaml").write_text("batch_size: 100\n")
    env.setenv(f"{PREFIX}CONFIG_FILE", str(tmp_path / "settings.yaml"))
    env.setenv(f"{PREFIX}LOG_LEVEL", "DEBUG")
    settings = load_settings(Settings)
    assert settings.log_level == "DEBUG"
