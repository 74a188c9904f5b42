"""widget owners (an ALTER TABLE, run in batch mode on SQLite)"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade():
    op.create_table("owners", sa.Column("id", sa.Integer, primary_key=True))
    with op.batch_alter_table("widgets") as batch:
        batch.add_column(sa.Column("owner_id", sa.Integer, sa.ForeignKey("owners.id", name="fk_widget_owner")))


def downgrade():
    with op.batch_alter_table("widgets") as batch:
        batch.drop_column("owner_id")
    op.drop_table("owners")
