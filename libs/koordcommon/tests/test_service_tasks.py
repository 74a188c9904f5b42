"""The chassis' entry point and its teardown of a service's long-lived tasks: run until stop,
cancel, wait, re-raise."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import textwrap

import httpx
import pytest
from koordcommon.service import cancel_and_wait, run_until_stopped


async def forever(log: list[str], name: str) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        log.append(f"{name} cleaned up")


async def until(stopping: asyncio.Event, log: list[str]) -> None:
    await stopping.wait()
    log.append("loop returned on stop")


async def test_runs_until_stop_then_cancels_and_awaits_every_task():
    stopping, log = asyncio.Event(), []
    watch = asyncio.create_task(forever(log, "watch"), name="watch")
    runner = asyncio.create_task(run_until_stopped(stopping, watch, forever(log, "refresh"), until(stopping, log)))
    await asyncio.sleep(0.05)
    assert not runner.done() and log == []
    stopping.set()
    await asyncio.wait_for(runner, 2)
    assert sorted(log) == ["loop returned on stop", "refresh cleaned up", "watch cleaned up"]
    assert watch.cancelled()


async def test_no_work_returns_on_stop():
    stopping = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, stopping.set)
    await asyncio.wait_for(run_until_stopped(stopping), 2)


async def test_a_task_that_raises_early_stops_the_others_and_is_reraised():
    stopping, log = asyncio.Event(), []

    async def crash():
        await asyncio.sleep(0.02)
        raise ValueError("watch failed")

    with pytest.raises(ValueError, match="watch failed"):
        await asyncio.wait_for(run_until_stopped(stopping, forever(log, "refresh"), crash()), 2)
    assert log == ["refresh cleaned up"]
    assert not stopping.is_set()


async def test_a_task_that_returns_early_is_an_error_naming_it():
    stopping, log = asyncio.Event(), []

    async def gives_up():
        await asyncio.sleep(0.02)

    with pytest.raises(RuntimeError, match=r"gives_up returned before the service stopped"):
        await asyncio.wait_for(run_until_stopped(stopping, gives_up(), forever(log, "refresh")), 2)
    assert log == ["refresh cleaned up"]

    task = asyncio.create_task(asyncio.sleep(3600), name="webhook-tls")
    asyncio.get_running_loop().call_later(0.02, task.cancel)
    with pytest.raises(RuntimeError, match=r"webhook-tls was cancelled before the service stopped"):
        await asyncio.wait_for(run_until_stopped(stopping, task), 2)


async def test_cancelling_the_runner_cancels_the_work():
    stopping, log = asyncio.Event(), []
    runner = asyncio.create_task(run_until_stopped(stopping, forever(log, "a"), forever(log, "b")))
    await asyncio.sleep(0.02)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert sorted(log) == ["a cleaned up", "b cleaned up"]


async def test_cancel_and_wait_is_bounded_and_drops_what_tasks_raise_while_ending(caplog):
    release = asyncio.Event()

    async def stubborn():
        while True:
            try:
                await release.wait()
                return
            except asyncio.CancelledError:
                continue  # swallows its cancellation

    async def fails_on_cancel():
        try:
            await asyncio.Event().wait()
        finally:
            raise OSError("close failed")

    slow, failing = asyncio.create_task(stubborn()), asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    running = await cancel_and_wait([slow, failing], timeout_s=0.05)
    assert running == {slow} and failing.done()
    release.set()
    await slow
    assert await cancel_and_wait([]) == set()
    del failing
    gc.collect()
    assert "never retrieved" not in caplog.text


ENTRY_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from fastapi import APIRouter
    from koordcommon.service import ServiceSettings, run_service, run_until_stopped, settings_config

    class Settings(ServiceSettings):
        model_config = settings_config("KOORD_ENTRY_")
        greeting: str = "hello"

    router = APIRouter()

    @router.get("/greeting")
    async def greeting():
        return {"greeting": "from the router"}

    async def worker(mode):
        if mode == "crash":
            await asyncio.sleep(0.3)
            raise RuntimeError("worker failed")
        await asyncio.Event().wait()

    async def main(svc):
        svc.mark_started()
        print(svc.settings.greeting, file=sys.stdout, flush=True)
        await run_until_stopped(svc.stopping, worker(sys.argv[1]))

    run_service("entry", Settings, main, [router], greeting="overridden", http_host="127.0.0.1", http_port=0)
    """
)


async def run_entry(tmp_path, mode: str):
    script = tmp_path / "entry.py"
    script.write_text(ENTRY_SCRIPT)
    return await asyncio.create_subprocess_exec(
        sys.executable, str(script), mode, env=dict(os.environ),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def log_until(proc, msg: str) -> list[dict]:
    lines = []
    async with asyncio.timeout(20):
        while True:
            raw = await proc.stderr.readline()
            assert raw, f"service exited first: {lines}"
            lines.append(json.loads(raw))
            if lines[-1].get("msg") == msg:
                return lines


async def test_run_service_serves_the_routers_with_overridden_settings_and_stops_on_sigterm(tmp_path):
    proc = await run_entry(tmp_path, "serve")
    try:
        started = (await log_until(proc, "started"))[-1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{started['port']}", timeout=5) as http:
            assert (await http.get("/greeting")).json() == {"greeting": "from the router"}
            assert (await http.get("/readyz")).status_code == 200
        assert (await proc.stdout.readline()).decode().strip() == "overridden"
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()


async def test_a_worker_that_fails_ends_the_service_with_exit_1(tmp_path):
    proc = await run_entry(tmp_path, "crash")
    try:
        crash = (await log_until(proc, "main crashed"))[-1]
        assert "RuntimeError: worker failed" in crash["exc_info"]
        async with asyncio.timeout(20):
            assert await proc.wait() == 1
    finally:
        if proc.returncode is None:
            proc.kill()
