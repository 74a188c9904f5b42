"""Test support shared by every package: real NATS and database fixtures (a pytest plugin)."""
