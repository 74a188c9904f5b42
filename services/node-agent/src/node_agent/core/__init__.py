"""Pure core of the node agent: rings, aggregation, rates and message building (no I/O)."""
