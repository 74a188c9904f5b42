"""A setting the service does not have is refused at start-up, named, never dropped."""

from __future__ import annotations

import os

import pytest
from koordcommon.service import load_settings
from pydantic import ValidationError
from scheduler_extender.settings import Settings

PREFIX = "KOORD_EXTENDER_"


@pytest.fixture
def env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(PREFIX):
            monkeypatch.delenv(key)
    return monkeypatch


@pytest.mark.parametrize(
    "variables, yaml_text, named",
    [
        ({f"{PREFIX}USAGE_THRESHOLD": "1"}, None, f"unknown setting: {PREFIX}USAGE_THRESHOLD (did you mean usage_thresholds?)"),
        ({}, "url_prefx: /scheduler\n", "unknown setting: url_prefx (did you mean url_prefix?)"),
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
    (tmp_path / "settings.yaml").write_text("url_prefix: /scheduler\n")
    env.setenv(f"{PREFIX}CONFIG_FILE", str(tmp_path / "settings.yaml"))
    env.setenv(f"{PREFIX}LOG_LEVEL", "DEBUG")
    settings = load_settings(Settings)
    assert settings.log_level == "DEBUG"
