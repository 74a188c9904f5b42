"""The CPU topology of the machine the agent runs on, from sysfs.

Per online logical CPU (`devices/system/cpu/online`): its socket
(`cpuN/topology/physical_package_id`), its core (`core_id`, which Linux numbers within a socket)
and its hyper-thread siblings (`thread_siblings_list`, or `core_cpus_list` on newer kernels); its
NUMA node from `devices/system/node/nodeM/cpulist`. Cores get node-wide ids as lscpu and koordlet
number them: in order of (socket, core_id). A CPU whose topology files are missing (some VMs)
is a core of its own on socket 0; one no NUMA node lists sits on node 0.
"""

from __future__ import annotations

from pathlib import Path

from koordcommon.cpus import CPU, CPUListError, Topology, parse_cpuset


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _cpus(path: Path) -> list[int]:
    text = _read(path)
    try:
        return parse_cpuset(text) if text else []
    except CPUListError:
        return []


def online_cpus(sys_root: Path) -> list[int]:
    base = sys_root / "devices/system/cpu"
    online = _cpus(base / "online")
    if online:
        return online
    return sorted(int(d.name[3:]) for d in base.glob("cpu[0-9]*"))


def read_cpu_topology(sys_root: str | Path = "/sys") -> Topology:
    root = Path(sys_root)
    base = root / "devices/system/cpu"
    node_of: dict[int, int] = {}
    for d in (root / "devices/system/node").glob("node[0-9]*"):
        for cpu in _cpus(d / "cpulist"):
            node_of[cpu] = int(d.name[4:])
    raw: dict[int, tuple[int, int, int]] = {}  # cpu -> (socket, 0 and core_id | 1 and the siblings' first CPU)
    for cpu in online_cpus(root):
        topo = base / f"cpu{cpu}" / "topology"
        socket = _int(topo / "physical_package_id")
        core = _int(topo / "core_id")
        siblings = _cpus(topo / "thread_siblings_list") or _cpus(topo / "core_cpus_list")
        socket = socket if socket is not None and socket >= 0 else 0
        if core is None or core < 0:  # the siblings' first CPU names the core
            raw[cpu] = (socket, 1, min(siblings) if siblings else cpu)
        else:
            raw[cpu] = (socket, 0, core)
    ids = {key: i for i, key in enumerate(sorted(set(raw.values())))}
    return Topology(tuple(CPU(cpu, ids[raw[cpu]], raw[cpu][0], node_of.get(cpu, 0)) for cpu in sorted(raw)))
