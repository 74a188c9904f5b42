"""Koordinator's TestDefaultEstimatorEstimatePod table, and the profile-aware estimator."""

import pytest
from extender_helpers import Gi, guaranteed, pod
from koordcommon.records import ContainerSpec
from koordcommon.resources import Resources
from scheduler_extender.core.estimator import (
    EstimatorArgs,
    WorkloadProfile,
    estimate_pod,
    estimate_pod_with_profile,
)


@pytest.mark.parametrize(
    "p, args, cpu, mem",
    [
        (pod("empty"), EstimatorArgs(), 250, 209715200),
        (guaranteed("g", 4000, 8 * Gi), EstimatorArgs(), 3400, 6012954214),
        (pod("b", 4000, 8 * Gi, lim_cpu=8000, lim_mem=8 * Gi), EstimatorArgs(), 6800, 6012954214),
        (guaranteed("g", 4000, 8 * Gi), EstimatorArgs(cpu_factor=110), 4000, 6012954214),  # capped at the limit
        (guaranteed("g", 4000, 8 * Gi), EstimatorArgs(memory_factor=110), 3400, 8589934592),
        (
            pod(
                "be",
                labels={"koordinator.sh/qosClass": "BE"},
                priority=5000,
                extra_requests={"kubernetes.io/batch-cpu": 4000, "kubernetes.io/batch-memory": 8 * Gi},
            ),
            EstimatorArgs(),
            3400,
            6012954214,
        ),
        (
            pod(
                "be-seed",
                labels={"koordinator.sh/qosClass": "BE"},
                priority=5000,
                extra_requests={"koordinator.sh/batch-cpu": 4000, "koordinator.sh/batch-memory": 8 * Gi},
            ),
            EstimatorArgs(),
            3400,
            6012954214,
        ),
        (
            pod("ls", 4000, 8 * Gi, labels={"koordinator.sh/qosClass": "LS"}, priority=9999),
            EstimatorArgs(cpu_factor=80, memory_factor=80),
            3200,
            6871947674,
        ),
        # mid pods read mid-cpu/mid-memory; without them Koordinator estimates 0 (kept quirk)
        (pod("mid", 4000, 8 * Gi, priority=7500), EstimatorArgs(), 0, 0),
    ],
)
def test_default_estimator(p, args, cpu, mem):
    assert estimate_pod(p, args) == Resources(cpu, mem)


def test_profile_estimate_uses_profile_capped_at_limit_and_falls_back():
    p = guaranteed("g", 4000, 8 * Gi)
    prof = WorkloadProfile({"main": Resources(1200, 2 * Gi)})
    assert estimate_pod_with_profile(p, prof) == Resources(1200, 2 * Gi)
    hot = WorkloadProfile({"main": Resources(9000, 9 * Gi)})
    assert estimate_pod_with_profile(p, hot) == Resources(4000, 8 * Gi)  # never above the limit
    assert estimate_pod_with_profile(p, None) == Resources(3400, 6012954214)
    # a profile that misses a container is not trusted
    two = pod(
        "two",
        containers=[
            ContainerSpec("main", {"cpu": 1000}, {"cpu": 1000}),
            ContainerSpec("side", {"cpu": 500}, {"cpu": 500}),
        ],
    )
    assert estimate_pod_with_profile(two, prof) == estimate_pod(two)
    # a profile without memory data keeps the default memory estimate
    cpu_only = WorkloadProfile({"main": Resources(1200, 0)})
    assert estimate_pod_with_profile(p, cpu_only) == Resources(1200, 6012954214)
