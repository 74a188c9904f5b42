"""What the agent reads of the node it runs on: the CPU topology from /sys (NUMA node, socket,
core) and the kubelet CPU manager's checkpoint file."""

from __future__ import annotations

from pathlib import Path

from .model import Processor
from .strategies.cpuset import parse_cpuset


def read_topology(sys_root: str | Path = "/sys") -> list[Processor]:
    base = Path(sys_root) / "devices/system/cpu"
    node_of: dict[int, int] = {}
    for node_dir in sorted((Path(sys_root) / "devices/system/node").glob("node[0-9]*")):
        try:
            for cpu in parse_cpuset((node_dir / "cpulist").read_text()):
                node_of[cpu] = int(node_dir.name[4:])
        except (OSError, ValueError):
            continue
    out = []
    for d in sorted(base.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        cpu = int(d.name[3:])
        try:
            core = int((d / "topology/core_id").read_text())
            socket = int((d / "topology/physical_package_id").read_text())
        except (OSError, ValueError):
            core, socket = cpu, 0
        out.append(Processor(cpu, core, socket, node_of.get(cpu, 0)))
    return out


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
