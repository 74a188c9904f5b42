from alembic import context
from koordcommon.storage import run_alembic_env
from sqlalchemy import MetaData

run_alembic_env(context, MetaData())
