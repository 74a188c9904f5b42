"""A replay of a cluster's own history (--trace history): the online load the ledger records is the
history's, minute by minute (hand-computed), with colocation and without."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from koordcommon.clusterhistory import COLUMNS, NODE_USAGE, NODES, POD_USAGE, csv_text
from koordwhatif import scenario
from koordwhatif.config import WhatIfConfig
from koordwhatif.engine import replay

GIB = 1 << 30
MIN = 60_000
T0 = 1_700_000_040_000  # a multiple of 60 s


def write(directory: Path, table: str, rows: list[dict]) -> None:
    cols = COLUMNS[table]
    (directory / f"{table}.csv").write_text(csv_text([cols, *([r.get(c, "") for c in cols] for r in rows)]))


def pod_row(ts, node, name, cls, prio, qos, cpu, req, ns="shop") -> dict:
    return {"ts": ts, "node": node, "namespace": ns, "name": name, "uid": f"uid-{name}", "owner_kind": "ReplicaSet",
            "owner_name": f"{name}-7f9c", "priority_class": cls, "priority": prio, "qos": qos,
            "requests_cpu_milli": req, "requests_memory_bytes": 2 * GIB if req else 0, "cpu_milli": cpu,
            "memory_bytes": GIB}  # fmt: skip


@pytest.fixture
def two_node_history(tmp_path) -> Path:
    """node-1 records 4000 + 50 k milli-cores at minute k, of which etl-1 (batch) 1000 and web-1
    1500 + 30 k; node-2 records 2500 + 25 k, of which web-2 1000 + 10 k. Eleven minutes."""
    node = {"capacity_cpu_milli": 16_000, "capacity_memory_bytes": 64 * GIB, "allocatable_cpu_milli": 15_500,
            "allocatable_memory_bytes": 63 * GIB}  # fmt: skip
    write(tmp_path, NODES, [{"node": "node-1", **node}, {"node": "node-2", **node}])
    usage, pods = [], []
    for k in range(11):
        t = T0 + k * MIN
        usage += [{"ts": t, "node": "node-1", "cpu_milli": 4000 + 50 * k, "memory_bytes": 8 * GIB},
                  {"ts": t, "node": "node-2", "cpu_milli": 2500 + 25 * k, "memory_bytes": 6 * GIB}]  # fmt: skip
        pods += [pod_row(t, "node-1", "web-1", "koord-prod", 9500, "LS", 1500 + 30 * k, 3000),
                 pod_row(t, "node-1", "etl-1", "koord-batch", 5500, "BE", 1000, 0, ns="jobs"),
                 pod_row(t, "node-2", "web-2", "", "", "", 1000 + 10 * k, 2000)]  # fmt: skip
    write(tmp_path, NODE_USAGE, usage)
    write(tmp_path, POD_USAGE, pods)
    return tmp_path


# tick (minute after the start) -> online CPU of node-1, node-2: what each recorded, less etl-1's 1000
ONLINE_CPU = [(k, 4000 + 50 * k - 1000, 2500 + 25 * k) for k in range(1, 11)]


@pytest.mark.parametrize("colocation", [True, False])
def test_the_ledger_s_online_cpu_is_the_history_s(two_node_history, colocation):
    spec, about = scenario.spec_for("history", history=two_node_history)
    assert (spec.scenario, spec.nodes, spec.start_ms, about["title"]) == (
        "history", 2, T0, f"2 nodes of the cluster history in {two_node_history}")
    result = replay(spec, WhatIfConfig(colocation=colocation), duration_s=600)
    ledger = result.ledger
    assert ledger.nodes == ["node-1", "node-2"] and ledger.capacity_cpu.tolist() == [16_000, 16_000]
    assert ledger.times == [T0 + k * MIN for k in range(1, 11)]
    online = ledger.series("online_cpu")
    assert [(k, *online[k - 1].tolist()) for k in range(1, 11)] == ONLINE_CPU
    assert any("1 batch/free pods of the history left out" in a for a in result.assumptions)
    if colocation:  # the history leaves room: the controller offers batch capacity on both nodes
        assert (ledger.series("batch_alloc_cpu")[-1] > 0).all()
    else:
        assert not np.any(ledger.series("batch_cpu"))


def test_a_history_replays_its_own_nodes_and_names_its_problems(two_node_history, tmp_path):
    with pytest.raises(scenario.ScenarioError, match="records 2 nodes; a history replays its own nodes"):
        scenario.spec_for("history", history=two_node_history, nodes=5)
    with pytest.raises(scenario.ScenarioError, match="needs --history DIR"):
        scenario.spec_for("history")
    (two_node_history / "node_usage.csv").write_text("ts,node,cpu_milli,memory_bytes\n1,node-9,1,1\n")
    with pytest.raises(scenario.ScenarioError, match="node_usage.csv line 2, column node: 'node-9' is not in nodes"):
        scenario.spec_for("history", history=two_node_history)


def test_the_extender_s_bind_verb_binds_the_batch_pods_when_its_settings_serve_it(two_node_history):
    """bind_verb in the extender's settings: kube-scheduler binds every pod it places through the
    extender's bind verb instead of the API. (Where the pods land may differ: the verb counts a
    pod on its node at once, for the next pod's cycle, where the cluster watch reports it after
    the pass, as a deployment's informer does a moment later.)"""
    from koordwhatif.config import with_knob
    from scheduler_extender.metrics import METRICS

    # an hour (each node held at its last recorded value after the history), with batch demand enough that some waits
    spec, _ = scenario.spec_for("history", history=two_node_history, batch_load=3.0)
    for on in (False, True):
        before = METRICS.requests[("bind", "ok")]
        result = replay(spec, with_knob(WhatIfConfig(), "extender.bind_verb", on), duration_s=3600)
        started = sum(1 for p in result.ledger.pods.values() if p.started_ms is not None)
        assert started >= 10  # 17 pods when written
        assert METRICS.requests[("bind", "ok")] - before == (started if on else 0)
