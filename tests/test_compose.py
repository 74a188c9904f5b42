"""docker-compose.yml is validated statically (no Docker engine is needed to run the tests)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
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


def build_args(name: str) -> dict[str, str]:
    """The ARG values the shared Dockerfile ends up with for a compose service: its defaults in
    order (a default may name an earlier ARG), the service's build args first, as docker build does."""
    given = {k: str(v) for k, v in COMPOSE["services"][name]["build"].get("args", {}).items()}
    values: dict[str, str] = {}
    for m in re.finditer(r"^ARG (\w+)(?:=(.*))?$", DOCKERFILE.read_text(), re.MULTILINE):
        arg, default = m.group(1), m.group(2)
        if arg in given:
            values[arg] = given[arg]
        elif default is not None:
            values[arg] = re.sub(r"\$\{(\w+)\}", lambda v: values.get(v.group(1), ""), default.strip('"'))
    return values


def console_scripts(package: str) -> set[str]:
    return set(tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"].get("scripts", {}))


@pytest.mark.parametrize("name", sorted([*SERVICES, "sim-driver"]))
def test_image_is_the_shared_dockerfile_given_a_package_and_its_script(name):
    build = COMPOSE["services"][name]["build"]
    assert build["context"] == "."
    assert ROOT / build["dockerfile"] == DOCKERFILE and DOCKERFILE.is_file()
    args = build_args(name)
    assert "libs/koordcommon" in args["LIBS"].split(), "images install the shared library from the repo"
    for lib in args["LIBS"].split():
        assert (ROOT / lib / "pyproject.toml").is_file(), lib
    assert (ROOT / args["PACKAGE"] / "pyproject.toml").is_file(), args["PACKAGE"]
    assert args["COMMAND"] in console_scripts(args["PACKAGE"])
    if name in SERVICES:
        assert args["PACKAGE"] == f"services/{name}"
        assert args["PORT"] == COMPOSE["services"][name]["environment"][f"{SERVICES[name]}HTTP_PORT"]


def test_the_sim_driver_runs_koordctl_sim():
    assert build_args("sim-driver")["PACKAGE"] == "libs/koordctl"
    assert COMPOSE["services"]["sim-driver"]["command"][:2] == ["koordctl", "sim"]  # CMD, no ENTRYPOINT to prefix it
    assert "ENTRYPOINT" not in DOCKERFILE.read_text()


@pytest.mark.parametrize("name,prefix", sorted(SERVICES.items()))
def test_service_is_wired(name, prefix):
    svc = COMPOSE["services"][name]
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


@pytest.mark.parametrize("name", sorted([*SERVICES, "sim-driver"]))
def test_images_install_the_simulator_where_the_default_backend_needs_it(name):
    args = build_args(name)
    package = args["PACKAGE"]
    needs = package == "libs/koordctl" or _opens_the_cluster(ROOT / package)
    installed = "libs/koordsim" in args["LIBS"].split()
    assert installed == needs, f"{package}: koordsim {'missing' if needs else 'not needed'}"
