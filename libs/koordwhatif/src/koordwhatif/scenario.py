"""What a replay plays: which history drives the online load, and the batch demand on top.

* `alibaba2018`: the Alibaba 2018 machines that report over all 8 days, one node each, their
  whole usage as online load (koordsim's `machines` scenario);
* `bitbrains`: Bitbrains VMs packed onto nodes as online pods (koordsim's `vms` scenario);
* `history`: a cluster's own history exported by the metrics-collector (see history.py).

Batch demand is the Alibaba 2017 batch_task stream, its instances packed into pods of up to
4 cores, thinned to the asked demand. Every choice is in the report's assumptions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from koordsim import traces
from koordsim.machines import full_day_machines
from koordsim.spec import SimSpec

# 2018-01-01T00:00:00Z: trace second 0 (the Alibaba 2018 trace's own clock starts at 0)
START_MS = 1_514_764_800_000
BATCH_POD_CPU_MILLI = 4000
MIN_MAX_PENDING, PENDING_PER_NODE, MAX_MAX_PENDING = 200, 20, 2000
MACHINE_MEMORY_GIB = 384  # the 2018 trace normalises memory; 4 GiB per core is assumed


class ScenarioError(ValueError):
    pass


def spec_for(
    trace: str,
    *,
    history: Path | None = None,
    nodes: int = 0,
    seed: int = 0,
    batch_load: float = 0.1,
    online_memory_share: float = 0.5,
) -> tuple[SimSpec, dict[str, Any]]:
    """(the simulated cluster's spec, what the report says about it)."""
    source = traces.trace_source()
    common = {
        "seed": seed,
        "start_ms": START_MS,
        "wall_anchor_ms": START_MS,
        "speed": 0.0,
        "batch_load": batch_load,
        "batch_pod_cpu_milli": BATCH_POD_CPU_MILLI,
    }
    if trace == "alibaba2018":
        machines = full_day_machines(traces.alibaba2018_machine_usage(source))
        if not machines:
            raise ScenarioError(f"no Alibaba 2018 machine covers 8 days in {source.describe()}")
        n = nodes or len(machines)
        spec = SimSpec(scenario="machines", nodes=n, node_cpu_cores=96, node_memory_gib=MACHINE_MEMORY_GIB,
                       online_memory_share=online_memory_share, **common)
        title = f"{n} nodes replaying {len(machines)} Alibaba 2018 machines" + (" (synthetic copies)" if n > len(machines) else "")
    elif trace == "bitbrains":
        n = nodes or 20
        spec = SimSpec(scenario="vms", nodes=n, **common)
        title = f"{n} nodes of Bitbrains VMs"
    elif trace == "history":
        if history is None:
            raise ScenarioError("--trace history needs --history DIR (a cluster history exported by "
                                "`koordctl export-history`, or written as docs/history-format.md says)")
        from koordsim import history as recorded

        try:
            prep = recorded.load(history)
        except recorded.HistoryError as exc:
            raise ScenarioError(f"{history}: the history cannot be replayed:\n{exc}") from None
        n = len(prep.history.nodes)
        if nodes not in (0, n):
            raise ScenarioError(f"{history} records {n} nodes; a history replays its own nodes (--nodes 0)")
        # the replay starts where the history starts, on the history's own clock
        at = {"start_ms": prep.origin_ms, "wall_anchor_ms": prep.origin_ms}
        spec = SimSpec(scenario="history", history=str(Path(history).resolve()), nodes=n, **{**common, **at})
        title = f"{n} nodes of the cluster history in {history}"
    else:
        raise ScenarioError(f"unknown trace {trace!r}: alibaba2018, bitbrains or history")
    # what the batch framework asks the cluster for at once; the rest waits in its own queue
    pending = min(max(MIN_MAX_PENDING, PENDING_PER_NODE * spec.nodes), MAX_MAX_PENDING)
    spec = spec.model_copy(update={"batch_max_pending": pending})
    return spec, {"title": title, "trace": trace, "traces": source.describe(), "spec": spec.model_dump()}
