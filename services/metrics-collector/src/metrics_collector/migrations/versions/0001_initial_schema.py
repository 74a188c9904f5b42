"""Initial schema: raw samples, NodeMetric summaries, node resources, recommendations, events, rollups."""
import sqlalchemy as sa
from alembic import op
from metrics_collector.rollup_schema import node_rollup_v1, pod_rollup_v1

revision = '0001'
down_revision = None

# What the rollups of this revision hold, as it shipped: the code's lists may grow, this may not.
NODE_ROLLUP_METRICS = (
    'cpu_milli', 'memory_bytes', 'system_cpu_milli', 'system_memory_bytes',
    'capacity_cpu_milli', 'capacity_memory_bytes', 'allocatable_cpu_milli', 'allocatable_memory_bytes',
    'prod_used_cpu_milli', 'prod_used_memory_bytes', 'prod_requested_cpu_milli', 'prod_requested_memory_bytes',
    'mid_used_cpu_milli', 'mid_used_memory_bytes', 'mid_requested_cpu_milli', 'mid_requested_memory_bytes',
    'batch_used_cpu_milli', 'batch_used_memory_bytes', 'batch_requested_cpu_milli', 'batch_requested_memory_bytes',
    'free_used_cpu_milli', 'free_used_memory_bytes', 'free_requested_cpu_milli', 'free_requested_memory_bytes',
    'pods',
)
POD_ROLLUP_METRICS = ('cpu_milli', 'memory_bytes', 'requests_cpu_milli', 'requests_memory_bytes')


def upgrade():
    op.create_table('container_samples',
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('pod_uid', sa.String(length=64), nullable=False),
    sa.Column('container', sa.String(length=253), nullable=False),
    sa.Column('requests_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('requests_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('limits_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('limits_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('node', 'ts', 'pod_uid', 'container')
    )
    with op.batch_alter_table('container_samples', schema=None) as batch_op:
        batch_op.create_index('ix_container_samples_ts', ['ts'], unique=False)

    op.create_table('events',
    sa.Column('msg_id', sa.String(length=320), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('dry_run', sa.Boolean(), nullable=False),
    sa.Column('target', sa.Text(), nullable=False),
    sa.Column('details', sa.Text(), nullable=False),
    sa.Column('source', sa.String(length=255), nullable=False),
    sa.PrimaryKeyConstraint('msg_id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_node_ts', ['node', 'ts'], unique=False)
        batch_op.create_index('ix_events_ts', ['ts'], unique=False)

    op.create_table('node_metrics',
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('aggregate_duration_s', sa.Integer(), nullable=False),
    sa.Column('report_interval_s', sa.Integer(), nullable=False),
    sa.Column('cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('system_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('system_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('prod_reclaimable_cpu_milli', sa.BigInteger(), nullable=True),
    sa.Column('prod_reclaimable_memory_bytes', sa.BigInteger(), nullable=True),
    sa.Column('prod_peak_cpu_milli', sa.BigInteger(), nullable=True),
    sa.Column('prod_peak_memory_bytes', sa.BigInteger(), nullable=True),
    sa.Column('pods', sa.Integer(), nullable=False),
    sa.Column('aggregated', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('node', 'ts')
    )
    op.create_table('node_resources',
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('batch_cpu_milli', sa.BigInteger(), nullable=True),
    sa.Column('batch_memory_bytes', sa.BigInteger(), nullable=True),
    sa.Column('mid_cpu_milli', sa.BigInteger(), nullable=True),
    sa.Column('mid_memory_bytes', sa.BigInteger(), nullable=True),
    sa.Column('degraded', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('written', sa.Boolean(), nullable=False),
    sa.Column('metric_ts', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('node', 'ts')
    )
    op.create_table('node_samples',
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('window_s', sa.Float(), nullable=False),
    sa.Column('cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('system_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('system_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('capacity_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('capacity_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('allocatable_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('allocatable_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('prod_used_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('prod_used_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('prod_requested_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('prod_requested_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('mid_used_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('mid_used_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('mid_requested_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('mid_requested_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('batch_used_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('batch_used_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('batch_requested_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('batch_requested_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('free_used_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('free_used_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('free_requested_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('free_requested_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('pods', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('node', 'ts')
    )
    with op.batch_alter_table('node_samples', schema=None) as batch_op:
        batch_op.create_index('ix_node_samples_ts', ['ts'], unique=False)

    op.create_table('node_usage_1h', *node_rollup_v1('node_usage_1h', NODE_ROLLUP_METRICS))

    op.create_table('node_usage_1m', *node_rollup_v1('node_usage_1m', NODE_ROLLUP_METRICS))

    op.create_table('pod_samples',
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('uid', sa.String(length=64), nullable=False),
    sa.Column('namespace', sa.String(length=253), nullable=False),
    sa.Column('name', sa.String(length=253), nullable=False),
    sa.Column('owner_kind', sa.String(length=64), nullable=False),
    sa.Column('owner_name', sa.String(length=253), nullable=False),
    sa.Column('qos', sa.String(length=16), nullable=False),
    sa.Column('priority_class', sa.String(length=32), nullable=False),
    sa.Column('band', sa.String(length=8), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=True),
    sa.Column('requests_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('requests_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('limits_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('limits_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('batch_requests_cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('batch_requests_memory_bytes', sa.BigInteger(), nullable=False),
    sa.Column('cpu_milli', sa.BigInteger(), nullable=False),
    sa.Column('memory_bytes', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('node', 'ts', 'uid')
    )
    with op.batch_alter_table('pod_samples', schema=None) as batch_op:
        batch_op.create_index('ix_pod_samples_ts', ['ts'], unique=False)
        batch_op.create_index('ix_pod_samples_uid_ts', ['uid', 'ts'], unique=False)

    op.create_table('pod_usage_1h', *pod_rollup_v1('pod_usage_1h', POD_ROLLUP_METRICS))

    op.create_table('pod_usage_1m', *pod_rollup_v1('pod_usage_1m', POD_ROLLUP_METRICS))

    op.create_table('recommendations',
    sa.Column('namespace', sa.String(length=253), nullable=False),
    sa.Column('owner_kind', sa.String(length=64), nullable=False),
    sa.Column('owner_name', sa.String(length=253), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('source', sa.String(length=255), nullable=False),
    sa.Column('containers', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('namespace', 'owner_kind', 'owner_name', 'ts')
    )


def downgrade():
    op.drop_table('recommendations')
    with op.batch_alter_table('pod_usage_1m', schema=None) as batch_op:
        batch_op.drop_index('ix_pod_usage_1m_uid_bucket')
        batch_op.drop_index('ix_pod_usage_1m_bucket')

    op.drop_table('pod_usage_1m')
    with op.batch_alter_table('pod_usage_1h', schema=None) as batch_op:
        batch_op.drop_index('ix_pod_usage_1h_uid_bucket')
        batch_op.drop_index('ix_pod_usage_1h_bucket')

    op.drop_table('pod_usage_1h')
    with op.batch_alter_table('pod_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_pod_samples_uid_ts')
        batch_op.drop_index('ix_pod_samples_ts')

    op.drop_table('pod_samples')
    with op.batch_alter_table('node_usage_1m', schema=None) as batch_op:
        batch_op.drop_index('ix_node_usage_1m_bucket')

    op.drop_table('node_usage_1m')
    with op.batch_alter_table('node_usage_1h', schema=None) as batch_op:
        batch_op.drop_index('ix_node_usage_1h_bucket')

    op.drop_table('node_usage_1h')
    with op.batch_alter_table('node_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_node_samples_ts')

    op.drop_table('node_samples')
    op.drop_table('node_resources')
    op.drop_table('node_metrics')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_ts')
        batch_op.drop_index('ix_events_node_ts')

    op.drop_table('events')
    with op.batch_alter_table('container_samples', schema=None) as batch_op:
        batch_op.drop_index('ix_container_samples_ts')

    op.drop_table('container_samples')
