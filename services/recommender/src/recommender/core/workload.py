"""Container keys: which workload container a usage sample belongs to.

A pod is aggregated under its workload (`koordcommon.workload`, the rule every service names
workloads by) and its container name.

Keys are named tuples: hashed and compared in C on every sample, and held once per tracked
container, so both their speed and their size count.
"""

from __future__ import annotations

from typing import NamedTuple

from koordcommon.workload import WorkloadKey

__all__ = ["ContainerKey", "WorkloadKey"]


class ContainerKey(NamedTuple):
    workload: WorkloadKey
    container: str

    def __str__(self) -> str:
        return f"{self.workload}/{self.container}"

    @classmethod
    def parse(cls, text: str) -> ContainerKey:
        parts = text.split("/")
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"{text!r} is not <namespace>/<kind>/<name>/<container>")
        return cls(WorkloadKey(parts[0], parts[1], parts[2]), parts[3])
