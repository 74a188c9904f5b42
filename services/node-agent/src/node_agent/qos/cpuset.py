"""CPU lists (`0-3,8`) and the topology the cpuset strategies choose from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def parse_cpuset(text: str) -> list[int]:
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"bad cpu range {part!r}")
        out.update(range(a, b + 1))
    return sorted(out)


def format_cpuset(cpus) -> str:
    """Canonical range form: `2-4`, `0,4-5`."""
    cpus = sorted(set(cpus))
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True, order=True)
class Processor:
    cpu: int
    core: int
    socket: int = 0
    node: int = 0


def synthetic_topology(cores: int) -> list[Processor]:
    """One socket and NUMA node, hyper-threads paired as Linux numbers them (cpu i and i + n/2)."""
    half = max(cores // 2, 1)
    return [Processor(cpu=i, core=i % half) for i in range(cores)]


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


def pick_cpus(k: int, processors: list[Processor], num_processors: int) -> list[int]:
    """koordlet's calculateBESuppressCPUSetPolicy: spread over NUMA/socket buckets, hyper-thread pairs first.

    Fewer processors than k yields an empty list (the caller then changes nothing).
    """
    if k <= 0:
        return []
    if len(processors) < k:
        return []
    buckets: dict[int, list[Processor]] = {}
    for p in processors:
        buckets.setdefault((p.node + num_processors) * (p.socket + 1), []).append(p)
    ordered = [sorted(b, key=lambda p: (p.core, p.cpu)) for b in buckets.values()]
    ordered.sort(key=lambda b: (-len(b), b[0].cpu))
    used: set[int] = set()
    result: list[int] = []
    need = k
    i = 0
    n = len(ordered)
    # phase 1: sibling pairs, one pair per bucket per round
    idle_rounds = 0
    while need > 1 and idle_rounds < n:
        b = ordered[i % n]
        added = False
        for j in range(len(b) - 1):
            a, c = b[j], b[j + 1]
            if a.core == c.core and a.cpu not in used and c.cpu not in used:
                used.update((a.cpu, c.cpu))
                result += [a.cpu, c.cpu]
                need -= 2
                added = True
                break
        idle_rounds = 0 if added else idle_rounds + 1
        i += 1
    # phase 2: singles, continuing from the bucket where phase 1 stopped
    idle_rounds = 0
    while need > 0 and idle_rounds < n:
        b = ordered[i % n]
        p = next((p for p in b if p.cpu not in used), None)
        if p is not None:
            used.add(p.cpu)
            result.append(p.cpu)
            need -= 1
            idle_rounds = 0
        else:
            idle_rounds += 1
        i += 1
    return result
