"""Services as processes in end-to-end tests: start one on its module, stop it as a supervisor
would (SIGTERM, then SIGKILL), and wait for a condition with a bound."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def start(module: str, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """`python -m module` with `env`, stdout and stderr into `log_path`."""
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", module], env=env, stdout=log, stderr=log)


def stop(proc: subprocess.Popen, timeout_s: float = 20) -> int:
    """SIGTERM, then SIGKILL after `timeout_s`; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


async def poll(fn: Callable[[], Awaitable[T | None]], timeout_s: float, every_s: float = 0.1) -> T:
    """The first value of `fn()` that is not None, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await fn()
        if value is not None:
            return value
        await asyncio.sleep(every_s)
    raise AssertionError(f"nothing within {timeout_s} s")
