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
    assert env["NATS_URL"] == "tls://nats:4222"
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


# ----------------------------------------------------------------------------- credentials
# The stack is locked down as `koordctl up` is: the secrets-init service writes the credentials
# into a volume, NATS runs the configuration written there, every client reads its own identity,
# the CA and the API token from it. Checked by running the same command and server here.

SECRETS_VOLUME = "koord-secrets"
CLIENTS = {**{name: name for name in SERVICES}, "node-agent-1": "node-agent", "sim-driver": "sim-driver"}


def secrets_dir() -> str:
    """Where secrets-init writes (its --out), which is where every other service mounts the volume."""
    cmd = COMPOSE["services"]["secrets-init"]["command"]
    return cmd[cmd.index("--out") + 1]


def mounts(name: str) -> dict[str, str]:
    """target -> `source[:mode]` of a service's volumes."""
    out = {}
    for vol in COMPOSE["services"][name].get("volumes", []):
        source, target, *mode = vol.split(":")
        out[target] = ":".join([source, *mode])
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """The secrets-init command run here (its arguments as compose gives them, the directory and
    the owner swapped for a temp dir and this user)."""
    import os

    from koordctl.cli import app
    from typer.testing import CliRunner

    out = tmp_path_factory.mktemp("secrets") / "koord"
    cmd = list(COMPOSE["services"]["secrets-init"]["command"])
    assert cmd[:2] == ["koordctl", "secure-init"], "the credentials come from koordctl secure-init"
    cmd[cmd.index("--out") + 1] = str(out)
    cmd[cmd.index("--owner") + 1] = f"{os.getuid()}:{os.getgid()}"
    result = CliRunner().invoke(app, cmd[1:])
    assert result.exit_code == 0, result.output
    return out


def test_secrets_init_writes_into_the_volume_as_the_services_user():
    svc = COMPOSE["services"]["secrets-init"]
    assert mounts("secrets-init")[secrets_dir()] == SECRETS_VOLUME, "written into the volume (read-write)"
    assert SECRETS_VOLUME in COMPOSE["volumes"]
    owner = svc["command"][svc["command"].index("--owner") + 1]
    user = re.search(r"^USER (\d+)$", DOCKERFILE.read_text(), re.MULTILINE).group(1)
    assert owner.split(":")[0] == user, "the services' user must be able to read its seed and the token"
    assert "--no-keep" not in svc["command"], "kept across restarts: a new set would lock out running clients"
    host = svc["command"][svc["command"].index("--host") + 1]
    assert all(COMPOSE["services"][c]["environment"]["NATS_URL"] == f"tls://{host}:4222" for c in CLIENTS)


def test_nats_runs_the_generated_configuration_after_it_is_written():
    nats = COMPOSE["services"]["nats"]
    cmd = nats["command"]
    assert cmd[cmd.index("-c") + 1] == f"{secrets_dir()}/nats-server.conf"
    assert mounts("nats")[secrets_dir()] == f"{SECRETS_VOLUME}:ro"
    assert nats["depends_on"]["secrets-init"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_every_client_has_its_own_identity_the_ca_and_the_token(name, generated):
    from koordcommon.service import ServiceSettings
    from koordctl.secure import IDENTITIES

    svc = COMPOSE["services"][name]
    env = svc["environment"]
    assert mounts(name)[secrets_dir()] == f"{SECRETS_VOLUME}:ro", "clients read the secrets, never write them"
    seed = Path(env["NATS_NKEY_SEED_FILE"])
    assert seed.parent == Path(secrets_dir()) and seed.stem == CLIENTS[name] and seed.stem in IDENTITIES
    for var in ("NATS_NKEY_SEED_FILE", "NATS_CA_FILE", "KOORD_API_TOKEN_FILE"):
        path = Path(env[var])
        assert path.parent == Path(secrets_dir()), var
        assert (generated / path.name).is_file(), f"{var}: secrets-init writes no {path.name}"
    # a variable outside the service's prefix must be one every service reads (a typo would be ignored)
    plain = set(ServiceSettings.PLAIN_ENV.values())
    prefix = SERVICES.get(CLIENTS[name], "KOORD_")
    assert {k for k in env if not k.startswith(prefix)} <= plain, name


async def test_the_generated_server_admits_each_service_as_itself_and_nobody_else(generated):
    """The server configuration secrets-init wrote, run by a real nats-server: each compose
    client connects over TLS with its seed (verifying the server against the CA); a client
    with no identity, or with a seed the server does not know, is refused."""
    import json

    import nats
    from cryptography import x509
    from koordcommon.bus import Bus
    from koordcommon.natsauth import BusCredentials, new_seed, write_seed
    from koordcommon.testing.nats import NatsServer

    cert = x509.load_pem_x509_certificate((generated / "nats-server.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "nats" in names.get_values_for_type(x509.DNSName), "clients reach the server as nats"
    config = json.loads((generated / "nats-server.conf").read_text())
    tls = config["tls"]
    assert Path(tls["cert_file"]) == generated / "nats-server.crt" and Path(tls["key_file"]) == generated / "nats-server.key"

    ca = str(generated / "ca.crt")
    with NatsServer(config=config, tls=True) as server:
        for name, identity in sorted(CLIENTS.items()):
            seed = generated / Path(COMPOSE["services"][name]["environment"]["NATS_NKEY_SEED_FILE"]).name
            bus = Bus(server.url, service=identity, credentials=BusCredentials(str(seed), ca))
            await bus.connect(timeout_s=10)
            assert bus.connected, name
            await bus.close()
        stranger = write_seed(generated.parent / "stranger.nk", new_seed())
        for creds in (BusCredentials("", ca), BusCredentials(str(stranger), ca)):
            with pytest.raises(Exception, match="(?i)authorization"):
                await nats.connect(server.url, allow_reconnect=False, connect_timeout=5,
                                   **creds.connect_options("_INBOX.stranger"))
