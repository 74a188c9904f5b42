"""Why a node offers this much batch: the slo-controller's formula with the values it used.

Every NodeResource the slo-controller publishes carries the inputs of its batch rule
(capacity, safety margin, system usage, node reserved, the HP sums and each HP pod's part, the
policies) and of its write decision (previous values, resourceDiffThreshold, the answer). The
collector keeps them; this module turns one stored report into the terms of

    batch = max(capacity - safetyMargin - max(systemUsed, nodeReserved) - HP, 0)

per resource (the HP and system terms as the report's policy chose them), and a series of
reports into changes with the term that moved most since the previous one. Pure: rows in, plain
dicts out; the REST route and the dashboard's stacked chart read the same dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

RESOURCES = ("cpu", "memory")
UNITS = {"cpu": "milli-cores", "memory": "bytes"}
# The stacked terms, bottom up: capacity = margin + system + HP + batch (+ what a cap or the
# floor at 0 leaves over).
BANDS = ("safetyMargin", "system", "hp", "batch")


def _pair(inputs: Mapping[str, Any], key: str) -> list[int] | None:
    v = inputs.get(key)
    if isinstance(v, list | tuple) and len(v) == 2 and all(isinstance(x, int | float) for x in v):
        return [int(v[0]), int(v[1])]
    return None


def hp_term(batch: Mapping[str, Any], resource: str) -> tuple[str, int | None]:
    """(the HP term's name, its value) for a resource under the report's policy."""
    i = RESOURCES.index(resource)
    policy = batch.get("cpuCalculatePolicy" if resource == "cpu" else "memoryCalculatePolicy") or "usage"
    if resource == "memory" and policy == "request":
        name = "podHPRequest"
    elif policy == "maxUsageRequest":
        name = "podHPMaxUsedRequest"
    else:  # usage; `request` is not a CPU policy and computes by usage
        name = "podHPUsed"
    v = _pair(batch, name)
    return name, None if v is None else v[i]


def system_term(batch: Mapping[str, Any], resource: str) -> tuple[str, int | None]:
    """(the system term's name, its value): max(systemUsed, nodeReserved), or nodeReserved
    alone under the memory `request` policy."""
    i = RESOURCES.index(resource)
    reserved = _pair(batch, "nodeReserved")
    if resource == "memory" and batch.get("memoryCalculatePolicy") == "request":
        return "nodeReserved", None if reserved is None else reserved[i]
    used = _pair(batch, "systemUsed")
    if used is None or reserved is None:
        return "systemUsageOrNodeReserved", None
    return "systemUsageOrNodeReserved", max(used[i], reserved[i])


def breakdown(report: Mapping[str, Any]) -> dict[str, Any]:
    """One stored NodeResource (`ts`, `batch`, `mid`, `degraded`, `reason`, `written`,
    `inputs`, `messages`) as the batch formula per resource with its values."""
    inputs = report.get("inputs") or {}
    batch_in = inputs.get("batch") or {}
    sync = inputs.get("sync") or {}
    out: dict[str, Any] = {
        "ts": report["ts"],
        "degraded": bool(report.get("degraded")),
        "reason": report.get("reason") or "",
        "written": bool(report.get("written")),
        "batch": report.get("batch"),
        "mid": report.get("mid"),
        "messages": list(report.get("messages") or []),
        "decision": sync.get("decision") or report.get("reason") or "",
        "resourceDiffThreshold": sync.get("resourceDiffThreshold"),
        "updateTimeThresholdSeconds": sync.get("updateTimeThresholdSeconds"),
        "previous": sync.get("previous") or {},
        "hpPods": list(batch_in.get("hpPods") or []),
        "resources": {},
    }
    if not batch_in:
        # degraded or disabled: batch is removed, there is no formula to show
        out["explained"] = False
        return out
    out["explained"] = True
    capacity, margin = _pair(batch_in, "capacity"), _pair(batch_in, "safetyMargin")
    published = report.get("batch") or {}
    for i, res in enumerate(RESOURCES):
        sys_name, sys_value = system_term(batch_in, res)
        hp_name, hp_value = hp_term(batch_in, res)
        policy = batch_in.get("cpuCalculatePolicy" if res == "cpu" else "memoryCalculatePolicy") or "usage"
        cap = capacity[i] if capacity else None
        mar = margin[i] if margin else None
        unclamped = None if None in (cap, mar, sys_value, hp_value) else cap - mar - sys_value - hp_value
        value = published.get("cpu_milli" if res == "cpu" else "memory_bytes")
        if value is None and _pair(batch_in, "batch") is not None:
            value = _pair(batch_in, "batch")[i]
        threshold = batch_in.get("cpuReclaimThresholdPercent" if res == "cpu" else "memoryReclaimThresholdPercent")
        cap_pct = batch_in.get("batchCPUThresholdPercent" if res == "cpu" else "batchMemoryThresholdPercent")
        terms = {
            "capacity": cap,
            "safetyMargin": mar,
            sys_name: sys_value,
            hp_name: hp_value,
        }
        out["resources"][res] = {
            "unit": UNITS[res],
            "policy": policy,
            "reclaimThresholdPercent": threshold,
            "batchThresholdPercent": cap_pct,
            "systemUsed": (_pair(batch_in, "systemUsed") or [None, None])[i],
            "nodeReserved": (_pair(batch_in, "nodeReserved") or [None, None])[i],
            "terms": terms,
            "systemTerm": sys_name,
            "hpTerm": hp_name,
            "unclamped": unclamped,
            "batch": value,
            # the stack the dashboard draws: each band's height, capacity = their sum (+ rest)
            "bands": {"safetyMargin": mar, "system": sys_value, "hp": hp_value, "batch": value},
        }
    return out


def _terms_delta(prev: Mapping[str, Any], cur: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each term's change between two breakdowns of one resource, largest first."""
    out = []
    for name, value in cur["terms"].items():
        before = prev["terms"].get(name)
        if value is None or before is None or value == before:
            continue
        out.append({"term": name, "from": before, "to": value, "delta": value - before})
    out.sort(key=lambda d: -abs(d["delta"]))
    return out


def changes(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Breakdowns of reports in time order, each with what moved since the previous one:
    the batch change per resource and the terms behind it, the largest first."""
    out: list[dict[str, Any]] = []
    prev: dict[str, Any] | None = None
    for r in reports:
        b = breakdown(r)
        moved: dict[str, Any] = {}
        if prev is not None:
            for res in RESOURCES:
                cur_r, prev_r = b["resources"].get(res), prev["resources"].get(res)
                if cur_r is None or prev_r is None:
                    continue
                deltas = _terms_delta(prev_r, cur_r)
                db = None if None in (cur_r["batch"], prev_r["batch"]) else cur_r["batch"] - prev_r["batch"]
                moved[res] = {"batch_delta": db, "terms": deltas, "most": deltas[0]["term"] if deltas else None}
            if prev["degraded"] != b["degraded"]:
                moved["degraded"] = {"from": prev["degraded"], "to": b["degraded"]}
        b["moved"] = moved if prev is not None else None
        out.append(b)
        prev = b
    return out
