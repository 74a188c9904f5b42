from alembic import context
from koordcommon.storage import run_alembic_env
from recommender.store import metadata

run_alembic_env(context, metadata)
