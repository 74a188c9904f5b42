"""docker-compose.yml is validated statically (no Docker engine is needed to run the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = {
    "node-agent": "KOORD_AGENT_",
    "metrics-collector": "KOORD_COLLECTOR_",
    "slo-controller": "KOORD_SLO_",
    "scheduler-extender": "KOORD_EXTENDER_",
    "descheduler": "KOORD_DESCHEDULER_",
    "recommender": "KOORD_RECOMMENDER_",
}


def test_stack_has_infrastructure_and_every_service():
    names = set(COMPOSE["services"])
    assert {"nats", "postgres", "sim-driver"} <= names
    assert set(SERVICES) <= names
    assert "-js" in COMPOSE["services"]["nats"]["command"], "NATS must run with JetStream"


@pytest.mark.parametrize("name,prefix", sorted(SERVICES.items()))
def test_service_builds_from_repo_root_and_is_wired(name, prefix):
    svc = COMPOSE["services"][name]
    build = svc["build"]
    assert build["context"] == "."
    dockerfile = ROOT / build["dockerfile"]
    assert dockerfile.is_file(), f"{dockerfile} is missing"
    text = dockerfile.read_text()
    assert "libs/koordcommon" in text, "images install the shared library from the repo"
    env = svc["environment"]
    assert env["NATS_URL"] == "nats://nats:4222"
    port = env[f"{prefix}HTTP_PORT"]
    assert any(str(p).endswith(f":{port}") for p in svc["ports"])
    assert port in " ".join(svc["healthcheck"]["test"]) and "/readyz" in " ".join(svc["healthcheck"]["test"])
    assert svc["depends_on"]["nats"]["condition"] == "service_healthy"


def test_database_users_wait_for_postgres():
    for name in ("metrics-collector", "slo-controller", "recommender"):
        assert COMPOSE["services"][name]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_mounted_config_exists():
    for svc in COMPOSE["services"].values():
        for vol in svc.get("volumes", []):
            src = vol.split(":", 1)[0]
            if src.startswith("./"):
                assert (ROOT / src).exists(), f"{src} is mounted but missing"


def _opens_the_cluster(package_dir: Path) -> bool:
    """A service whose code opens the cluster port runs the default backend, the simulated one."""
    return any("start_cluster(" in p.read_text() or 'open_cluster("sim"' in p.read_text()
               for p in (package_dir / "src").rglob("*.py"))


@pytest.mark.parametrize("package", sorted(
    [f"services/{n}" for n in SERVICES] + ["libs/koordctl"]))
def test_images_install_the_simulator_where_the_default_backend_needs_it(package):
    text = (ROOT / package / "Dockerfile").read_text()
    needs = package == "libs/koordctl" or _opens_the_cluster(ROOT / package)
    assert ("libs/koordsim" in text) == needs, f"{package}: koordsim {'missing' if needs else 'not needed'}"
