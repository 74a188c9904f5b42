"""The inputs and messages behind each batch/mid allocatable report; the last what-if report's files."""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'


def upgrade():
    with op.batch_alter_table('node_resources', schema=None) as batch_op:
        batch_op.add_column(sa.Column('inputs', sa.Text(), nullable=False, server_default='{}'))
        batch_op.add_column(sa.Column('messages', sa.Text(), nullable=False, server_default='[]'))
    op.create_table('whatif_files',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('ts', sa.BigInteger(), nullable=False),
    sa.Column('content_type', sa.String(length=64), nullable=False),
    sa.Column('content', sa.LargeBinary(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )


def downgrade():
    op.drop_table('whatif_files')
    with op.batch_alter_table('node_resources', schema=None) as batch_op:
        batch_op.drop_column('messages')
        batch_op.drop_column('inputs')
