"""The node's NUMA zones, read from /sys as koordlet reports them, ride in the NodeMetric (the
slo-controller splits batch resources by zone)."""

from __future__ import annotations

from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, NUMAZone, decode
from node_agent.core.messages import HistoryConfig
from node_agent.core.reporter import ReportConfig, Reporter
from node_agent.qos.topology import read_numa_zones

GI = 1 << 30


def fake_sys(root, nodes):
    for i, (cpulist, mem_kb) in enumerate(nodes):
        d = root / "devices/system/node" / f"node{i}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
        (d / "meminfo").write_text(f"Node {i} MemTotal:       {mem_kb} kB\nNode {i} MemFree:        1024 kB\n")
    return root


def test_zones_hold_the_cpus_and_memory_of_each_numa_node(tmp_path):
    root = fake_sys(tmp_path, [("0-3,8-11", 32 * 1024 * 1024), ("4-7,12-15", 16 * 1024 * 1024)])
    assert read_numa_zones(root) == [
        NUMAZone(name="node-0", capacity=Resources(8000, 32 * GI), allocatable=Resources(8000, 32 * GI)),
        NUMAZone(name="node-1", capacity=Resources(8000, 16 * GI), allocatable=Resources(8000, 16 * GI)),
    ]


def test_no_numa_nodes_or_an_unreadable_one_reports_no_zone(tmp_path):
    assert read_numa_zones(tmp_path) == []
    root = fake_sys(tmp_path / "broken", [("0-3", 1024)])
    (root / "devices/system/node/node0/meminfo").write_text("nothing here\n")
    assert read_numa_zones(root) == []


def test_the_nodemetric_carries_the_zones():
    reporter = Reporter(HistoryConfig(), ReportConfig(nodemetric_interval_s=60.0))
    reporter.set_nodes({"n1": (Resources(16000, 48 * GI), Resources(16000, 48 * GI))})
    zones = [NUMAZone(name="node-0", capacity=Resources(8000, 32 * GI), allocatable=Resources(8000, 32 * GI)),
             NUMAZone(name="node-1", capacity=Resources(8000, 16 * GI), allocatable=Resources(8000, 16 * GI))]
    reporter.set_numa_zones("n1", zones)
    history = reporter.nodes["n1"]
    for t in range(300):
        history.record(t * 1000, (4000.0, float(8 * GI)), {}, {})
    metric = history.node_metric(299_000)
    assert metric is not None and metric.numa_zones == zones
    assert decode(NodeMetric, metric.encode()).numa_zones == zones  # over the bus as well
