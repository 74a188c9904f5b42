"""What the agent reads of the node it runs on: the CPU topology from /sys (NUMA node, socket,
core) and the kubelet CPU manager's checkpoint file."""

from __future__ import annotations

import re
from pathlib import Path

from koordcommon.resources import Resources
from koordcommon.schemas import NUMAZone

from ..hosttopology import read_cpu_topology
from .model import Processor
from .strategies.cpuset import parse_cpuset

_MEM_TOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def read_topology(sys_root: str | Path = "/sys") -> list[Processor]:
    """The logical CPUs (node-wide core ids, see hosttopology) as the QoS strategies take them."""
    return [Processor(c.id, c.core, c.socket, c.node) for c in read_cpu_topology(sys_root).cpus]


def read_numa_zones(sys_root: str | Path = "/sys") -> list[NUMAZone]:
    """The node's NUMA nodes as koordlet reports them in its NodeResourceTopology: zone
    `node-<id>` holding the CPUs of its cpulist and the MemTotal of its meminfo, allocatable
    = capacity. Empty when /sys shows no NUMA node (or one that cannot be read)."""
    zones = []
    for d in sorted((Path(sys_root) / "devices/system/node").glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            cpus = len(parse_cpuset((d / "cpulist").read_text()))
            m = _MEM_TOTAL.search((d / "meminfo").read_text())
        except (OSError, ValueError):
            return []
        if m is None:
            return []
        capacity = Resources(cpus * 1000, int(m.group(1)) * 1024)
        zones.append(NUMAZone(name=f"node-{d.name[4:]}", capacity=capacity, allocatable=capacity))
    return zones


class CheckpointFile:
    """A file read again only when it changed (its mtime and size)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int] | None = None
        self.text: str | None = None

    def read(self) -> str | None:
        try:
            st = self.path.stat()
        except OSError:
            self._seen, self.text = None, None
            return None
        key = (st.st_mtime_ns, st.st_size)
        if key != self._seen:
            try:
                self.text = self.path.read_text()
            except OSError:
                self.text = None
            self._seen = key
        return self.text
