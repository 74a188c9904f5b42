"""Batch fit: a pod asking koordinator.sh/batch-* (or kubernetes.io/batch-*) must fit the node's
batch allocatable minus what the node's pods already requested of it.

The node's batch allocatable is the slo-controller's latest NodeResource when one arrived (it is
fresher than the node status it patches), else the node status. A node with neither has no
batch capacity.
"""

from __future__ import annotations

import numpy as np
from koordcommon import resources as rn
from koordcommon.records import PodRecord, ResourceList
from koordcommon.resources import ZERO, Resources

from .table import INT_INDEX, NodeTable

_BFREE_CPU, _BFREE_MEM = INT_INDEX["bfree_cpu"], INT_INDEX["bfree_mem"]

BATCH_CPU_SHORT = 2
BATCH_MEM_SHORT = 3


def batch_request(requests: ResourceList) -> Resources:
    """Batch cpu (milli-cores) and memory (bytes) of a request list, under either prefix."""
    return rn.batch_of(requests)


def batch_names(pod: PodRecord) -> tuple[str, str]:
    """The batch resource names the pod itself uses (for the failure message)."""
    cpu_name = mem_name = None
    for name in pod.requests():
        suffix = rn.tier_suffix(name)
        if suffix == rn.BATCH_CPU_SUFFIX:
            cpu_name = name
        elif suffix == rn.BATCH_MEMORY_SUFFIX:
            mem_name = name
    return cpu_name or rn.batch_cpu(), mem_name or rn.batch_memory()


def batch_free(allocatable: Resources | None, requested: Resources) -> Resources:
    """What is left for one more batch pod (never below zero)."""
    return ((allocatable or ZERO) - requested).clamp0()


def batch_codes(t: NodeTable, ix: np.ndarray, request: Resources) -> np.ndarray:
    """0 when the pod fits every candidate's batch room, else BATCH_CPU_SHORT / BATCH_MEM_SHORT."""
    short = t.pair("bfree_cpu").take(ix, axis=1) < ((request.cpu_milli,), (request.memory_bytes,))
    # only what the pod asks for is checked; cpu is reported before memory
    short &= ((request.cpu_milli > 0,), (request.memory_bytes > 0,))
    return np.where(short[0], np.int8(BATCH_CPU_SHORT), short[1].view(np.int8) * np.int8(BATCH_MEM_SHORT))


def row_batch_code(ints: list[int], request: Resources) -> int:
    """`batch_codes` for one row, from its values (`NodeTable.row_values`)."""
    if request.cpu_milli > 0 and ints[_BFREE_CPU] < request.cpu_milli:
        return BATCH_CPU_SHORT
    if request.memory_bytes > 0 and ints[_BFREE_MEM] < request.memory_bytes:
        return BATCH_MEM_SHORT
    return 0
