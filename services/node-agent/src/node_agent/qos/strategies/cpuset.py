"""CPU lists (`0-3,8`) and how the cpuset strategies choose CPUs from a topology."""

from __future__ import annotations

from ..model import Processor


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


def synthetic_topology(cores: int) -> list[Processor]:
    """One socket and NUMA node, hyper-threads paired as Linux numbers them (cpu i and i + n/2)."""
    half = max(cores // 2, 1)
    return [Processor(cpu=i, core=i % half) for i in range(cores)]


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
