"""A node name the extender has never heard of (no Node, NodeMetric or NodeResource) fails.

kube-scheduler only sends nodes it knows, so an unknown name means the extender's view lags
(its watch has not caught up) or the name is wrong: passing it would place a pod where none of
the other plugins could judge. A node known from any source but without a NodeMetric passes
here; the load-aware plugin then skips it, as in Koordinator. `fail_unknown_nodes: false`
lets unknown names through unjudged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import ColumnPlugin, Columns, NodeView, PodInfo, Verdict

NAME = "NodeKnown"
UNKNOWN = 1
REASON_UNKNOWN = "node(s) unknown to the extender: no node, NodeMetric or NodeResource seen for it"


class NodeKnown(ColumnPlugin):
    name = NAME
    weight = 0
    COLUMNS = ("known",)

    def __init__(self, fail_unknown_nodes: bool = True) -> None:
        super().__init__()
        self.fail_unknown_nodes = fail_unknown_nodes

    def row_values(self, view: NodeView) -> list[int]:
        return [int(view.known)]

    def explain(self, pod: PodInfo, view: NodeView, now_ms: int) -> dict[str, Any]:
        return {"node": view.record is not None, "node_metric": view.metric is not None,
                "node_resource": view.node_resource is not None, "fail_unknown_nodes": self.fail_unknown_nodes}  # fmt: skip

    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        """Rows < 0 are names the extender has no row for at all."""
        if not self.fail_unknown_nodes:
            return Verdict.passing(len(rows))
        c: Columns = store if store is not None else self.columns
        exists = rows >= 0
        known = c.take("known", np.where(exists, rows, 0)).astype(bool) & exists
        return Verdict(np.where(known, 0, UNKNOWN).astype(np.int16), {UNKNOWN: REASON_UNKNOWN})
