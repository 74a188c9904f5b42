"""The CPU topology from sysfs: fake trees laid out as Linux lays them out, and this machine's own."""

import os
from pathlib import Path

from koordcommon.cpus import CPU, parse_cpuset
from node_agent.hosttopology import read_cpu_topology


def fake_sys(root: Path, online: str, cpus: dict[int, tuple[int, int, str]], nodes: dict[int, str]) -> Path:
    """cpus: id -> (physical_package_id, core_id, thread_siblings_list); nodes: id -> cpulist."""
    base = root / "devices/system/cpu"
    base.mkdir(parents=True)
    (base / "online").write_text(online + "\n")
    (base / "possible").write_text(online + "\n")
    for cpu, (package, core, siblings) in cpus.items():
        t = base / f"cpu{cpu}" / "topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{package}\n")
        (t / "core_id").write_text(f"{core}\n")
        (t / "thread_siblings_list").write_text(siblings + "\n")
        (t / "core_cpus_list").write_text(siblings + "\n")
    (base / "cpufreq").mkdir()  # not a CPU
    for node, cpulist in nodes.items():
        d = root / "devices/system/node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpulist + "\n")
    return root


def test_two_sockets_with_hyper_threads_and_a_numa_node_each(tmp_path):
    # 2 sockets x 2 cores x 2 threads, numbered as Linux does on x86: first threads of every core
    # (socket 0: 0-1, socket 1: 2-3), then the second threads (4-5, 6-7). core_id restarts per socket.
    cpus = {0: (0, 0, "0,4"), 1: (0, 1, "1,5"), 2: (1, 0, "2,6"), 3: (1, 1, "3,7"),
            4: (0, 0, "0,4"), 5: (0, 1, "1,5"), 6: (1, 0, "2,6"), 7: (1, 1, "3,7")}  # fmt: skip
    topo = read_cpu_topology(fake_sys(tmp_path, "0-7", cpus, {0: "0-1,4-5", 1: "2-3,6-7"}))
    assert list(topo.cpus) == [CPU(0, 0, 0, 0), CPU(1, 1, 0, 0), CPU(2, 2, 1, 1), CPU(3, 3, 1, 1),
                               CPU(4, 0, 0, 0), CPU(5, 1, 0, 0), CPU(6, 2, 1, 1), CPU(7, 3, 1, 1)]  # fmt: skip
    assert topo.cores == {0: (0, 4), 1: (1, 5), 2: (2, 6), 3: (3, 7)}
    assert (topo.cpus_per_core, topo.cpus_per_node, topo.cpus_per_socket) == (2, 4, 4)


def test_offline_cpus_are_left_out_and_one_socket_holds_two_numa_nodes(tmp_path):
    cpus = {c: (0, c % 4, f"{c % 4},{c % 4 + 4}") for c in range(8)}
    topo = read_cpu_topology(fake_sys(tmp_path, "0-5", cpus, {0: "0-1,4-5", 1: "2-3,6-7"}))
    assert [c.id for c in topo.cpus] == [0, 1, 2, 3, 4, 5]
    assert topo.numa_nodes == {0: (0, 1, 4, 5), 1: (2, 3)}


def test_a_vm_without_topology_files_gives_each_cpu_a_core(tmp_path):
    base = tmp_path / "devices/system/cpu"
    for c in range(3):
        (base / f"cpu{c}").mkdir(parents=True)
    (base / "online").write_text("0-2\n")
    topo = read_cpu_topology(tmp_path)
    assert list(topo.cpus) == [CPU(0, 0), CPU(1, 1), CPU(2, 2)]


def test_this_machine():
    topo = read_cpu_topology("/sys")
    online = parse_cpuset(Path("/sys/devices/system/cpu/online").read_text())
    assert [c.id for c in topo.cpus] == online and len(online) == os.cpu_count()
    for cpu in topo.cpus:  # every CPU shares its core with exactly its hyper-thread siblings
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu.id}/topology/thread_siblings_list")
        if siblings.exists():
            want = [s for s in parse_cpuset(siblings.read_text()) if s in online]
            assert list(topo.cores[cpu.core]) == want
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    if nodes:
        assert len(topo.numa_nodes) == len([n for n in nodes if parse_cpuset((n / "cpulist").read_text())])
