"""The service chassis: settings, JSON logs, health, Prometheus metrics and graceful shutdown.

Every service is one process running one asyncio loop that holds both the HTTP server
(uvicorn, same loop) and the service's `main(svc)` coroutine. SIGTERM/SIGINT set
`svc.stopping`; `main` is expected to return soon after, then the shutdown hooks run
(drain the bus, close the database) and the process exits 0. A `main` that raises makes the
process exit 1 so an orchestrator restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar

import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest
from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from .asgi import PostRoutes
from .httpguard import SA_DIR, ApiAuth, Guard, NoAuth, StaticToken, TokenReview, server_ssl_options
from .natsauth import BusCredentials
from .suggest import closest

__all__ = [
    "ConfigFileError",
    "Health",
    "Service",
    "ServiceSettings",
    "cancel_and_wait",
    "load_settings",
    "progress",
    "run_service",
    "run_until_stopped",
    "settings_config",
    "setup_logging",
    "unknown_settings",
]

log = logging.getLogger("koordcommon.service")

# --------------------------------------------------------------------------- settings


class ConfigFileError(ValueError):
    """The YAML file named by <PREFIX>CONFIG_FILE is missing or is not a mapping."""


def settings_config(prefix: str, **extra: Any) -> SettingsConfigDict:
    """The settings config every service uses: its env prefix; unknown keys are refused.

    The YAML file is named at load time by the env variable `<prefix>CONFIG_FILE`. A key of
    that file, or a `<prefix>*` variable, that names no setting stops the service at start-up
    with a message naming it (`ServiceSettings._refuse_unknown`): a misspelt setting is an
    error, never a silently kept default.
    """
    return SettingsConfigDict(
        env_prefix=prefix,
        extra="forbid",
        case_sensitive=False,
        env_nested_delimiter="__",
        hide_input_in_errors=True,  # an error must not print database_url and its password
        **extra,
    )


# The prefix every service's own prefix starts with: on its own it names no service, so the
# base class does not judge the variables under it.
SHARED_PREFIX = "KOORD_"


def unknown_settings(cls: type[BaseSettings], data: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The keys of `data` (the YAML file, init overrides) and the `<prefix>*` variables of
    `environ` that name no setting of `cls`, each with its closest setting when one is near.

    `<prefix>CONFIG_FILE` names the file; `<prefix>X__Y` sets key Y of setting X; variables in
    `cls.FOREIGN_ENV` belong to another program that happens to share the prefix.
    """
    names = set(cls.model_fields)
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    found: list[tuple[str, str]] = []  # (as written, as a setting name)
    if prefix and prefix != SHARED_PREFIX:
        foreign = {v.upper() for v in getattr(cls, "FOREIGN_ENV", ())}
        for var in os.environ if environ is None else environ:
            up = var.upper()
            if not up.startswith(prefix) or up in foreign:
                continue
            bare = up[len(prefix):].split("__", 1)[0].lower()
            if bare not in names and bare != "config_file":
                found.append((var, bare))
    if isinstance(data, Mapping):
        found += [(str(k), str(k).lower()) for k in data if str(k).lower() not in names]
    out = []
    for written, bare in found:
        close = closest(bare, sorted(names))
        out.append(written + (f" (did you mean {close}?)" if close else ""))
    return out


def _unknown_message(cls: type[BaseSettings], unknown: list[str]) -> str:
    s = "s" if len(unknown) > 1 else ""
    return (f"unknown setting{s}: {', '.join(unknown)}; the settings of {cls.__name__} are: "
            + ", ".join(sorted(cls.model_fields)))


class _PlainEnvSource(PydanticBaseSettingsSource):
    """Un-prefixed variables shared by every service (NATS_URL, DATABASE_URL, KOORD_LOG_LEVEL).

    Ranked below the prefixed variables so one process can still override them.
    """

    def __init__(self, settings_cls: type[BaseSettings], names: dict[str, str]):
        super().__init__(settings_cls)
        self._names = names

    def get_field_value(self, field, field_name):  # pragma: no cover - __call__ does the work
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field, env in self._names.items():
            if field in self.settings_cls.model_fields and env in os.environ:
                out[field] = os.environ[env]
        return out


def _config_file_var(settings_cls: type[BaseSettings]) -> str:
    return f"{settings_cls.model_config.get('env_prefix', '')}CONFIG_FILE"


class ServiceSettings(BaseSettings):
    """Settings common to every service; subclasses add theirs and set `settings_config(prefix)`."""

    model_config = settings_config("KOORD_")
    # Variables of other programs of the project that share a service's prefix: koordctl
    # sim's --extender-url. They are not taken for a misspelt setting.
    FOREIGN_ENV: ClassVar[frozenset[str]] = frozenset({"KOORD_EXTENDER_URL"})
    # Un-prefixed variables one deployment sets once for every service.
    PLAIN_ENV: ClassVar[dict[str, str]] = {
        "nats_url": "NATS_URL",
        "database_url": "DATABASE_URL",
        "log_level": "KOORD_LOG_LEVEL",
        "nats_nkey_seed_file": "NATS_NKEY_SEED_FILE",
        "nats_ca_file": "NATS_CA_FILE",
        "nats_cert_file": "NATS_CERT_FILE",
        "nats_key_file": "NATS_KEY_FILE",
        "api_token_file": "KOORD_API_TOKEN_FILE",
        "nats_stream_replicas": "NATS_STREAM_REPLICAS",
    }

    nats_url: str = Field("nats://127.0.0.1:4222", description="a server, or a cluster's servers separated by commas")
    # Copies JetStream keeps of the streams and KV buckets a service declares: 3 on a 3-server
    # cluster, so one server may fail without losing or stopping a stream.
    nats_stream_replicas: int = Field(1, ge=1, le=5)
    # The bus identity (koordcommon.natsauth): the service's nkey seed file, and TLS: the CA that
    # signed the server's certificate, a client certificate when the server asks for one.
    nats_nkey_seed_file: str = Field("", description="nkey seed file of this service's bus identity; empty = none")
    nats_ca_file: str = Field("", description="CA of the NATS server's certificate; set = TLS")
    nats_cert_file: str = ""
    nats_key_file: str = ""
    database_url: str = Field("", description="SQLAlchemy URL; empty = embedded SQLite in data_dir")
    http_host: str = "0.0.0.0"
    http_port: int = Field(8080, ge=0, le=65535)
    bus_namespace: str = ""
    cluster_backend: str = Field("sim", pattern="^(sim|kubernetes)$")
    log_level: str = "INFO"
    data_dir: str = Field("", description="empty = ./.data/<service>")
    # HTTPS on the service port (koordcommon.httpguard); with a client CA, client certificates
    # are required (kube-scheduler calling the extender presents one).
    http_tls_cert_file: str = Field("", description="serving certificate (PEM); with http_tls_key_file = HTTPS")
    http_tls_key_file: str = ""
    http_tls_client_ca_file: str = Field("", description="CA of the clients' certificates; set = mTLS required")
    # Bearer tokens for writes (and /api/ reads with api_protect_reads): a static token from a
    # file, or Kubernetes TokenReview; without a token configured every write is refused.
    api_auth: str = Field("token", pattern="^(none|token|tokenreview)$")
    api_token_file: str = Field("", description="file holding the static bearer token (api_auth token)")
    api_protect_reads: bool = False
    api_allowed_users: list[str] = Field(default_factory=list, description="tokenreview: users that may write")
    api_allowed_groups: list[str] = Field(default_factory=list, description="tokenreview: groups that may write")
    tokenreview_url: str = "https://kubernetes.default.svc"
    max_body_bytes: int = Field(16 << 20, gt=0, description="larger request bodies are answered 413 unread")
    max_json_depth: int = Field(64, gt=0, description="deeper JSON request bodies are answered 400")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [
            init_settings,
            env_settings,
            _PlainEnvSource(settings_cls, cls.PLAIN_ENV),
        ]
        path = os.environ.get(_config_file_var(settings_cls))
        if path:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=_checked_yaml(path)))
        sources.append(file_secret_settings)
        return tuple(sources)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, data: Any) -> Any:
        unknown = unknown_settings(cls, data)
        if unknown:
            raise ValueError(_unknown_message(cls, unknown))
        return data

    def bus_credentials(self) -> BusCredentials:
        return BusCredentials(self.nats_nkey_seed_file, self.nats_ca_file, self.nats_cert_file, self.nats_key_file)

    def api_auth_backend(self) -> ApiAuth:
        if self.api_auth == "none":
            return NoAuth()
        if self.api_auth == "token":
            return StaticToken(self.api_token_file)
        return TokenReview(
            self.tokenreview_url,
            token_file=str(SA_DIR / "token"),
            ca_file=str(SA_DIR / "ca.crt") if (SA_DIR / "ca.crt").exists() else "",
            allowed_users=self.api_allowed_users,
            allowed_groups=self.api_allowed_groups,
        )

    def resolve_data_dir(self, service: str) -> Path:
        return Path(self.data_dir) if self.data_dir else Path(".data") / service


def _checked_yaml(path: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ConfigFileError(f"config file {path!r} does not exist")
    import yaml

    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"config file {path!r} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigFileError(f"config file {path!r} must hold a mapping of setting names to values")
    return p


S = TypeVar("S", bound=ServiceSettings)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """Env (prefixed, then NATS_URL/DATABASE_URL) over the optional YAML file over defaults."""
    return cls(**overrides)


# --------------------------------------------------------------------------- logging

_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


def setup_logging(service: str, level: str | int = "INFO") -> None:
    """JSON lines on stderr: timestamp, level, service, logger, msg and any `extra=` fields."""
    from pythonjsonlogger.json import JsonFormatter

    class _Formatter(JsonFormatter):
        def process_log_record(self, log_data):
            log_data.pop("color_message", None)  # uvicorn's ANSI copy of msg
            return log_data

    formatter = _Formatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "message": "msg", "name": "logger"},
        static_fields={"service": service},
        timestamp=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # uvicorn's access log would print one line per scrape/probe.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


def tune_gc(gen0: int = 50_000, gen1: int = 20, gen2: int = 50) -> None:
    """Fewer, cheaper garbage collections for services that allocate in bursts.

    Decoding one batch of bus messages or one large request allocates hundreds of thousands
    of short-lived objects; with the default gen0 threshold (700) that sets off hundreds of
    collections per batch, some of them full ones walking everything alive. What exists after
    start-up lives until exit anyway, so it is frozen out of the collector's reach.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, gen1, gen2)


# glibc mallopt parameters
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_malloc(mmap_threshold: int = 8 << 20, trim_threshold: int = 256 << 20, top_pad: int = 16 << 20) -> bool:
    """Keep the C heap's memory instead of handing it back after every large request.

    A reply or request of a few hundred kilobytes is otherwise mmapped and unmapped each time,
    or the heap top trimmed and regrown, and every page is faulted in again: the tail latency
    of a service answering such requests back to back doubles. Memory freed stays in the
    process (up to the trim threshold) for the next request. glibc only; False elsewhere.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(
        mallopt(param, value) == 1
        for param, value in ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold), (_M_TOP_PAD, top_pad))
    )


def progress(logger: logging.Logger, what: str, done: int, total: int, **extra: Any) -> None:
    """One structured line about long work: `what 1200/5000 (24%)`."""
    percent = round(100.0 * done / total, 1) if total else 100.0
    logger.info(
        "%s %d/%d (%.0f%%)",
        what,
        done,
        total,
        percent,
        extra={"what": what, "done": done, "total": total, "percent": percent, **extra},
    )


# --------------------------------------------------------------------------- tasks


async def cancel_and_wait(tasks: Iterable[asyncio.Future], timeout_s: float | None = None) -> set[asyncio.Future]:
    """Cancel `tasks` and wait until they have ended; return those still running after
    `timeout_s` (a task that swallows its cancellation must not hold up a shutdown).

    What a task raises while it ends is dropped: the caller is tearing down.
    """
    tasks = list(tasks)
    for t in tasks:
        t.cancel()
    if not tasks:
        return set()
    _, running = await asyncio.wait(tasks, timeout=timeout_s)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: asyncio would log it as never retrieved
    return running


async def run_until_stopped(stopping: asyncio.Event, *work: Awaitable[Any]) -> None:
    """Run a service's long-lived work (coroutines or tasks) until `stopping` is set, then
    cancel it and wait until it has ended.

    Every piece is meant to run until it is cancelled or the service stops. One that ends
    before, by raising or by returning, stops the others and its exception is re-raised (a
    RuntimeError naming it when it returned), so `main` fails and the process exits non-zero
    for an orchestrator to restart it, instead of running on without that piece.
    """
    tasks = [_as_task(w) for w in work]
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        ended = [t for t in tasks if t.done()]
    finally:
        await cancel_and_wait([stop, *tasks])
    for t in ended:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()
        if not stopping.is_set():
            how = "was cancelled" if t.cancelled() else "returned"
            raise RuntimeError(f"{t.get_name()} {how} before the service stopped")


def _as_task(work: Awaitable[Any]) -> asyncio.Future:
    task = asyncio.ensure_future(work)
    if task is not work and inspect.iscoroutine(work) and isinstance(task, asyncio.Task):
        task.set_name(work.__qualname__)
    return task


# --------------------------------------------------------------------------- health

Check = Callable[[], "bool | Awaitable[bool]"]


class Health:
    """Liveness (the loop turns) and readiness (every registered check passes)."""

    # A loop that has not run the heartbeat for this long is wedged by blocking work.
    WEDGED_AFTER_S = 30.0
    CHECK_TIMEOUT_S = 2.0

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}
        self.last_beat = time.monotonic()

    def add_check(self, name: str, fn: Check) -> None:
        self._checks[name] = fn

    def remove_check(self, name: str) -> None:
        self._checks.pop(name, None)

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self.last_beat < self.WEDGED_AFTER_S

    async def failing(self) -> list[str]:
        """Names of the checks that are false, raise or time out."""
        bad = []
        for name, fn in list(self._checks.items()):
            try:
                result = fn()
                if inspect.isawaitable(result):
                    result = await asyncio.wait_for(result, self.CHECK_TIMEOUT_S)
                if not result:
                    bad.append(name)
            except Exception:  # noqa: BLE001 - a check that raises is failing, not a crashed probe
                bad.append(name)
        return bad

    async def ready(self) -> bool:
        return not await self.failing()


# --------------------------------------------------------------------------- service

_UP = Gauge("koord_service_up", "1 while the service runs", ["service"])
_READY = Gauge("koord_service_ready", "1 when the last readiness probe passed", ["service"])
_LOOP_LAG = Gauge("koord_event_loop_lag_seconds", "How late the loop heartbeat ran", ["service"])


class _Server(uvicorn.Server):
    """uvicorn inside our loop: the Service owns the signals, not uvicorn."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


Main = Callable[["Service"], Awaitable[Any]]
Hook = Callable[[], Awaitable[Any]]


class Service:
    HEARTBEAT_S = 0.5
    MAIN_STOP_TIMEOUT_S = 30.0
    HOOK_TIMEOUT_S = 15.0

    def __init__(self, name: str, settings: ServiceSettings, *, version: str = "0.1.0") -> None:
        self.name = name
        self.settings = settings
        self.data_dir = settings.resolve_data_dir(name)
        self.health = Health()
        self.stopping = asyncio.Event()
        self.port: int | None = None  # the bound port once the server started (http_port may be 0)
        self.log = logging.getLogger(name)
        self._hooks: list[Hook] = []
        self._server: _Server | None = None
        self._started = False
        self.app = FastAPI(title=name, version=version)
        # what the server runs: a few hot POST paths answered directly, the rest by the app
        self.post_routes = PostRoutes(self.app)
        # Paths called by Kubernetes components that send no bearer token (extender verbs, the
        # admission webhook): open to writes, protected by TLS client authentication instead.
        self.public_paths: set[str] = set()
        self._add_probe_routes()

    # -- wiring

    def mark_started(self) -> None:
        """main calls this once its wiring is done (checks registered, consumers running).

        HTTP is up before main runs, so until then /readyz says "starting": without this a
        probe could see "ready" in the moment before main registered its first check.
        """
        self._started = True

    def asgi(self) -> Guard:
        """What the HTTP server runs: the hot POST paths and the app, behind the guard (body size,
        JSON depth, bearer tokens for writes)."""
        st = self.settings
        return Guard(self.post_routes, st.api_auth_backend(), st.max_body_bytes, st.max_json_depth,
                     st.api_protect_reads, self.public_paths)

    def on_shutdown(self, fn: Hook) -> Hook:
        """Register a coroutine function run after main returned (last registered runs first)."""
        self._hooks.append(fn)
        return fn

    def _add_probe_routes(self) -> None:
        app, health, name = self.app, self.health, self.name

        @app.get("/healthz", include_in_schema=False)
        async def healthz():
            if health.alive():
                return {"status": "ok"}
            return JSONResponse({"status": "wedged"}, status_code=503)

        @app.get("/readyz", include_in_schema=False)
        async def readyz():
            failing = await health.failing()
            if not self._started:
                failing.insert(0, "starting")
            if self.stopping.is_set():
                failing.append("stopping")
            _READY.labels(name).set(0 if failing else 1)
            if failing:
                return JSONResponse({"status": "not ready", "failing": failing}, status_code=503)
            return {"status": "ready"}

        @app.get("/metrics", include_in_schema=False)
        async def metrics():
            return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # -- running

    def run(self, main: Main) -> NoReturn:
        """Run until SIGTERM/SIGINT (or until main returns); exit with the outcome."""
        setup_logging(self.name, self.settings.log_level)
        loop_factory = None
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            code = runner.run(self.serve(main))
        sys.exit(code)

    async def serve(self, main: Main, *, install_signals: bool = True) -> int:
        """Serve HTTP and run main in the current loop; return the exit code."""
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        _UP.labels(self.name).set(1)
        st = self.settings
        config = uvicorn.Config(
            self.asgi(),
            host=self.settings.http_host,
            port=self.settings.http_port,
            **server_ssl_options(st.http_tls_cert_file, st.http_tls_key_file, st.http_tls_client_ca_file),
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=5,
        )
        self._server = server = _Server(config)
        beat = asyncio.create_task(self._heartbeat(), name="heartbeat")
        http = asyncio.create_task(server.serve(), name="http")
        code = 0
        try:
            if not await self._wait_started(server, http):
                self.log.error("http server failed to start", extra={"port": self.settings.http_port})
                return 1
            self.log.info("started", extra={"port": self.port, "host": self.settings.http_host})
            code = await self._run_main(main)
        finally:
            self.stopping.set()
            await self._run_hooks()
            server.should_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(http, 10)
            beat.cancel()
            with contextlib.suppress(BaseException):
                await beat
            _UP.labels(self.name).set(0)
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            self.log.info("stopped", extra={"exit_code": code})
        return code

    def _on_signal(self, sig: int) -> None:
        if self.stopping.is_set():
            self.log.warning("second signal: stopping without waiting", extra={"signal": sig})
            self.MAIN_STOP_TIMEOUT_S = 0.0
        self.log.info("stopping", extra={"signal": signal.Signals(sig).name})
        self.stopping.set()

    async def _wait_started(self, server: _Server, http: asyncio.Task) -> bool:
        while not server.started:
            if http.done():
                return False
            await asyncio.sleep(0.01)
        sockets = [s for srv in server.servers for s in (srv.sockets or ())]
        self.port = sockets[0].getsockname()[1] if sockets else self.settings.http_port
        return True

    async def _run_main(self, main: Main) -> int:
        task = asyncio.create_task(main(self), name="main")
        stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), self.MAIN_STOP_TIMEOUT_S)
            except TimeoutError:
                self.log.error("main did not return after stop; cancelling")
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                return 1
        if task.cancelled():
            return 1
        exc = task.exception()
        if exc is not None:
            self.log.error("main crashed", exc_info=exc)
            return 1
        return 0

    async def _run_hooks(self) -> None:
        for hook in reversed(self._hooks):
            try:
                await asyncio.wait_for(hook(), self.HOOK_TIMEOUT_S)
            except Exception:
                self.log.exception("shutdown hook failed", extra={"hook": getattr(hook, "__name__", repr(hook))})

    async def _heartbeat(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.HEARTBEAT_S)
            _LOOP_LAG.labels(self.name).set(max(0.0, time.monotonic() - before - self.HEARTBEAT_S))
            self.health.beat()


def run_service(
    name: str, settings_cls: type[S], main: Main, routers: Iterable[APIRouter] = (), **overrides: Any
) -> NoReturn:
    """A service's entry point: its settings (env, YAML, then `overrides`), the chassis with
    the service's routers, and `main` until SIGTERM/SIGINT; exits with the outcome."""
    svc = Service(name, load_settings(settings_cls, **overrides))
    for router in routers:
        svc.app.include_router(router)
    svc.run(main)
