"""Database fixtures: every storage test runs on SQLite and on a real PostgreSQL.

PostgreSQL comes from DATABASE_URL (a server we may create databases on), else from a
testcontainers PostgreSQL when a Docker engine answers, else the test is skipped (or fails
under KOORD_REQUIRE_SERVICES=1). Each PostgreSQL test gets its own fresh database, dropped
afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.engine import make_url

__all__ = [
    "create_database",
    "database_url",
    "drop_database",
    "postgres_admin_url",
    "postgres_server_url",
    "require_services",
    "sqlite_url",
]

_CONNECT_TIMEOUT_S = 3


def require_services() -> bool:
    return os.environ.get("KOORD_REQUIRE_SERVICES", "") not in ("", "0", "false", "no")


def _missing(reason: str):
    if require_services():
        pytest.fail(f"{reason} (KOORD_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def postgres_admin_url(url: str) -> str:
    """A plain libpq URL (postgresql://...) on the same server, for psycopg connections."""
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def _with_database(url: str, database: str) -> str:
    return make_url(url).set(drivername="postgresql", database=database).render_as_string(hide_password=False)


def _reachable(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(postgres_admin_url(url), connect_timeout=_CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=_CONNECT_TIMEOUT_S).ping()
        return True
    except Exception:  # noqa: BLE001 - no docker module, no engine, no permission: all mean "no"
        return False


def create_database(server_url: str, name: str) -> str:
    """CREATE DATABASE `name` on the server of `server_url`; returns its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(postgres_admin_url(server_url), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_database(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(postgres_admin_url(server_url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str | None]:
    """URL of a PostgreSQL server we may create databases on, or None when there is none.

    Callers decide whether None skips or fails (see `database_url`).
    """
    env = os.environ.get("DATABASE_URL", "")
    if env:
        if make_url(env).get_backend_name() != "postgresql":
            yield None
            return
        problem = _reachable(env)
        yield None if problem else env
        return
    if not _docker_answers():
        yield None
        return
    from testcontainers.postgres import PostgresContainer

    with PostgresContainer("postgres:16-alpine", driver=None) as pg:
        yield pg.get_connection_url()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'test.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> Iterator[str]:
    """A URL to an empty database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    server = request.getfixturevalue("postgres_server_url")
    if server is None:
        env = os.environ.get("DATABASE_URL", "")
        if env and make_url(env).get_backend_name() == "postgresql":
            _missing(f"no PostgreSQL: DATABASE_URL is unreachable: {_reachable(env)}")
        _missing("no PostgreSQL: DATABASE_URL is unset or not PostgreSQL and no Docker engine answers")
    name = f"t_{uuid.uuid4().hex[:16]}"
    url = create_database(server, name)
    try:
        yield url
    finally:
        drop_database(server, name)
