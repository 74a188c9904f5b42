"""PostgreSQL: the raw sample tables partitioned by range of ts, one partition an hour (the
collector creates them ahead and drops them past retention); SQLite keeps plain tables."""
import time

from alembic import op
from metrics_collector.partition_schema import PARTITIONED_TABLES, partition_by_time_v1, unpartition_v1

revision = '0003'
down_revision = '0002'


def upgrade():
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    now_ms = int(time.time() * 1000)
    for table in PARTITIONED_TABLES:
        partition_by_time_v1(conn, table, now_ms)


def downgrade():
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    for table in PARTITIONED_TABLES:
        unpartition_v1(conn, table)
