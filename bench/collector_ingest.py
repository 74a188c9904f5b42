"""Collector ingest: container samples persisted per second, end to end, against a bare bulk load.

End to end = Bus.publish_many -> JetStream -> metrics-collector process (decode, build rows,
one transaction per batch, ack after commit) -> rows committed, timed from the first publish
until the last container row is visible. The floor, in the same run and on the same database
server, is the bare bulk load of exactly the same rows with nothing else in the way:
PostgreSQL `COPY` into the three tables; SQLite one `executemany` per table in one transaction.
The goal is e2e / bare >= 0.5 on both backends.

    .venv/bin/python bench/collector_ingest.py [--messages 1500] [--pods 30] [--backends postgresql,sqlite]

NATS from $NATS_URL (else a private nats-server), PostgreSQL from $DATABASE_URL (a server on
which the bench may create and drop a database; PostgreSQL is left out without one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from _payloads import NODES, node_sample
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.schemas import NodeMetricSample, decode
from koordcommon.storage import make_engine
from koordcommon.testing.db import create_database, drop_database
from koordcommon.testing.nats import NatsServer
from koordcommon.testing.net import free_port, wait_http_ready
from metrics_collector.core.rows import build_rows
from metrics_collector.store import ROW_TABLES, Store

GiB = 1 << 30
GOAL = 0.5


def make_samples(n: int, pods: int) -> list[NodeMetricSample]:
    # Ten-second reports of NODES nodes ending now: inside the raw retention.
    t0 = int(time.time() * 1000) - (n // NODES + 1) * 10_000
    return [node_sample(i, pods, ts=t0 + (i // NODES) * 10_000, seq=i + 1) for i in range(n)]


# --------------------------------------------------------------------------- floors


def bare_postgres(url: str, tables: dict[str, list[tuple]]) -> float:
    """Seconds for a plain COPY of every row into the (empty, migrated) tables, one transaction."""
    import psycopg
    from koordcommon.testing.db import postgres_admin_url

    with psycopg.connect(postgres_admin_url(url)) as conn:
        start = time.perf_counter()
        with conn.cursor() as cur:
            for name, rows in tables.items():
                cols = ", ".join(ROW_TABLES[name][1])
                with cur.copy(f"COPY {name} ({cols}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        conn.commit()
        return time.perf_counter() - start


def bare_sqlite(path: Path, tables: dict[str, list[tuple]]) -> float:
    """Seconds for one executemany per table in one transaction, same pragmas as the collector."""
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as sa_conn:
        raw = sa_conn.connection.driver_connection
        start = time.perf_counter()
        cur = raw.cursor()
        for name, rows in tables.items():
            cols = ROW_TABLES[name][1]
            cur.executemany(f"INSERT INTO {name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
        raw.commit()
        elapsed = time.perf_counter() - start
    engine.dispose()
    return elapsed


def in_process(db_url: str, payloads: list[bytes], batch: int = 500) -> tuple[float, float]:
    """Seconds to decode the payloads alone, and to decode + build rows + write them in batches.

    This is the collector's work without NATS: it says how much of the end-to-end time is
    message decoding (koordcommon.schemas) and how much is the collector's own rows and writes.
    """
    start = time.perf_counter()
    decoded = [decode(NodeMetricSample, p) for p in payloads]
    decoding = time.perf_counter() - start
    del decoded
    store = Store.open(db_url)
    start = time.perf_counter()
    for i in range(0, len(payloads), batch):
        store.write(build_rows(decode(NodeMetricSample, p) for p in payloads[i : i + batch]))
    collector = time.perf_counter() - start
    store.close()
    return decoding, collector


# --------------------------------------------------------------------------- end to end


def container_rows(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT COUNT(*) FROM container_samples")).scalar_one()


def start_collector(env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "metrics_collector"], env=env, stdout=log, stderr=log)


async def end_to_end(nats_url: str, db_url: str, workdir: Path, msgs: list[NodeMetricSample], want: int) -> float:
    """Seconds from the first publish until `want` container rows are committed."""
    namespace = "bench" + uuid.uuid4().hex[:8]
    port = free_port()
    env = {
        **os.environ,
        "NATS_URL": nats_url,
        "DATABASE_URL": db_url,
        "KOORD_COLLECTOR_BUS_NAMESPACE": namespace,
        "KOORD_COLLECTOR_HTTP_HOST": "127.0.0.1",
        "KOORD_COLLECTOR_HTTP_PORT": str(port),
        "KOORD_COLLECTOR_DATA_DIR": str(workdir / "data"),
        "KOORD_COLLECTOR_LOG_LEVEL": "WARNING",
    }
    log_path = workdir / f"collector-{namespace}.log"
    proc = start_collector(env, log_path)
    bus = await Bus(nats_url, service="bench", namespace=namespace).connect(timeout_s=10)
    engine = make_engine(db_url)
    try:
        await asyncio.to_thread(wait_http_ready, f"http://127.0.0.1:{port}/readyz", 30)
        while (await asyncio.to_thread(wait_http_ready, f"http://127.0.0.1:{port}/readyz", 30)) != 200:
            await asyncio.sleep(0.05)
        await bus.ensure_streams(subjects.METRICS_STREAM)
        items = [(subjects.metrics(m.node), m) for m in msgs]
        start = time.perf_counter()
        await bus.publish_many(items)
        deadline = time.monotonic() + 300
        while (got := await asyncio.to_thread(container_rows, engine)) < want:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"collector stopped or stalled at {got}/{want} rows:\n{log_path.read_text()[-3000:]}")
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - start
        if got != want:
            raise RuntimeError(f"{got} container rows, expected exactly {want}")
        return elapsed
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
        engine.dispose()
        with contextlib.suppress(Exception):
            await bus.delete_namespace()
        await bus.close()


async def run(nats_url: str, pg_server: str | None, backends: list[str], n: int, pods: int) -> bool:
    """Print one line per backend; True when every e2e / bare ratio meets the goal."""
    msgs = make_samples(n, pods)
    tables = build_rows(msgs).tables()
    want = len(tables["container_samples"])
    gc.freeze()  # the prepared messages are the bench's own baggage
    print(f"{n} NodeMetricSample messages x {pods} pods x 2 containers = {want} container rows "
          f"(+ {len(tables['pod_samples'])} pod, {n} node rows); NATS {nats_url}")  # fmt: skip
    payloads = [m.encode() for m in msgs]
    print(f"{'backend':<12}{'bare rows/s':>14}{'e2e rows/s':>14}{'ratio':>8}{'goal':>7}"
          f"{'decode-only rows/s':>20}{'in-process rows/s':>19}")  # fmt: skip
    ok = True
    with tempfile.TemporaryDirectory(prefix="collector-bench-") as tmp:
        workdir = Path(tmp)
        for backend in backends:
            if backend == "postgresql":
                if pg_server is None:
                    print(f"{'postgresql':<12} skipped: DATABASE_URL is not a PostgreSQL server")
                    continue
                bare_db, e2e_db = f"bench_{uuid.uuid4().hex[:8]}", f"bench_{uuid.uuid4().hex[:8]}"
                bare_url, e2e_url = create_database(pg_server, bare_db), create_database(pg_server, e2e_db)
                try:
                    Store.open(bare_url).close()
                    bare = bare_postgres(bare_url, tables)
                    e2e = await end_to_end(nats_url, e2e_url, workdir, msgs, want)
                    drop_database(pg_server, e2e_db)
                    e2e_url = create_database(pg_server, e2e_db)
                    decoding, collector = in_process(e2e_url, payloads)
                finally:
                    drop_database(pg_server, bare_db)
                    drop_database(pg_server, e2e_db)
            else:
                bare_path, e2e_path = workdir / "bare.db", workdir / "e2e.db"
                Store.open(f"sqlite:///{bare_path}").close()
                bare = bare_sqlite(bare_path, tables)
                e2e = await end_to_end(nats_url, f"sqlite:///{e2e_path}", workdir, msgs, want)
                decoding, collector = in_process(f"sqlite:///{workdir / 'inproc.db'}", payloads)
            ratio = bare / e2e
            ok &= ratio >= GOAL
            print(f"{backend:<12}{want / bare:>14.0f}{want / e2e:>14.0f}{ratio:>8.2f}{GOAL:>7.2f}"
                  f"{want / decoding:>20.0f}{want / collector:>19.0f}{'' if ratio >= GOAL else '  below goal'}")  # fmt: skip
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1500)
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--backends", default="postgresql,sqlite")
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    db = os.environ.get("DATABASE_URL", "")
    pg_server = db if db.startswith(("postgresql", "postgres:")) else None
    url = os.environ.get("NATS_URL")
    if url:
        ok = asyncio.run(run(url, pg_server, backends, args.messages, args.pods))
    else:
        with NatsServer() as server:
            ok = asyncio.run(run(server.url, pg_server, backends, args.messages, args.pods))
    verdict = "meets the goal of {g} on every backend" if ok else "is below the goal of {g} on a backend (marked)"
    print(f"e2e / bare {verdict.format(g=GOAL)}; decode-only is the rate of koordcommon.schemas.decode on the "
          "same payloads, the ceiling of any consumer of them")


if __name__ == "__main__":
    main()
