"""The in-tree plugins over a table of nodes say what `filter_reasons` and `least_allocated_score`
say node by node."""

from __future__ import annotations

import random

from koordcommon.records import ContainerSpec, NodeRecord, PodRecord, Taint
from koordsim import fit

BATCH_CPU, BATCH_MEM = "koordinator.sh/batch-cpu", "koordinator.sh/batch-memory"


def _node(rng: random.Random, i: int) -> NodeRecord:
    alloc = {"cpu": rng.choice([4000, 8000]), "memory": rng.choice([8, 16]) << 30}
    if rng.random() < 0.7:
        alloc[BATCH_CPU] = rng.randrange(0, 6000, 500)
    if rng.random() < 0.7:
        alloc[BATCH_MEM] = rng.randrange(0, 8 << 30, 1 << 29)
    if rng.random() < 0.8:
        alloc["pods"] = rng.randrange(1, 6)
    taints = [Taint("dedicated", "gpu", rng.choice(["NoSchedule", "PreferNoSchedule"]))] if rng.random() < 0.1 else []
    return NodeRecord(f"n{i:03d}", allocatable=alloc, taints=taints, unschedulable=rng.random() < 0.05,
                      ready=rng.random() > 0.05)  # fmt: skip


def _pod(rng: random.Random, i: int) -> PodRecord:
    requests = {k: rng.choice([0, 500, 1000, 2000]) for k in (BATCH_CPU, "cpu") if rng.random() < 0.8}
    if rng.random() < 0.8:
        requests[BATCH_MEM] = rng.randrange(0, 4 << 30, 1 << 28)
    return PodRecord("ns", f"p{i}", f"uid-{i}", containers=[ContainerSpec("c", requests, dict(requests))])


def test_the_table_judges_as_filter_reasons_does():
    rng = random.Random(7)
    for trial in range(30):
        nodes = [_node(rng, i) for i in range(rng.randrange(1, 40))]
        requested = {n.name: {} for n in nodes}
        nonzero = {n.name: [0, 0] for n in nodes}
        table = fit.FitTable(nodes, requested, nonzero)
        for k in range(15):
            pod = _pod(rng, k)
            demand = fit.PodDemand.of(pod)
            codes = table.codes(demand)
            for i, node in enumerate(nodes):
                want = ", ".join(fit.filter_reasons(pod, node, requested[node.name]))
                code = int(codes[i])
                got = table.conditions[i] if code < 0 else table.reason(code, demand) if code else ""
                assert got == want, (trial, k, node)
            rows = rng.sample(range(len(nodes)), rng.randrange(0, len(nodes) + 1))
            assert table.least_allocated(rows, demand).tolist() == [
                fit.least_allocated_score(pod, nodes[i], nonzero[nodes[i].name]) for i in rows
            ]
            if rng.random() < 0.6:  # place it somewhere, as a scheduling pass assumes a bound pod
                node = rng.choice(nodes).name
                fit.add_requests(requested[node], pod)
                c, m = fit.non_zero_requests(pod)
                nonzero[node][0] += c
                nonzero[node][1] += m
                table.assume(node, pod.requests(), demand.non_zero)
