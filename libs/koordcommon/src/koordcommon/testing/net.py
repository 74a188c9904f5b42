"""Small network helpers for tests and benchmarks: free ports, waiting for servers."""

from __future__ import annotations

import collections
import socket
import time
import urllib.error
import urllib.request

__all__ = ["free_port", "wait_http_ready", "wait_tcp_ready"]


# The ports this process handed out lately. The OS may give a port it just handed out again once
# its probe socket is closed: two servers of one cluster were once told the same port (one's client
# port, the other's monitoring port), and the second died with "address already in use".
_GIVEN: collections.deque[int] = collections.deque(maxlen=4096)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now and not handed out by this process lately (the OS
    picks it; a small race with other processes remains)."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            break
    _GIVEN.append(port)
    return port


def wait_tcp_ready(host: str, port: int, timeout: float = 10.0) -> None:
    """Return once host:port accepts connections; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{host}:{port} did not accept connections within {timeout} s: {exc}") from None
            time.sleep(0.02)


def wait_http_ready(url: str, timeout: float = 10.0) -> int:
    """Return the status once `url` answers with a status below 500; TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return exc.code
            last = exc
        except (OSError, ValueError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{url} not ready within {timeout} s (last: {last})")
        time.sleep(0.02)
