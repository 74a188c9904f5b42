"""Real Kubernetes API objects for tests, shipped with koordcommon (see k8s-fixtures/PROVENANCE.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent / "k8s-fixtures"


def fixtures_dir() -> Path:
    """The folder of the Kubernetes API fixtures."""
    return FIXTURES


def k8s_fixture(name: str) -> Any:
    """One fixture, decoded (JSON or YAML)."""
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
