"""The `history` scenario: a cluster's own history (docs/history-format.md) read strictly and replayed.

Each table lists inputs and the values the simulated cluster must show, computed by hand.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from koordcommon.clusterhistory import (
    COLUMNS,
    NODE_USAGE,
    NODES,
    POD_USAGE,
    HistoryError,
    csv_text,
    read_history,
)
from koordsim.cluster import SimCluster
from koordsim.history import load
from koordsim.history import spec as history_spec
from koordsim.scenarios import build
from koordsim.spec import SimSpec

MIN = 60_000
T0 = 1_700_000_040_000  # a multiple of 60 s
GIB = 1 << 30


def write_table(directory: Path, table: str, rows: list[dict], columns=None, suffix=".csv") -> Path:
    columns = columns or COLUMNS[table]
    text = csv_text([columns, *([r.get(c, "") for c in columns] for r in rows)])
    path = directory / f"{table}{suffix}"
    if suffix == ".csv.gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def node(name: str, cpu=8000, mem=32 * GIB, labels='{"pool": "web"}') -> dict:
    return {"node": name, "capacity_cpu_milli": cpu, "capacity_memory_bytes": mem, "allocatable_cpu_milli": cpu - 500,
            "allocatable_memory_bytes": mem - GIB, "labels": labels}  # fmt: skip


def pod(ts, node_name, name, cpu, mem, cls="koord-prod", prio=9500, qos="LS", req=(2000, 4 * GIB), lim=(4000, 8 * GIB),
        ns="shop", uid=None) -> dict:  # fmt: skip
    return {"ts": ts, "node": node_name, "namespace": ns, "name": name, "uid": uid if uid is not None else f"uid-{name}",
            "owner_kind": "ReplicaSet", "owner_name": f"{name.rsplit('-', 1)[0]}-7f9c", "priority_class": cls,
            "priority": prio, "qos": qos, "requests_cpu_milli": req[0], "requests_memory_bytes": req[1],
            "limits_cpu_milli": lim[0], "limits_memory_bytes": lim[1], "cpu_milli": cpu, "memory_bytes": mem}  # fmt: skip


def two_nodes(tmp_path: Path) -> Path:
    """n1: web-1 (prod) and etl-1 (batch) over 0..10 min; web-1 misses minute 3; n1 misses minute 5.
    n2: api-1 (no class, Burstable: prod) from minute 2 to 6, and a 30-minute gap in its node series."""
    write_table(tmp_path, NODES, [node("n1"), node("n2", labels="")])
    usage, pods = [], []
    for k in range(11):
        t = T0 + k * MIN
        if k != 5:
            usage.append({"ts": t, "node": "n1", "cpu_milli": 3000 + 10 * k, "memory_bytes": 6 * GIB})
        if k != 3:
            pods.append(pod(t, "n1", "web-1", 1000 + 100 * k, 2 * GIB))
        pods.append(pod(t, "n1", "etl-1", 500, GIB, cls="koord-batch", prio=5500, qos="BE", req=(0, 0), lim=(0, 0),
                        ns="jobs"))  # fmt: skip
        if 2 <= k <= 6:
            pods.append(pod(t, "n2", "api-1", 700 + k, GIB // 2, cls="", prio="", qos=""))
    for k in (0, 1, 32, 40):  # 30 minutes without a sample between minute 1 and minute 32
        usage.append({"ts": T0 + k * MIN, "node": "n2", "cpu_milli": 2000 + k, "memory_bytes": 3 * GIB + k})
    write_table(tmp_path, NODE_USAGE, usage)
    write_table(tmp_path, POD_USAGE, pods)
    return tmp_path


def spec_of(path: Path) -> SimSpec:
    return history_spec(path, speed=0)


# minute -> web-1 cpu, api-1 cpu, n1 node cpu, n2 node cpu (what the simulated cluster shows)
REPLAYED = [
    (0, 1000, 0, 3000 - 500, 2000),  # n1: recorded 3000 less etl-1's 500 (batch, left out)
    (1, 1100, 0, 3010 - 500, 2001),
    (2, 1200, 702, 3020 - 500, 2040),  # n2: a 30-min gap (longer than 15): the series' peak
    (3, 1400, 703, 3030 - 500, 2040),  # web-1 misses minute 3: the larger of minutes 2 and 4 (1200, 1400)
    (5, 1500, 705, 3060 - 500, 2040),  # n1 misses minute 5: the larger of 3040 and 3060
    (7, 1700, 0, 3070 - 500, 2040),  # api-1 ended at minute 6: it uses nothing, n2 shows its recorded usage
    (10, 2000, 0, 3100 - 500, 2040),
    (36, 0, 0, 3100 - 2000 - 500, 2040),  # n2's 7-min gap: the larger side; n1 ended at minute 10 and its
    (40, 0, 0, 3100 - 2000 - 500, 2040),  # pods with it: its last system usage is held
]


def test_pods_and_nodes_replay_their_recorded_usage(tmp_path):
    """A node shows its recorded usage less its batch pods' (system usage = recorded - all pods)."""
    spec = spec_of(two_nodes(tmp_path))
    cluster = SimCluster(spec)
    state = cluster.state
    assert spec.resolved().start_ms == T0
    assert sorted(state.pods) == ["shop/api-1", "shop/web-1"]  # etl-1 (koord-batch) is left out
    web, api = state.pods["shop/web-1"], state.pods["shop/api-1"]
    assert (web.node_name, web.uid, web.priority_class.value, web.qos.value) == ("n1", "uid-web-1", "koord-prod", "LS")
    assert web.request_resources().cpu_milli == 2000 and web.limit_resources().memory_bytes == 8 * GIB
    assert (api.priority_class.value, api.qos.value) == ("koord-prod", "LS")  # no class, Burstable: prod, LS
    assert state.nodes["n1"].labels == {"kubernetes.io/hostname": "n1", "pool": "web"}
    assert state.nodes["n1"].allocatable["cpu"] == 7500
    got = []
    for minute, *_ in REPLAYED:
        t = T0 + minute * MIN
        got.append((minute, cluster.pod_usage(web, t).cpu_milli, cluster.pod_usage(api, t).cpu_milli,
                    cluster.node_usage("n1", t).cpu_milli, cluster.node_usage("n2", t).cpu_milli))  # fmt: skip
    assert got == REPLAYED
    half = T0 + 90_000  # half-way between two samples: linear
    assert cluster.pod_usage(web, half).cpu_milli == 1150
    assert cluster.node_usage("n1", T0).memory_bytes == 6 * GIB - GIB  # less etl-1's recorded memory
    text = " ".join(state.assumptions)
    assert "2 nodes and 2 online pods" in text and "1 batch/free pods of the history left out" in text
    assert "filled: 1 + 0 pod samples, 8 + 30 node samples" in text


# (priority_class, priority, qos, requests, limits) -> online (kept) or batch (left out)
CLASSES = [
    ("koord-prod", 9500, "LSR", (1000, GIB), (1000, GIB), True),
    ("koord-mid", 7500, "LS", (1000, GIB), (0, 0), True),
    ("koord-batch", 5500, "BE", (0, 0), (0, 0), False),
    ("koord-free", 3500, "BE", (0, 0), (0, 0), False),
    ("", 9100, "", (1000, GIB), (0, 0), True),  # the value band: prod
    ("", 5100, "", (1000, GIB), (0, 0), False),  # the value band: batch
    ("", "", "BE", (0, 0), (0, 0), False),  # no class, BE: batch (Koordinator's default)
    ("", "", "", (0, 0), (0, 0), False),  # no class, BestEffort by its requests: BE, so batch
    ("", "", "", (500, GIB), (0, 0), True),  # no class, Burstable: prod
    ("", "", "SYSTEM", (0, 0), (0, 0), True),
]


@pytest.mark.parametrize("cls, prio, qos, req, lim, online", CLASSES)
def test_which_pods_are_online(tmp_path, cls, prio, qos, req, lim, online):
    write_table(tmp_path, NODES, [node("n1")])
    write_table(tmp_path, NODE_USAGE, [{"ts": T0 + k * MIN, "node": "n1", "cpu_milli": 100, "memory_bytes": 1} for k in range(2)])
    write_table(tmp_path, POD_USAGE, [pod(T0, "n1", "p-1", 10, 1, cls=cls, prio=prio, qos=qos, req=req, lim=lim)])
    assert [p.name for p in build(spec_of(tmp_path)).pods] == (["p-1"] if online else [])


def test_step_from_jittered_samples_and_compressed_or_parquet_tables(tmp_path):
    """Samples 10 s apart with a few ms of jitter: a 10-s grid, each on its nearest step."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = T0 + 7
    usage = [{"ts": base + k * 10_000 + (3 if k % 2 else -4), "node": "n1", "cpu_milli": 100 * k, "memory_bytes": GIB}
             for k in range(6)]  # fmt: skip
    write_table(tmp_path, NODES, [node("n1")])
    write_table(tmp_path, NODE_USAGE, usage, suffix=".csv.gz")
    pods = [pod(u["ts"], "n1", "web-1", 10 * k, GIB // 2) for k, u in enumerate(usage)]
    pq.write_table(pa.Table.from_pylist([{**p, "priority": 9500} for p in pods]), tmp_path / "pod_usage.parquet")
    prep = load(tmp_path)
    assert (prep.step_ms, prep.origin_ms, prep.length) == (10_000, T0, 6)
    cluster = SimCluster(spec_of(tmp_path))
    web = cluster.state.pods["shop/web-1"]
    assert [cluster.pod_usage(web, T0 + k * 10_000).cpu_milli for k in range(6)] == [0, 10, 20, 30, 40, 50]
    assert [cluster.node_usage("n1", T0 + k * 10_000).cpu_milli for k in range(6)] == [0, 100, 200, 300, 400, 500]


def test_a_recreated_pod_with_a_new_uid_runs_as_a_second_pod(tmp_path):
    write_table(tmp_path, NODES, [node("n1"), node("n2")])
    write_table(tmp_path, NODE_USAGE, [{"ts": T0 + k * MIN, "node": n, "cpu_milli": 900, "memory_bytes": GIB}
                                       for k in range(4) for n in ("n1", "n2")])  # fmt: skip
    write_table(tmp_path, POD_USAGE, [pod(T0, "n1", "db-0", 300, GIB // 2, uid="a"),
                                      pod(T0 + 2 * MIN, "n2", "db-0", 400, GIB // 2, uid="b")])  # fmt: skip
    g = build(spec_of(tmp_path))
    assert [(p.name, p.uid, p.node_name) for p in g.pods] == [("db-0", "a", "n1"), ("db-0-1", "b", "n2")]
    assert any("run as <name>-<n>" in a for a in g.assumptions)


# (table, the rows written (None: a good default), columns (None: all), the message expected)
GOOD_NODES = [node("n1")]
GOOD_USAGE = [{"ts": T0, "node": "n1", "cpu_milli": 1, "memory_bytes": 1},
              {"ts": T0 + MIN, "node": "n1", "cpu_milli": 1, "memory_bytes": 1}]  # fmt: skip
GOOD_PODS = [pod(T0, "n1", "web-1", 10, 10)]
BAD = [
    ("no_nodes", NODES, [], None, "nodes.csv: no nodes"),
    ("unknown_column", NODES, GOOD_NODES, (*COLUMNS[NODES], "zone"),
     "nodes.csv: unknown column 'zone' (the columns of nodes are node, capacity_cpu_milli"),
    ("missing_column", NODE_USAGE, GOOD_USAGE, ("ts", "node", "cpu_milli"), "node_usage.csv: column 'memory_bytes' is missing"),
    ("fractional_cpu", NODE_USAGE, [{**GOOD_USAGE[0], "cpu_milli": "12.5"}, GOOD_USAGE[1]], None,
     "node_usage.csv line 2, column cpu_milli: '12.5' is not a whole non-negative number of milli-cores"),
    ("negative_memory", POD_USAGE, [{**GOOD_PODS[0], "memory_bytes": -1}], None,
     "pod_usage.csv line 2, column memory_bytes: '-1' is not a whole non-negative number of bytes"),
    ("bad_time", NODE_USAGE, [{**GOOD_USAGE[0], "ts": "yesterday"}, GOOD_USAGE[1]], None,
     "node_usage.csv line 2, column ts: 'yesterday' is neither epoch milliseconds nor an RFC 3339 time"),
    ("time_without_zone", NODE_USAGE, [{**GOOD_USAGE[0], "ts": "2023-11-14T22:14:00"}, GOOD_USAGE[1]], None,
     "node_usage.csv line 2, column ts: '2023-11-14T22:14:00' has no zone: write Z or an offset such as +02:00"),
    ("unknown_node", NODE_USAGE, [*GOOD_USAGE, {**GOOD_USAGE[0], "node": "n9"}], None,
     "node_usage.csv line 4, column node: 'n9' is not in nodes"),
    ("duplicate_sample", NODE_USAGE, [*GOOD_USAGE, GOOD_USAGE[0]], None,
     "node_usage.csv line 4, column ts: node 'n1' already has a sample at 1700000040000 (node_usage.csv line 2)"),
    ("node_without_usage", NODES, [*GOOD_NODES, node("n2")], None,
     "nodes.csv line 3: node 'n2' has no sample in node_usage.csv"),
    ("allocatable_over_capacity", NODES, [{**GOOD_NODES[0], "allocatable_cpu_milli": 9000}], None,
     "nodes.csv line 2, column allocatable_cpu_milli: 9000 milli-cores is more than the capacity 8000"),
    ("labels_not_json", NODES, [{**GOOD_NODES[0], "labels": "pool=web"}], None,
     "nodes.csv line 2, column labels: 'pool=web' is not a JSON object"),
    ("unknown_class", POD_USAGE, [{**GOOD_PODS[0], "priority_class": "high"}], None,
     ("pod_usage.csv line 2, column priority_class: 'high' is not a Koordinator priority class (koord-prod, "
      "koord-mid, koord-batch, koord-free) or empty")),
    ("unknown_qos", POD_USAGE, [{**GOOD_PODS[0], "qos": "Guaranteed"}], None,
     "pod_usage.csv line 2, column qos: 'Guaranteed' is not a Koordinator QoS class (SYSTEM, LSE, LSR, LS, BE) or empty"),
    ("prod_be", POD_USAGE, [{**GOOD_PODS[0], "qos": "BE"}], None,
     "pod_usage.csv line 2, column qos: priority class koord-prod cannot be combined with QoS class BE"),
    ("pod_moves", POD_USAGE, [GOOD_PODS[0], {**GOOD_PODS[0], "ts": T0 + MIN, "node": "n2"}], None,
     ("pod_usage.csv line 3, column node: pod (uid uid-web-1) shop/web-1 has 'n2' here but 'n1' on pod_usage.csv "
      "line 2 (a pod runs on one node: give each of its incarnations its uid)")),
    ("requests_change", POD_USAGE, [GOOD_PODS[0], {**GOOD_PODS[0], "ts": T0 + MIN, "requests_cpu_milli": 1}], None,
     "pod_usage.csv line 3, column requests_cpu_milli: pod (uid uid-web-1) shop/web-1 has 1 here but 2000 on"),
    ("empty_name", POD_USAGE, [{**GOOD_PODS[0], "name": ""}], None, "pod_usage.csv line 2, column name: is empty"),
    ("short_row", NODE_USAGE, GOOD_USAGE, None, None),  # written by hand below
]


@pytest.mark.parametrize("case, table, rows, columns, message", BAD, ids=[b[0] for b in BAD])
def test_bad_history_is_refused_naming_file_line_and_column(tmp_path, case, table, rows, columns, message):
    good = {NODES: GOOD_NODES, NODE_USAGE: GOOD_USAGE, POD_USAGE: GOOD_PODS}
    for t, default in good.items():
        if t != table:
            write_table(tmp_path, t, default)
    write_table(tmp_path, table, rows, columns)
    if case == "pod_moves":
        write_table(tmp_path, NODES, [node("n1"), node("n2")])
        write_table(tmp_path, NODE_USAGE, [*GOOD_USAGE, *({**u, "node": "n2"} for u in GOOD_USAGE)])
    if case == "short_row":
        with open(tmp_path / "node_usage.csv", "a") as f:
            f.write(f"{T0 + 2 * MIN},n1,5\n")
        message = "node_usage.csv line 4: 3 fields, the header has 4"
    with pytest.raises(HistoryError) as err:
        read_history(tmp_path)
    assert message in str(err.value)


def test_missing_or_doubled_tables_and_many_problems_at_once(tmp_path):
    with pytest.raises(HistoryError, match="not a directory"):
        read_history(tmp_path / "nowhere")
    write_table(tmp_path, NODES, GOOD_NODES)
    write_table(tmp_path, NODES, GOOD_NODES, suffix=".csv.gz")
    with pytest.raises(HistoryError) as err:
        read_history(tmp_path)
    assert err.value.problems == [
        f"{tmp_path}: nodes.csv and nodes.csv.gz both hold nodes: keep one",
        f"{tmp_path}: no node_usage.csv, node_usage.csv.gz or node_usage.parquet",
        f"{tmp_path}: no pod_usage.csv, pod_usage.csv.gz or pod_usage.parquet",
    ]
    (tmp_path / "nodes.csv.gz").unlink()
    write_table(tmp_path, POD_USAGE, GOOD_PODS)
    write_table(tmp_path, NODE_USAGE, [{**GOOD_USAGE[0], "ts": T0 + k, "cpu_milli": "x"} for k in range(30)])
    with pytest.raises(HistoryError) as err:
        read_history(tmp_path)
    assert len(err.value.problems) == 20 and str(err.value).endswith("... and 11 more problem(s)")  # 30 values, then n1 without samples


def test_one_sample_per_node_has_no_step(tmp_path):
    write_table(tmp_path, NODES, GOOD_NODES)
    write_table(tmp_path, NODE_USAGE, GOOD_USAGE[:1])
    write_table(tmp_path, POD_USAGE, [])
    with pytest.raises(HistoryError, match="every node has one sample; a history needs at least two sample times"):
        load(tmp_path)


def test_columns_in_any_order_and_optional_ones_left_out(tmp_path):
    write_table(tmp_path, NODES, GOOD_NODES, ("allocatable_memory_bytes", "node", "capacity_memory_bytes",
                                              "allocatable_cpu_milli", "capacity_cpu_milli"))  # fmt: skip
    write_table(tmp_path, NODE_USAGE, GOOD_USAGE, ("memory_bytes", "cpu_milli", "node", "ts"))
    write_table(tmp_path, POD_USAGE, [pod(T0 + k * MIN, "n1", "web-1", 10 + k, 10, cls="", prio="", qos="") for k in range(2)],
                ("cpu_milli", "name", "namespace", "node", "ts", "requests_cpu_milli", "requests_memory_bytes",
                 "memory_bytes"))  # fmt: skip
    h = read_history(tmp_path)
    (web,) = h.pods
    assert (web.uid, web.owner_kind, web.priority_class, web.priority, web.qos, web.limits.cpu_milli) == ("", "", "", None, "", 0)
    assert (h.nodes["n1"].labels, h.pod_usage[0].cpu) == ({}, [10, 11])
    (pod_record,) = build(spec_of(tmp_path)).pods
    assert (pod_record.name, pod_record.priority_class.value, pod_record.qos.value) == ("web-1", "koord-prod", "LS")


def test_a_history_spec_names_its_directory_and_start(tmp_path):
    with pytest.raises(ValueError, match="the history scenario needs `history` .* and `start_ms` .*history.spec"):
        SimSpec(scenario="history", history=str(tmp_path))
    spec = spec_of(two_nodes(tmp_path))
    assert (spec.history, spec.start_ms, spec.nodes) == (str(tmp_path.resolve()), T0, 2)
    assert SimSpec.model_validate(spec.model_dump()) == spec  # the genesis mutation carries it whole
