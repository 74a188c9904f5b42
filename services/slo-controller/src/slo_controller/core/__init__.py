"""The slo-controller's pure core: config, snapshots, overcommit rules, NodeSLO and profiles.

Nothing here imports nats, fastapi, sqlalchemy or kubernetes; adapters call in with plain data.
"""
