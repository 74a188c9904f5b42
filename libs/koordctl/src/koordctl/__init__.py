"""koordctl: run and inspect the colocation system."""
