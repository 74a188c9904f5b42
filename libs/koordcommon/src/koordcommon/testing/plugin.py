"""pytest plugin (registered through the `pytest11` entry point): fixtures for NATS and databases."""

from .nats import *  # noqa: F401,F403
from .db import *  # noqa: F401,F403
