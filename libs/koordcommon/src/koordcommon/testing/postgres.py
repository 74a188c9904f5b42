"""A PostgreSQL server of a test's own, which the test may stop and start.

A database outage must not touch the server other tests share (DATABASE_URL): `PrivatePostgres`
runs `initdb` and `pg_ctl` (the PostgreSQL server binaries, e.g. Debian's `postgresql` package)
on a free port, its data and socket in a temp dir, for as long as the test needs it. As root
(PostgreSQL refuses to run as root) it runs them as the `postgres` user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from .net import free_port

__all__ = ["PrivatePostgres", "postgres_binaries"]


def postgres_binaries() -> Path | None:
    """The directory holding initdb and pg_ctl: on PATH, else the newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    return None


class PrivatePostgres:
    """initdb once, then start / stop at will (`stop(mode="immediate")` is a crash: connections
    drop at once, the next start recovers from the WAL)."""

    def __init__(self, port: int | None = None) -> None:
        bindir = postgres_binaries()
        if bindir is None:
            raise RuntimeError("no initdb / pg_ctl found (apt-get install -y postgresql)")
        self.bindir = bindir
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="koord-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._user: pwd.struct_passwd | None = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self._user is not None:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")

    def start(self) -> PrivatePostgres:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def create_database(self, name: str) -> str:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def close(self) -> None:
        """Stop the server if it runs and remove its files."""
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except RuntimeError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
