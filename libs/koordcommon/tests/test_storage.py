"""Engines on SQLite and PostgreSQL, and a per-service Alembic chain applied idempotently."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from koordcommon.storage import (
    is_postgres,
    is_sqlite,
    make_engine,
    normalize_url,
    resolve_script_location,
    run_migrations,
    session_factory,
)
from sqlalchemy.exc import IntegrityError

MIGRATIONS = Path(__file__).parent / "storage_migrations"


@pytest.mark.parametrize(
    "url, expected",
    [
        ("postgresql://postgres@127.0.0.1:5432/test", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
        ("postgres://u:p@db/x?sslmode=require", "postgresql+psycopg://u:p@db/x?sslmode=require"),
        ("postgresql+psycopg://h/db", "postgresql+psycopg://h/db"),
        ("postgresql+asyncpg://h/db", "postgresql+asyncpg://h/db"),
        ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
    ],
)
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


def test_default_engine_is_sqlite_file_in_data_dir(tmp_path):
    data_dir = tmp_path / "nested" / "metrics-collector"
    engine = make_engine("", data_dir)
    with engine.connect() as conn:
        pragmas = {
            p: conn.exec_driver_sql(f"PRAGMA {p}").scalar()
            for p in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        }
    assert pragmas == {"journal_mode": "wal", "synchronous": 1, "foreign_keys": 1, "busy_timeout": 30000}
    assert (data_dir / "metrics-collector.db").is_file()
    assert is_sqlite(engine) and not is_postgres(engine)
    named = make_engine(None, tmp_path / "d", name="store")
    with named.connect():
        pass
    assert (tmp_path / "d" / "store.db").is_file()


def _tables(engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_migrations_idempotent_on_both_backends(database_url):
    engine = make_engine(database_url)
    assert is_postgres(engine) == database_url.startswith("postgresql")
    run_migrations(engine, MIGRATIONS, version_table="alembic_version_demo", revision="0001")
    assert _tables(engine) == {"widgets", "alembic_version_demo"}
    run_migrations(engine, MIGRATIONS, version_table="alembic_version_demo")
    run_migrations(engine, MIGRATIONS, version_table="alembic_version_demo")
    assert _tables(engine) == {"widgets", "owners", "alembic_version_demo"}
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version_demo")).scalars().all() == ["0002"]
    columns = {c["name"] for c in sa.inspect(engine).get_columns("widgets")}
    assert columns == {"id", "name", "owner_id"}

    Session = session_factory(engine)
    with Session.begin() as s:
        s.execute(sa.text("INSERT INTO owners (id) VALUES (1)"))
        s.execute(sa.text("INSERT INTO widgets (name, owner_id) VALUES ('a', 1)"))
    # Foreign keys are enforced on SQLite too (PRAGMA foreign_keys on every connection).
    with pytest.raises(IntegrityError), Session.begin() as s:
        s.execute(sa.text("INSERT INTO widgets (name, owner_id) VALUES ('b', 99)"))
    with pytest.raises(IntegrityError), Session.begin() as s:
        s.execute(sa.text("INSERT INTO widgets (name) VALUES ('a')"))
    with Session() as s:
        assert s.execute(sa.text("SELECT name, owner_id FROM widgets")).all() == [("a", 1)]
    engine.dispose()


def test_two_chains_keep_separate_version_tables(database_url):
    engine = make_engine(database_url)
    run_migrations(engine, MIGRATIONS, version_table="alembic_version_one", revision="0001")
    with engine.connect() as conn:
        conn.execute(sa.text("DROP TABLE widgets"))
        conn.commit()
    # A second service's chain starts from scratch in the same database.
    run_migrations(engine, str(MIGRATIONS), version_table="alembic_version_two")
    with engine.connect() as conn:
        one = conn.execute(sa.text("SELECT version_num FROM alembic_version_one")).scalar()
        two = conn.execute(sa.text("SELECT version_num FROM alembic_version_two")).scalar()
    assert (one, two) == ("0001", "0002")
    assert "alembic_version" not in _tables(engine)
    engine.dispose()


def test_postgres_databases_are_fresh_per_test(database_url):
    engine = make_engine(database_url)
    assert _tables(engine) == set()
    engine.dispose()


def test_script_location_from_package_and_errors(tmp_path):
    assert resolve_script_location("alembic:templates/generic") == Path(
        __import__("alembic").__file__
    ).parent / "templates" / "generic"
    with pytest.raises(ValueError, match="cannot be found"):
        resolve_script_location("no_such_package_xyz:migrations")
    with pytest.raises(ValueError, match="no env.py"):
        resolve_script_location(tmp_path)
