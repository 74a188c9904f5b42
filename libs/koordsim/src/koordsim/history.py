"""A cluster's own history: its nodes, and its online pods replaying their recorded usage.

The history is a directory in the format of `koordcommon.clusterhistory` (docs/history-format.md),
exported by the metrics-collector (`koordctl export-history`) or written from Prometheus. Each
recorded node becomes a node with its capacity, allocatable and labels; each online pod (a
high-priority pod: `clusterhistory.is_online`) runs on its recorded node with its recorded
requests, limits, owner, class and QoS, and uses what it used, sample by sample. What the node
used besides its pods is the node's system usage.

Modelling choices, stated once here and repeated in every report that uses them
(`assumptions`):
* batch and free pods of the history are left out: a replay submits its own batch stream, and
  their recorded usage is counted neither as the pods' nor as the node's;
* samples are placed on a grid of the history's step (the median gap between a node's
  successive samples, in whole seconds), at the nearest grid time; two in one place: the larger;
* a sample missing inside a pod's or node's recorded span is the larger of the samples either
  side when the gap is at most `GAP_HOLD_S`, else the series' peak over the history (unknown
  means more online load, so less batch);
* a pod exists from the start of the replay to its end on its node (its requests count
  throughout) and uses nothing before its first sample and after its last; a node's system
  usage keeps its first value before the node's first sample and its last after its last;
* past the history's end the history starts again (the usage model loops every series).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from koordcommon.clusterhistory import TABLES, History, HistoryError, HistoryPod, Series, is_online, read_history
from koordcommon.records import NodeRecord, PodRecord

from .genesis import Genesis, pod_uid
from .spec import SimSpec
from .usage import TraceSource, UsageModel

HOSTNAME_LABEL = "kubernetes.io/hostname"
GAP_HOLD_S = 15 * 60  # a gap up to this long takes the larger of its neighbours; a longer one, the peak

__all__ = ["GAP_HOLD_S", "HistoryError", "Prepared", "assumptions", "build", "load", "prepare", "spec"]


@dataclass(frozen=True)
class Prepared:
    """A history on its grid: one row per online pod, then one per node (its system usage)."""

    history: History
    origin_ms: int  # grid time 0, a multiple of the step (epoch-aligned)
    step_ms: int
    length: int  # grid times
    cpu: np.ndarray  # rows x length, milli-cores
    mem: np.ndarray  # rows x length, bytes
    online: list[int]  # index into history.pods of the pod on each pod row
    node_rows: dict[str, int]
    batch_pods: int  # pods of the history left out (batch, free)
    filled: dict[str, int]  # grid times filled: "short" (neighbours), "long" (peak), per kind
    renamed: int  # incarnations of a namespace/name given a suffix

    @property
    def end_ms(self) -> int:
        return self.origin_ms + (self.length - 1) * self.step_ms


def _stamp(path: Path) -> tuple:
    out = []
    for table in TABLES:
        for suffix in (".csv", ".csv.gz", ".parquet"):
            f = path / (table + suffix)
            if f.is_file():
                st = f.stat()
                out.append((f.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


def load(path: str | os.PathLike) -> Prepared:
    """The history at `path`, read, checked and put on its grid (kept while its files are unchanged)."""
    p = Path(path).expanduser().resolve()
    return _prepare_cached(str(p), _stamp(p) if p.is_dir() else ())


@functools.lru_cache(maxsize=4)
def _prepare_cached(path: str, _stamp: tuple) -> Prepared:
    return prepare(read_history(path))


def spec(path: str | os.PathLike, **fields) -> SimSpec:
    """The spec of a cluster replaying the history at `path` from its first grid time (other
    SimSpec fields as keywords)."""
    prep = load(path)
    at = {"start_ms": prep.origin_ms, **fields}
    return SimSpec(scenario="history", history=str(Path(path).expanduser().resolve()), nodes=len(prep.history.nodes), **at)


def _step_ms(h: History) -> int:
    gaps = np.concatenate([np.diff(np.asarray(s.ts, dtype=np.int64)) for s in h.node_usage.values()])
    if gaps.size == 0:
        why = "every node has one sample; a history needs at least two sample times of a node to know its step"
        raise HistoryError([f"{h.files['node_usage']}: {why}"])
    return max(1000, round(float(np.median(gaps)) / 1000) * 1000)


def _on_grid(s: Series, origin: int, step: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The series at each grid time (-1 where it has no sample); several in one place: the larger."""
    k = (np.asarray(s.ts, dtype=np.int64) - origin + step // 2) // step
    cpu = np.full(length, -1.0)
    mem = np.full(length, -1.0)
    np.maximum.at(cpu, k, np.asarray(s.cpu, dtype=np.float64))
    np.maximum.at(mem, k, np.asarray(s.mem, dtype=np.float64))
    return cpu, mem


def _fill(cpu: np.ndarray, mem: np.ndarray, step_ms: int, counts: dict[str, int], kind: str) -> tuple[int, int]:
    """Fill the missing grid times inside the series' span in place (the rules of the module
    docstring); returns the span's first and last grid time."""
    known = np.flatnonzero(cpu >= 0)
    first, last = int(known[0]), int(known[-1])
    inside = np.flatnonzero(cpu[first:last] < 0) + first
    if inside.size:
        pos = np.searchsorted(known, inside)
        before, after = known[pos - 1], known[pos]
        short = (after - before - 1) * step_ms <= GAP_HOLD_S * 1000
        for a in (cpu, mem):
            a[inside] = np.where(short, np.maximum(a[before], a[after]), a[known].max())
        counts[f"{kind}_short"] = counts.get(f"{kind}_short", 0) + int(short.sum())
        counts[f"{kind}_long"] = counts.get(f"{kind}_long", 0) + int((~short).sum())
    return first, last


def prepare(h: History) -> Prepared:
    step = _step_ms(h)
    origin = h.start_ms - h.start_ms % step
    ends = [s.ts[-1] for s in h.node_usage.values()] + [s.ts[-1] for s in h.pod_usage if s.ts]
    starts = [s.ts[0] for s in h.pod_usage if s.ts]
    if starts and min(starts) < origin:
        origin = min(starts) - min(starts) % step
    length = int((max(ends) - origin + step // 2) // step) + 1
    counts: dict[str, int] = {}
    online: list[int] = []
    pod_cpu, pod_mem = [], []
    node_pod_cpu = {n: np.zeros(length) for n in h.nodes}
    node_pod_mem = {n: np.zeros(length) for n in h.nodes}
    for i, (pod, s) in enumerate(zip(h.pods, h.pod_usage)):
        cpu, mem = _on_grid(s, origin, step, length)
        first, last = _fill(cpu, mem, step, counts, "pod")
        for a in (cpu, mem):  # not running yet, or any more
            a[:first] = 0
            a[last + 1 :] = 0
        node_pod_cpu[pod.node] += cpu
        node_pod_mem[pod.node] += mem
        if is_online(pod.record()):
            online.append(i)
            pod_cpu.append(cpu)
            pod_mem.append(mem)
    node_rows: dict[str, int] = {}
    sys_cpu, sys_mem = [], []
    for name in h.nodes:
        cpu, mem = _on_grid(h.node_usage[name], origin, step, length)
        first, last = _fill(cpu, mem, step, counts, "node")
        # Koordinator's system usage: what the node used besides its pods, never below zero; held
        # at its first and last value outside the node's recorded span
        for a, pods, out in ((cpu, node_pod_cpu[name], sys_cpu), (mem, node_pod_mem[name], sys_mem)):
            system = np.maximum(a - pods, 0)
            system[:first] = system[first]
            system[last + 1 :] = system[last]
            out.append(system)
        node_rows[name] = len(online) + len(node_rows)
    cpu = np.vstack(pod_cpu + sys_cpu)
    mem = np.vstack(pod_mem + sys_mem)
    keys = [h.pods[i].key for i in online]
    renamed = len(keys) - len(set(keys))
    return Prepared(h, origin, step, length, cpu, mem, online, node_rows, len(h.pods) - len(online), counts, renamed)


def _incarnation_names(pods: list[HistoryPod]) -> list[str]:
    """Each pod's name in the simulated cluster: its own, and for a later pod of the same
    namespace/name (a StatefulSet pod recreated, with a new uid) the name with `-<n>`."""
    seen: dict[str, int] = {}
    out = []
    for p in pods:
        n = seen.get(p.key, 0)
        seen[p.key] = n + 1
        out.append(p.name if n == 0 else f"{p.name}-{n}")
    return out


def build(spec: SimSpec) -> Genesis:
    """The `history` scenario: a cluster replaying its own history."""
    spec = spec.resolved()
    prep = load(spec.history)
    h = prep.history
    start = spec.start_ms or 0
    usage = UsageModel(
        prep.cpu, prep.mem, np.full(prep.cpu.shape[0], prep.length), prep.step_ms // 1000,
        np.zeros((0, 1)), np.zeros((0, 1)), np.zeros(0, dtype=np.int64), prep.step_ms // 1000, spec.batch_utilisation,
    )  # fmt: skip
    # grid time 0 falls on origin_ms: UsageModel indexes a series by absolute simulated time
    offset = int((-(prep.origin_ms // prep.step_ms)) % prep.length)
    nodes: list[NodeRecord] = []
    for name, n in h.nodes.items():
        labels = {HOSTNAME_LABEL: name, **n.labels}
        nodes.append(NodeRecord(
            name=name, labels=labels,
            capacity={"cpu": n.capacity.cpu_milli, "memory": n.capacity.memory_bytes, "pods": spec.node_max_pods},
            allocatable={"cpu": n.allocatable.cpu_milli, "memory": n.allocatable.memory_bytes, "pods": spec.node_max_pods},
            created_ms=start - 86_400_000, resource_version="1",
        ))  # fmt: skip
        usage.node_sources[name] = TraceSource(row=prep.node_rows[name], offset=offset, cpu_scale=1.0, mem_scale=1.0)
    pods: list[PodRecord] = []
    online = [h.pods[i] for i in prep.online]
    for row, (hp, name) in enumerate(zip(online, _incarnation_names(online))):
        uid = hp.uid or pod_uid(spec.seed, hp.namespace, f"{name}@{hp.node}")
        pod = dataclasses.replace(hp.record(), name=name, uid=uid, created_ms=start - 3_600_000,
                                  start_ms=start - 3_600_000, resource_version="1")  # fmt: skip
        pods.append(pod)
        usage.pod_sources[uid] = TraceSource(row=row, offset=offset, cpu_scale=1.0, mem_scale=1.0)
    return Genesis(nodes, pods, {}, usage, False, assumptions(prep))


def _span(ms: int) -> str:
    s = ms // 1000
    if s >= 86_400:
        return f"{s / 86_400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s // 60} min"


def assumptions(prep: Prepared) -> list[str]:
    h = prep.history
    step_s = prep.step_ms // 1000
    out = [
        (f"online load: the cluster's own history ({h.path}): {len(h.nodes)} nodes and {len(prep.online)} online "
         f"pods (prod, mid, or no Koordinator class and not BE) replaying their recorded usage on their recorded "
         f"nodes, {_span(prep.end_ms - prep.origin_ms + prep.step_ms)} at a {step_s}-s step (each sample at the "
         "nearest step of the epoch-aligned grid; two at one step: the larger)"),
        (f"{prep.batch_pods} batch/free pods of the history left out: the replay submits its own batch stream; "
         "their recorded usage counts neither as online nor as the node's"),
        "node system usage: the node's recorded usage less the recorded usage of all its pods, at least 0",
        (f"gaps: a sample missing inside a pod's or node's recorded span takes the larger of the samples either "
         f"side when the gap is at most {GAP_HOLD_S // 60} min, else the series' peak (filled: "
         f"{prep.filled.get('pod_short', 0)} + {prep.filled.get('pod_long', 0)} pod samples, "
         f"{prep.filled.get('node_short', 0)} + {prep.filled.get('node_long', 0)} node samples, short + long); a pod "
         "uses nothing before its first sample and after its last but exists, its requests counted, throughout; a "
         "node's system usage keeps its first value before the node's first sample and its last after its last"),
        "past the history's end the replay starts the history again from its beginning",
    ]
    if not any(n.labels for n in h.nodes.values()):
        out.append("node labels: none in the history (the collector does not record them), so per-pool settings "
                   "(nodeStrategies, node selectors) match no node")  # fmt: skip
    if prep.renamed:
        out.append(f"{prep.renamed} later pod(s) of a namespace/name already seen (recreated with a new uid) run "
                   "as <name>-<n>")  # fmt: skip
    return out
