"""Batch and mid fit: a pod asking koordinator.sh/batch-* or mid-* (or kubernetes.io/...) must fit
the node's batch (mid) allocatable minus what the node's pods already requested of it.

kube-scheduler's own resource fit checks the same extended resources against the node status;
this plugin checks them against the slo-controller's latest NodeResource when one arrived,
which is fresher than the node status it patches (a node that lost its batch capacity a moment
ago must not take another batch pod). A degraded NodeResource carries no batch or mid: the node
then offers none. A node with neither has no batch or mid capacity.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from koordcommon import resources as rn
from koordcommon.records import PodRecord
from koordcommon.resources import ZERO, Resources, sum_resources

from ..framework import ColumnPlugin, Columns, NodeView, PodInfo, Verdict, amounts

NAME = "BatchMidFit"
BATCH_CPU_SHORT, BATCH_MEM_SHORT, MID_CPU_SHORT, MID_MEM_SHORT = 1, 2, 3, 4


def tier_allocatable(view: NodeView) -> tuple[Resources, Resources]:
    """(batch, mid) allocatable: the latest NodeResource, else the node status, else none."""
    nr = view.node_resource
    if nr is not None:
        return nr.batch or ZERO, nr.mid or ZERO
    if view.record is not None:
        return view.record.batch_allocatable() or ZERO, view.record.mid_allocatable() or ZERO
    return ZERO, ZERO


def resource_names(pod: PodRecord) -> dict[str, str]:
    """The batch/mid resource names the pod itself asks for (its failure message names them),
    by suffix; the published names where it asks none."""
    names = {
        rn.BATCH_CPU_SUFFIX: rn.batch_cpu(),
        rn.BATCH_MEMORY_SUFFIX: rn.batch_memory(),
        rn.MID_CPU_SUFFIX: rn.mid_cpu(),
        rn.MID_MEMORY_SUFFIX: rn.mid_memory(),
    }
    for name in pod.requests():
        suffix = rn.tier_suffix(name)
        if suffix is not None:
            names[suffix] = name
    return names


class BatchMidFit(ColumnPlugin):
    name = NAME
    weight = 0  # fit, not preference
    COLUMNS = ("batch_free_cpu", "batch_free_mem", "mid_free_cpu", "mid_free_mem")

    def row_values(self, view: NodeView) -> list[int]:
        batch, mid = tier_allocatable(view)
        batch_free = batch - sum_resources(p.batch for p in view.pods)
        mid_free = mid - sum_resources(p.mid for p in view.pods)
        return [batch_free.cpu_milli, batch_free.memory_bytes, mid_free.cpu_milli, mid_free.memory_bytes]

    def explain(self, pod: PodInfo, view: NodeView, now_ms: int) -> dict[str, Any]:
        """Per tier the pod asks for: the node's allocatable (and where it comes from), what its
        pods requested of it, the room left and the pod's request."""
        if pod.batch.is_zero() and pod.mid.is_zero():
            return {"note": "the pod asks no batch or mid resources"}
        batch, mid = tier_allocatable(view)
        source = ("NodeResource" if view.node_resource is not None
                  else "node status" if view.record is not None else "none")  # fmt: skip
        out: dict[str, Any] = {"source": source}
        for tier, alloc, asked, used in (("batch", batch, pod.batch, sum_resources(p.batch for p in view.pods)),
                                         ("mid", mid, pod.mid, sum_resources(p.mid for p in view.pods))):  # fmt: skip
            if asked.is_zero():
                continue
            free = alloc - used
            out[tier] = {"allocatable": amounts(alloc), "requested": amounts(used), "free": amounts(free),
                         "pod": amounts(asked), "fits": free.cpu_milli >= asked.cpu_milli
                         and free.memory_bytes >= asked.memory_bytes}  # fmt: skip
        return out

    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        if pod.batch.is_zero() and pod.mid.is_zero():
            return Verdict.passing(len(rows))
        c: Columns = store if store is not None else self.columns
        codes = np.zeros(len(rows), dtype=np.int16)
        # only what the pod asks for is checked; cpu is reported before memory, batch before mid
        for code, column, want in (
            (MID_MEM_SHORT, "mid_free_mem", pod.mid.memory_bytes),
            (MID_CPU_SHORT, "mid_free_cpu", pod.mid.cpu_milli),
            (BATCH_MEM_SHORT, "batch_free_mem", pod.batch.memory_bytes),
            (BATCH_CPU_SHORT, "batch_free_cpu", pod.batch.cpu_milli),
        ):
            if want > 0:
                codes[c.take(column, rows) < want] = code
        names = resource_names(pod.record)
        reasons = {
            BATCH_CPU_SHORT: f"node(s) Insufficient {names[rn.BATCH_CPU_SUFFIX]}",
            BATCH_MEM_SHORT: f"node(s) Insufficient {names[rn.BATCH_MEMORY_SUFFIX]}",
            MID_CPU_SHORT: f"node(s) Insufficient {names[rn.MID_CPU_SUFFIX]}",
            MID_MEM_SHORT: f"node(s) Insufficient {names[rn.MID_MEMORY_SUFFIX]}",
        }
        return Verdict(codes, reasons)
