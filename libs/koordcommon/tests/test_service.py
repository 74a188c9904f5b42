"""The chassis as a real process: probes, metrics, SIGTERM, crash exit code, settings sources."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import textwrap

import httpx
import pytest
from koordcommon.service import (
    ConfigFileError,
    Health,
    Service,
    ServiceSettings,
    load_settings,
    progress,
    settings_config,
    setup_logging,
    tune_gc,
)
from pydantic import Field, ValidationError

SERVICE_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    from pathlib import Path
    from koordcommon.service import Service, ServiceSettings, settings_config

    class Settings(ServiceSettings):
        model_config = settings_config("KOORD_DEMO_")

    work = Path(sys.argv[1])
    mode = sys.argv[2]
    svc = Service("demo", Settings())
    svc.health.add_check("flag", lambda: (work / "ready").exists())

    async def flag_async():
        return True
    svc.health.add_check("async", flag_async)

    @svc.on_shutdown
    async def drain():
        (work / "hook").write_text("drained")

    async def main(svc):
        if mode == "crash":
            await asyncio.sleep(0.2)
            raise RuntimeError("boom")
        while not (work / "wired").exists() and not svc.stopping.is_set():
            await asyncio.sleep(0.02)
        svc.mark_started()
        await svc.stopping.wait()
        (work / "main").write_text("returned")

    svc.run(main)
    """
)


async def start(tmp_path, mode: str, **env):
    script = tmp_path / "demo.py"
    script.write_text(SERVICE_SCRIPT)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        str(tmp_path),
        mode,
        env={**os.environ, "KOORD_DEMO_HTTP_PORT": "0", "KOORD_DEMO_HTTP_HOST": "127.0.0.1", **env},
        stderr=asyncio.subprocess.PIPE,
    )
    lines = []
    async with asyncio.timeout(20):
        while True:
            raw = await proc.stderr.readline()
            assert raw, f"service exited before starting: {lines}"
            rec = json.loads(raw)
            lines.append(rec)
            if rec.get("msg") == "started":
                return proc, rec, lines


async def drain_stderr(proc) -> list[dict]:
    out = []
    async for raw in proc.stderr:
        out.append(json.loads(raw))
    return out


async def test_probes_metrics_and_sigterm(tmp_path):
    proc, started, _ = await start(tmp_path, "serve")
    try:
        assert started["service"] == "demo" and started["level"] == "INFO" and "timestamp" in started
        base = f"http://127.0.0.1:{started['port']}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:
            assert (await http.get("/healthz")).status_code == 200
            r = await http.get("/readyz")
            assert r.status_code == 503
            assert r.json()["failing"] == ["starting", "flag"]  # main has not finished its wiring
            (tmp_path / "wired").touch()
            async with asyncio.timeout(5):
                while (await http.get("/readyz")).json()["failing"] != ["flag"]:
                    await asyncio.sleep(0.02)
            (tmp_path / "ready").touch()
            r = await http.get("/readyz")
            assert (r.status_code, r.json()) == (200, {"status": "ready"})
            r = await http.get("/metrics")
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            assert 'koord_service_up{service="demo"} 1.0' in r.text
            assert 'koord_service_ready{service="demo"} 1.0' in r.text
            assert (await http.get("/openapi.json")).json()["info"]["title"] == "demo"
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            rest = await drain_stderr(proc)
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
    assert code == 0
    assert (tmp_path / "main").read_text() == "returned"
    assert (tmp_path / "hook").read_text() == "drained"
    assert any(r.get("msg") == "stopping" and r.get("signal") == "SIGTERM" for r in rest)


async def test_crashed_main_exits_nonzero_after_hooks(tmp_path):
    proc, _, _ = await start(tmp_path, "crash")
    async with asyncio.timeout(20):
        rest = await drain_stderr(proc)
        code = await proc.wait()
    assert code == 1
    crash = [r for r in rest if r.get("msg") == "main crashed"]
    assert crash and "RuntimeError: boom" in crash[0]["exc_info"]
    assert (tmp_path / "hook").read_text() == "drained"


async def test_in_loop_serve_returns_when_stopping(tmp_path):
    settings = ServiceSettings(http_port=0, http_host="127.0.0.1", data_dir=str(tmp_path))
    svc = Service("inloop", settings)
    seen = []

    async def main(svc):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{svc.port}") as http:
            seen.append((await http.get("/healthz")).status_code)
            seen.append((await http.get("/readyz")).status_code)
            svc.mark_started()
            seen.append((await http.get("/readyz")).status_code)
        svc.stopping.set()
        await asyncio.sleep(0)

    assert await svc.serve(main, install_signals=False) == 0
    assert seen == [200, 503, 200]


@pytest.mark.parametrize(
    "checks, failing",
    [
        ({}, []),
        ({"a": lambda: True, "b": lambda: False}, ["b"]),
        ({"raises": lambda: 1 / 0, "ok": lambda: 1}, ["raises"]),
        ({"zero": lambda: 0, "none": lambda: None}, ["zero", "none"]),
    ],
)
async def test_health_failing_names(checks, failing):
    h = Health()
    for name, fn in checks.items():
        h.add_check(name, fn)
    assert await h.failing() == failing
    assert await h.ready() is (not failing)


async def test_health_async_check_and_wedged_loop(monkeypatch):
    h = Health()

    async def slow_false():
        return False

    h.add_check("db", slow_false)
    assert await h.failing() == ["db"]
    assert h.alive()
    h.last_beat -= Health.WEDGED_AFTER_S + 1
    assert not h.alive()


class DemoSettings(ServiceSettings):
    model_config = settings_config("KOORD_DEMO_")
    batch_size: int = 5000
    limits: dict[str, int] = Field(default_factory=dict)


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("KOORD_DEMO_") or key in ("NATS_URL", "DATABASE_URL", "KOORD_LOG_LEVEL"):
            monkeypatch.delenv(key)
    return monkeypatch


@pytest.mark.parametrize(
    "env, yaml_text, expected",
    [
        ({}, None, {"nats_url": "nats://127.0.0.1:4222", "database_url": "", "batch_size": 5000, "http_port": 8080}),
        ({"NATS_URL": "nats://a:1", "DATABASE_URL": "postgresql://x/db"}, None,
         {"nats_url": "nats://a:1", "database_url": "postgresql://x/db"}),
        ({"NATS_URL": "nats://plain:1", "KOORD_DEMO_NATS_URL": "nats://prefixed:1"}, None,
         {"nats_url": "nats://prefixed:1"}),
        ({"KOORD_DEMO_BATCH_SIZE": "250", "KOORD_DEMO_HTTP_PORT": "9100"}, None,
         {"batch_size": 250, "http_port": 9100}),
        ({}, "batch_size: 42\nlog_level: DEBUG\nbus_namespace: yamlns\n",
         {"batch_size": 42, "log_level": "DEBUG", "bus_namespace": "yamlns"}),
        ({"KOORD_DEMO_BATCH_SIZE": "7"}, "batch_size: 42\nhttp_port: 9200\n", {"batch_size": 7, "http_port": 9200}),
        ({"NATS_URL": "nats://env:1"}, "nats_url: nats://yaml:1\n", {"nats_url": "nats://env:1"}),
        ({"KOORD_LOG_LEVEL": "DEBUG"}, None, {"log_level": "DEBUG"}),
        ({"KOORD_LOG_LEVEL": "DEBUG", "KOORD_DEMO_LOG_LEVEL": "WARNING"}, None, {"log_level": "WARNING"}),
        ({"KOORD_DEMO_LIMITS__CPU": "7"}, None, {"limits": {"cpu": 7}}),  # a key of a mapping setting
        ({"KOORD_EXTENDER_URL": "http://x"}, None, {"batch_size": 5000}),  # koordctl sim's, not a setting
    ],
)
def test_settings_sources_and_precedence(clean_env, tmp_path, env, yaml_text, expected):
    for k, v in env.items():
        clean_env.setenv(k, v)
    if yaml_text is not None:
        path = tmp_path / "config.yaml"
        path.write_text(yaml_text)
        clean_env.setenv("KOORD_DEMO_CONFIG_FILE", str(path))
    settings = load_settings(DemoSettings)
    assert {k: getattr(settings, k) for k in expected} == expected


def test_settings_errors(clean_env, tmp_path):
    clean_env.setenv("KOORD_DEMO_CONFIG_FILE", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigFileError, match="does not exist"):
        load_settings(DemoSettings)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    clean_env.setenv("KOORD_DEMO_CONFIG_FILE", str(tmp_path / "list.yaml"))
    with pytest.raises(ConfigFileError, match="mapping"):
        load_settings(DemoSettings)
    clean_env.delenv("KOORD_DEMO_CONFIG_FILE")
    clean_env.setenv("KOORD_DEMO_HTTP_PORT", "70000")
    with pytest.raises(ValidationError, match="http_port"):
        load_settings(DemoSettings)
    clean_env.setenv("KOORD_DEMO_HTTP_PORT", "80")
    clean_env.setenv("KOORD_DEMO_CLUSTER_BACKEND", "openshift")
    with pytest.raises(ValidationError, match="cluster_backend"):
        load_settings(DemoSettings)


@pytest.mark.parametrize(
    "env, yaml_text, named",
    [
        ({"KOORD_DEMO_BATCHSIZE": "250"}, None, "unknown setting: KOORD_DEMO_BATCHSIZE (did you mean batch_size?)"),
        ({"KOORD_DEMO_NO_SUCH_THING": "1"}, None, (
            "unknown setting: KOORD_DEMO_NO_SUCH_THING; the settings of DemoSettings are: api_allowed_groups, "
            "api_allowed_users, api_auth, api_protect_reads, api_token_file, batch_size, bus_namespace, "
            "cluster_backend, data_dir, database_url, http_host, http_port, http_tls_cert_file, "
            "http_tls_client_ca_file, http_tls_key_file, limits, log_level, max_body_bytes, max_json_depth, "
            "nats_ca_file, nats_cert_file, nats_key_file, nats_nkey_seed_file, nats_stream_replicas, nats_url, "
            "tokenreview_url")),
        ({"KOORD_DEMO_LIMIT__CPU": "1"}, None, "KOORD_DEMO_LIMIT__CPU (did you mean limits?)"),
        ({}, "nats_url: nats://yaml:1\nunknown_key: 1\nbatch_sise: 3\n",
         "unknown settings: unknown_key, batch_sise (did you mean batch_size?)"),
    ],
)
def test_unknown_settings_are_refused_naming_them(clean_env, tmp_path, env, yaml_text, named):
    for k, v in env.items():
        clean_env.setenv(k, v)
    if yaml_text is not None:
        path = tmp_path / "config.yaml"
        path.write_text(yaml_text)
        clean_env.setenv("KOORD_DEMO_CONFIG_FILE", str(path))
    with pytest.raises(ValidationError) as err:
        load_settings(DemoSettings)
    assert named in str(err.value)


def test_unknown_settings_errors_do_not_print_the_values(clean_env):
    clean_env.setenv("DATABASE_URL", "postgresql://user:secret@db/x")
    clean_env.setenv("KOORD_DEMO_BATCHSIZE", "250")
    with pytest.raises(ValidationError) as err:
        load_settings(DemoSettings)
    assert "secret" not in str(err.value)


def test_the_shared_prefix_alone_names_no_service(clean_env):
    # KOORD_LOG_LEVEL, KOORD_TRACE_DIR, KOORD_RESOURCE_PREFIX...: read by every program, owned by none
    clean_env.setenv("KOORD_TRACE_DIR", "/nowhere")
    assert ServiceSettings(http_port=0).http_port == 0


def test_data_dir_default_and_override(clean_env, tmp_path):
    assert str(load_settings(DemoSettings).resolve_data_dir("demo")) == ".data/demo"
    clean_env.setenv("KOORD_DEMO_DATA_DIR", str(tmp_path))
    assert load_settings(DemoSettings).resolve_data_dir("demo") == tmp_path


def test_json_logs_and_progress(capsys):
    setup_logging("demo", "DEBUG")
    try:
        progress(logging.getLogger("demo.work"), "replay", 250, 1000, stream="KOORD_SIM")
        rec = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    finally:
        logging.getLogger().handlers.clear()
    assert rec["msg"] == "replay 250/1000 (25%)"
    assert (rec["service"], rec["level"], rec["logger"]) == ("demo", "INFO", "demo.work")
    assert (rec["done"], rec["total"], rec["percent"], rec["stream"]) == (250, 1000, 25.0, "KOORD_SIM")


def test_tune_gc_raises_thresholds_and_freezes():
    import gc

    before = gc.get_threshold()
    try:
        tune_gc(40_000, 15, 30)
        assert gc.get_threshold() == (40_000, 15, 30)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_tune_malloc_applies_on_glibc():
    import ctypes.util
    import platform

    from koordcommon.service import tune_malloc

    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c")
    # the defaults again (mallopt keeps no state we could restore): 128 KiB mmap and trim threshold
    assert tune_malloc(128 << 10, 128 << 10, 0) is bool(glibc)
    assert tune_malloc() is bool(glibc)
