"""Checkpoints of the per workload-container histograms and profiles."""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade():
    op.create_table(
        "recommender_checkpoints",
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("owner_kind", sa.String(length=64), nullable=False),
        sa.Column("owner_name", sa.String(length=253), nullable=False),
        sa.Column("container", sa.String(length=253), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "owner_kind", "owner_name", "container"),
    )


def downgrade():
    op.drop_table("recommender_checkpoints")
