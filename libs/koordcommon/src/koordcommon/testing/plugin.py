"""pytest plugin (registered through the `pytest11` entry point): fixtures for NATS and databases."""

from .db import *
from .nats import *
