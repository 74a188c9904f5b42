"""Builders of real NodeMetricSample messages for the adapter tests (as fixtures)."""

from __future__ import annotations

import time

import pytest
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, NodeMetricSample, Owner, PodUsage

MIB = 1024 * 1024
# a UTC midnight three days ago: samples over the bus must be within the receivers' 8 days
# (koordcommon.bounds), or they are dead-lettered as clock skew
T0_MS = (int(time.time()) // 86_400 - 3) * 86_400_000


def pod(uid: str, rs: str, cpu_milli: int, mem: int, sidecar_cpu: int = 20, oom_ms: int | None = None) -> PodUsage:
    app = ContainerUsage(
        name="app",
        requests=Resources(1000, 1024 * MIB),
        usage=Resources(cpu_milli, mem),
        last_oom_ms=oom_ms,
    )
    side = ContainerUsage(name="proxy", requests=Resources(100, 128 * MIB), usage=Resources(sidecar_cpu, 60 * MIB))
    return PodUsage(
        uid=uid,
        namespace="prod",
        name=f"{rs}-{uid[-5:]}",
        owner=Owner(kind="ReplicaSet", name=rs),
        requests=Resources(1100, 1152 * MIB),
        usage=Resources(cpu_milli + sidecar_cpu, mem + 60 * MIB),
        containers=[app, side],
    )


def minute_samples(start_min: int, minutes: int, cpu=lambda i: 300 + (i % 10) * 40, mem=lambda i: 400 * MIB + (i % 30) * MIB):
    """One message a minute from node-1 with two pods of Deployment `web` and one lone pod."""
    out = []
    for i in range(start_min, start_min + minutes):
        out.append(
            NodeMetricSample(
                node="node-1",
                ts=T0_MS + i * 60_000,
                window_s=60,
                node_usage=Resources(4000, 8 * 1024 * MIB),
                pods=[
                    pod("uid-aaaaa", "web-7c5ddbdf54", cpu(i), mem(i)),
                    pod("uid-bbbbb", "web-7c5ddbdf54", cpu(i) // 2, mem(i) // 2),
                    PodUsage(uid="uid-lone", namespace="dev", name="lone", usage=Resources(50, 300 * MIB)),
                ],
            )
        )
    return out


@pytest.fixture
def metric_samples():
    """minute_samples(start_min, minutes, cpu=fn, mem=fn) -> list[NodeMetricSample]."""
    return minute_samples
