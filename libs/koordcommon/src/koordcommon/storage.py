"""SQLAlchemy engines and per-service Alembic chains (SQLite embedded, PostgreSQL in production).

Each service keeps its own migration chain in its package (`<pkg>/migrations/`) and its own
version table, so services sharing one PostgreSQL database never see each other's history.
A service's `migrations/env.py` is two lines::

    from alembic import context
    from koordcommon.storage import run_alembic_env
    from my_service.store import metadata
    run_alembic_env(context, metadata)
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, pool
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

__all__ = [
    "alembic_config",
    "is_postgres",
    "is_sqlite",
    "make_engine",
    "normalize_url",
    "resolve_script_location",
    "run_alembic_env",
    "run_migrations",
    "session_factory",
]

log = logging.getLogger("koordcommon.storage")

# SQLite waits this long for a competing writer instead of failing with "database is locked".
SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str) -> str:
    """postgres:// and postgresql:// select psycopg 3 (the driver we ship)."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    return url


def _sqlite_path(data_dir: str | Path | None, name: str | None) -> Path:
    directory = Path(data_dir) if data_dir else Path(".data")
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{name or directory.name or 'koord'}.db"


def make_engine(
    url: str | None,
    data_dir: str | Path | None = None,
    *,
    name: str | None = None,
    **kwargs: Any,
) -> Engine:
    """An engine for `url`; None/"" means a SQLite file `<data_dir>/<name>.db` (name: dir name)."""
    if not url:
        url = f"sqlite:///{_sqlite_path(data_dir, name)}"
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("connect_args", {}).setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        engine = create_engine(parsed, **kwargs)
        event.listen(engine, "connect", _sqlite_on_connect)
        return engine
    if parsed.get_backend_name() == "postgresql":
        # An unreachable server must fail a connect (and a readiness probe) quickly, not hang.
        if parsed.get_driver_name() == "psycopg":
            kwargs.setdefault("connect_args", {}).setdefault("connect_timeout", 5)
        kwargs.setdefault("pool_pre_ping", True)
        kwargs.setdefault("pool_size", 5)
        kwargs.setdefault("max_overflow", 5)
    return create_engine(parsed, **kwargs)


def _sqlite_on_connect(dbapi_conn, _record) -> None:
    # WAL lets API readers run while the writer commits; NORMAL is durable across process
    # crashes in WAL mode (only an OS crash can lose the last transactions).
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
    finally:
        cur.close()


def session_factory(engine: Engine, **kwargs: Any) -> sessionmaker[Session]:
    kwargs.setdefault("expire_on_commit", False)
    return sessionmaker(bind=engine, **kwargs)


def is_postgres(engine_or_url: Engine | str | URL) -> bool:
    return _backend(engine_or_url) == "postgresql"


def is_sqlite(engine_or_url: Engine | str | URL) -> bool:
    return _backend(engine_or_url) == "sqlite"


def _backend(engine_or_url: Engine | str | URL) -> str:
    if isinstance(engine_or_url, Engine):
        return engine_or_url.dialect.name
    return make_url(normalize_url(str(engine_or_url))).get_backend_name()


# --------------------------------------------------------------------------- alembic


def resolve_script_location(script_location: str | Path) -> Path:
    """`"pkg.sub:migrations"` -> the `migrations` directory inside that package; paths as-is."""
    text = str(script_location)
    if ":" in text and not Path(text).exists():
        package, _, sub = text.partition(":")
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"migration package {package!r} cannot be found")
        path = Path(next(iter(spec.submodule_search_locations))) / sub
    else:
        path = Path(text)
    if not (path / "env.py").is_file():
        raise ValueError(f"{path} is not an Alembic script directory (no env.py)")
    return path


def alembic_config(engine_or_url: Engine | str, script_location: str | Path, version_table: str):
    """An Alembic Config without an ini file; the engine (if given) is reused by env.py."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(resolve_script_location(script_location)))
    cfg.attributes["version_table"] = version_table
    if isinstance(engine_or_url, Engine):
        cfg.attributes["engine"] = engine_or_url
        url = engine_or_url.url.render_as_string(hide_password=False)
    else:
        url = normalize_url(engine_or_url)
    # ConfigParser interpolation treats % specially.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def run_migrations(
    engine: Engine, script_location: str | Path, version_table: str, revision: str = "head"
) -> None:
    """Upgrade the service's chain to `revision`; a no-op when already there."""
    from alembic import command

    cfg = alembic_config(engine, script_location, version_table)
    command.upgrade(cfg, revision)
    log.info("migrations applied", extra={"version_table": version_table, "revision": revision})


def run_alembic_env(context, target_metadata) -> None:
    """The whole body of a service's `migrations/env.py`."""
    cfg = context.config
    version_table = cfg.attributes.get("version_table") or cfg.get_main_option("version_table") or "alembic_version"
    options = {"target_metadata": target_metadata, "version_table": version_table, "compare_type": True}
    if context.is_offline_mode():
        context.configure(url=cfg.get_main_option("sqlalchemy.url"), literal_binds=True, **options)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = cfg.attributes.get("engine")
    if engine is None:
        engine = create_engine(normalize_url(cfg.get_main_option("sqlalchemy.url")), poolclass=pool.NullPool)
    with engine.connect() as connection:
        # batch mode lets ALTER TABLE migrations run on SQLite (copy-and-move).
        context.configure(
            connection=connection,
            render_as_batch=connection.dialect.name == "sqlite",
            **options,
        )
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                # Replicas starting together must not run the same chain twice.
                connection.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (version_table,))
            context.run_migrations()
        connection.commit()
