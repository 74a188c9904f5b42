"""CPU lists (`0-3,8`) and how the cpuset strategies choose CPUs from a topology."""

from __future__ import annotations

import functools
import itertools
import operator

from koordcommon.cpus import format_cpuset, parse_cpuset

from ..model import Processor

__all__ = ["format_cpuset", "parse_cpuset", "pick_cpus", "synthetic_topology"]

_CORE_CPU = operator.attrgetter("core", "cpu")


def synthetic_topology(cores: int) -> list[Processor]:
    """One socket and NUMA node, hyper-threads paired as Linux numbers them (cpu i and i + n/2)."""
    half = max(cores // 2, 1)
    return [Processor(cpu=i, core=i % half) for i in range(cores)]


def pick_cpus(k: int, processors: list[Processor], num_processors: int) -> list[int]:
    """koordlet's calculateBESuppressCPUSetPolicy: spread over NUMA/socket buckets, hyper-thread pairs first.

    Buckets (one per NUMA node and socket) are visited round-robin, largest first; phase 1 takes
    from each in turn its first sibling pair (two CPUs of one core, adjacent in (core, cpu)
    order) with neither CPU taken, phase 2 its first CPU not taken, until k are chosen. Fewer
    processors than k yields an empty list (the caller then changes nothing).
    """
    if k <= 0 or len(processors) < k:
        return []
    return list(_pick(k, tuple(processors), num_processors))


@functools.lru_cache(maxsize=4096)  # a node's topology is fixed and k moves within it
def _pick(k: int, processors: tuple[Processor, ...], num_processors: int) -> tuple[int, ...]:
    buckets: dict[int, list[Processor]] = {}
    for p in processors:
        buckets.setdefault((p.node + num_processors) * (p.socket + 1), []).append(p)
    ordered = [sorted(b, key=_CORE_CPU) for b in buckets.values()]
    ordered.sort(key=lambda b: (-len(b), b[0].cpu))
    n = len(ordered)
    used: set[int] = set()
    result: list[int] = []
    need = k
    i = 0
    # Taken CPUs only accumulate, so a pair or CPU passed over once never qualifies again: each
    # bucket keeps a cursor and every candidate is looked at once.
    pairs = [[(a.cpu, c.cpu) for a, c in itertools.pairwise(b) if a.core == c.core] for b in ordered]
    cursor = [0] * n
    idle_rounds = 0
    while need > 1 and idle_rounds < n:  # phase 1: sibling pairs, one pair per bucket per round
        b, j, cands = i % n, cursor[i % n], pairs[i % n]
        while j < len(cands) and (cands[j][0] in used or cands[j][1] in used):
            j += 1
        cursor[b] = j
        if j < len(cands):
            used.update(cands[j])
            result += cands[j]
            need -= 2
            cursor[b] = j + 1
            idle_rounds = 0
        else:
            idle_rounds += 1
        i += 1
    cursor = [0] * n
    idle_rounds = 0
    while need > 0 and idle_rounds < n:  # phase 2: singles, from the bucket where phase 1 stopped
        b = i % n
        cpus, j = ordered[b], cursor[b]
        while j < len(cpus) and cpus[j].cpu in used:
            j += 1
        cursor[b] = j
        if j < len(cpus):
            used.add(cpus[j].cpu)
            result.append(cpus[j].cpu)
            need -= 1
            cursor[b] = j + 1
            idle_rounds = 0
        else:
            idle_rounds += 1
        i += 1
    return tuple(result)
