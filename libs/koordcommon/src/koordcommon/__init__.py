"""Shared model, bus, storage, cluster port and service chassis of the colocation system."""

__version__ = "0.1.0"
