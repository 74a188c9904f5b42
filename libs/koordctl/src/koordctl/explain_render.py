"""`koordctl explain`: explanations as text. Pure: the services' explain answers in, lines out.

A node: the batch formula of each NodeResource report with its values, the write decision and
what moved most since the previous report. A pod: per candidate node, each extender plugin's
verdict with the numbers behind it and the score breakdown; then the QoS and descheduler
decisions about it with their inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .render import clock

GIB = 1024**3
HP_PODS_SHOWN = 5


def amount(value: float | None, resource: str, signed: bool = False) -> str:
    """Milli-cores as cores, bytes as GiB, without noise digits."""
    if value is None:
        return "?"
    v = value / 1000 if resource == "cpu" else value / GIB
    text = f"{v:+.3f}" if signed else f"{v:.3f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return f"{text} cores" if resource == "cpu" else f"{text}Gi"


# ----------------------------------------------------------------------------- node


def _decision(item: Mapping[str, Any]) -> str:
    decision = item.get("decision") or item.get("reason") or ""
    thr = item.get("resourceDiffThreshold")
    if decision.startswith("diff:"):
        name = decision[5:]
        before = (item.get("previous") or {}).get(name)
        if before is None:
            return f"written: {name} was not set on the node before"
        return (f"written: {name} moved more than resourceDiffThreshold {thr} of its previous value {before}"
                if thr is not None else f"written: {name} moved beyond resourceDiffThreshold")  # fmt: skip
    if decision == "expired":
        return (f"written: the last write was older than updateTimeThresholdSeconds "
                f"{item.get('updateTimeThresholdSeconds', '?')} (or the node was never written)")  # fmt: skip
    if decision == "disabled":
        return "colocation disabled for this node: batch and mid removed"
    return decision or "-"


def resource_line(res: str, r: Mapping[str, Any]) -> list[str]:
    terms = r["terms"]
    sys_name, hp_name = r["systemTerm"], r["hpTerm"]
    head = f"  {res}: policy {r.get('policy')}, reclaim threshold {r.get('reclaimThresholdPercent')} %"
    if r.get("batchThresholdPercent") is not None:
        head += f", batch capped at {r['batchThresholdPercent']} % of capacity"
    formula = (f"    batch {amount(r.get('batch'), res)} = max(capacity {amount(terms.get('capacity'), res)}"
               f" - safetyMargin {amount(terms.get('safetyMargin'), res)}"
               f" - {sys_name} {amount(terms.get(sys_name), res)}"
               f" - {hp_name} {amount(terms.get(hp_name), res)}, 0)")  # fmt: skip
    lines = [head, formula]
    if sys_name != "nodeReserved":
        lines.append(f"      {sys_name} = max(system usage {amount(r.get('systemUsed'), res)}, "
                     f"node reserved {amount(r.get('nodeReserved'), res)})")  # fmt: skip
    unclamped = r.get("unclamped")
    if unclamped is not None and r.get("batch") is not None and unclamped != r["batch"]:
        why = "floored at 0" if unclamped < 0 else "capped by the batch threshold"
        lines.append(f"      the formula gives {amount(unclamped, res)}: {why}")
    return lines


def hp_pod_lines(pods: Sequence[Mapping[str, Any]], limit: int = HP_PODS_SHOWN) -> list[str]:
    if not pods:
        return []
    top = sorted(pods, key=lambda p: -(p.get("used") or [0, 0])[0])[:limit]
    lines = [f"  HP pods ({len(pods)}; the {len(top)} using most CPU), counted by usage or, without a metric, request:"]
    for p in top:
        used = p.get("used") or [None, None]
        lines.append(f"    {p.get('pod')}: {amount(used[0], 'cpu')}, {amount(used[1], 'memory')} "
                     f"(by {p.get('countedBy')})")  # fmt: skip
    return lines


def moved_lines(moved: Mapping[str, Any] | None) -> list[str]:
    if moved is None:
        return ["  first report shown: nothing to compare with"]
    lines = []
    if "degraded" in moved:
        d = moved["degraded"]
        lines.append(f"  degraded: {d['from']} -> {d['to']}")
    for res in ("cpu", "memory"):
        m = moved.get(res)
        if not m:
            continue
        if not m["terms"]:
            lines.append(f"  {res}: no term moved (batch {amount(m['batch_delta'] or 0, res, signed=True)})")
            continue
        top = m["terms"][0]
        others = ", ".join(f"{t['term']} {amount(t['delta'], res, signed=True)}" for t in m["terms"][1:])
        lines.append(f"  {res}: batch {amount(m['batch_delta'], res, signed=True)}; moved most: {top['term']} "
                     f"{amount(top['from'], res)} -> {amount(top['to'], res)} ({amount(top['delta'], res, signed=True)})"
                     + (f"; also {others}" if others else ""))  # fmt: skip
    return lines or ["  nothing moved"]


def node_change(item: Mapping[str, Any]) -> list[str]:
    """One NodeResource report as lines."""
    lines = [f"{clock(item.get('ts'))}  {_decision(item)}"]
    if item.get("degraded"):
        lines.append("  degraded: batch and mid removed (the NodeMetric is missing or older than degradeTimeMinutes)")
    if not item.get("explained"):
        if not item.get("degraded"):
            lines.append("  no inputs stored with this report")
        return lines
    for res in ("cpu", "memory"):
        r = (item.get("resources") or {}).get(res)
        if r:
            lines += resource_line(res, r)
    lines += hp_pod_lines(item.get("hpPods") or [])
    lines.append("  since the previous report:")
    lines += ["  " + line for line in moved_lines(item.get("moved"))]
    return lines


def node_report(data: Mapping[str, Any]) -> str:
    items = data.get("items") or []
    head = f"node {data.get('node')}: {len(items)} batch allocatable report(s) of the slo-controller"
    out = [head, ""]
    for item in items:
        out += node_change(item)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------- pod


def pct(value: Any) -> str:
    return "?" if value is None else f"{value} %"


def plugin_numbers(plugin: str, n: Mapping[str, Any]) -> list[str]:
    """What one plugin compared, as lines (its own fields; unknown plugins as key=value)."""
    if not n:
        return []
    if "note" in n and len(n) <= 3:
        return [n["note"]]
    if plugin == "LoadAwareScheduling":
        lines = []
        m = n.get("metric") or {}
        if m:
            state = "expired" if m.get("expired") else "fresh"
            lines.append(f"NodeMetric {m.get('age_s')} s old ({state}; expires after {m.get('expiration_s')} s)")
        for res in ("cpu", "memory"):
            r = n.get(res)
            if r:
                verdict = "over" if r.get("over") else "within"
                lines.append(f"{res}: estimated used {amount(r['used'], res)} + pod estimate {amount(r['estimate'], res)} "
                             f"= {pct(r['percent'])} of allocatable {amount(r['allocatable'], res)}, "
                             f"{verdict} threshold {pct(r['threshold'])} ({n.get('judged_by')})")  # fmt: skip
        if n.get("pending_estimates"):
            lines.append(f"{n['pending_estimates']} pod(s) counted by their estimate (not yet in the metric)")
        return lines
    if plugin == "BatchMidFit":
        lines = []
        for tier in ("batch", "mid"):
            t = n.get(tier)
            if t:
                lines.append(f"{tier}: allocatable {_res(t['allocatable'])} ({n.get('source')}) - requested "
                             f"{_res(t['requested'])} = free {_res(t['free'])}; the pod asks {_res(t['pod'])}")  # fmt: skip
        return lines
    if plugin == "NodeKnown":
        seen = [what for key, what in (("node", "Node"), ("node_metric", "NodeMetric"), ("node_resource", "NodeResource"))
                if n.get(key)]  # fmt: skip
        return [f"known from: {', '.join(seen)}" if seen else "known from nothing: no Node, NodeMetric or NodeResource"]
    if plugin == "Reservation":
        rs = n.get("reservations") or []
        if not rs:
            return ["no reservation on this node" + (" (the pod requires one)" if n.get("affinity_required") else "")]
        return [f"{r['name']}: {'active' if r['active'] else 'inactive'}, "
                f"{'owned by the pod' if r['owner_match'] else 'held for others'}, holds {_res(r['allocatable'])}"
                for r in rs]  # fmt: skip
    return [", ".join(f"{k}={v}" for k, v in n.items())]


def _res(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "-"
    return f"{amount(r.get('cpu_milli'), 'cpu')} / {amount(r.get('memory_bytes'), 'memory')}"


def node_verdict(d: Mapping[str, Any]) -> list[str]:
    head = f"  {d['node']}{' (where it runs; judged without it)' if d.get('bound') else ''}: "
    head += "passes" if d["passed"] else f"rejected by {d['rejected_by']}: {d['reason']}"
    lines = [head]
    for p in d.get("plugins") or []:
        mark = "pass" if p["passed"] else f"FAIL {p['reason']}"
        lines.append(f"    {p['plugin']}: {mark}")
        lines += [f"      {x}" for x in plugin_numbers(p["plugin"], p.get("numbers") or {})]
    s = d.get("score") or {}
    if d["passed"] and s:
        parts = ", ".join(f"{k} {v} x{(s.get('weights') or {}).get(k, '?')}" for k, v in (s.get("by_plugin") or {}).items())
        lines.append(f"    score {s.get('total')} of 100 ({parts or 'no plugin rated it'}); "
                     f"extender score {s.get('extender')} of 10")  # fmt: skip
    return lines


def extender_lines(x: Mapping[str, Any]) -> list[str]:
    lines = [f"scheduler-extender (judged {clock(x.get('judged_at_ms'))}, as the nodes are now):"]
    d = x.get("decision")
    if d:
        lines.append(f"  last asked: {d['verb']} at {clock(d['ts_ms'])} over {d['candidates']} node(s)"
                     + (f", {d['passed']} passed" if d.get("passed") is not None else ""))  # fmt: skip
    else:
        lines.append(f"  never asked about since the extender started; bound to {x.get('node')}, judged over every node")
    est, batch = x.get("estimate") or {}, x.get("batch_request") or {}
    lines.append(f"  pod estimate {_res(est)}" + (f", batch request {_res(batch)}" if any(batch.values()) else ""))
    lines.append(f"  {x.get('passed')} of {x.get('candidates')} candidate node(s) pass the filter")
    for reason, n in sorted((x.get("rejected") or {}).items(), key=lambda kv: -kv[1]):
        lines.append(f"    {n} x {reason}")
    for d in x.get("nodes") or []:
        lines += node_verdict(d)
    return lines


def _inputs_line(inputs: Mapping[str, Any]) -> list[str]:
    skip = {"victim_order", "released_before"}
    flat = ", ".join(f"{k} {v}" for k, v in inputs.items() if k not in skip)
    lines = [f"      read: {flat}"] if flat else []
    order = inputs.get("victim_order") or []
    if order:
        lines.append("      victim order: " + ", ".join(v.get("pod", "?") for v in order))
    return lines


def decision_lines(service: str, data: Mapping[str, Any]) -> list[str]:
    decisions = data.get("decisions") or []
    lines = [f"{service}: " + ("no decision about this pod" if not decisions else f"{len(decisions)} decision(s)")]
    for d in decisions:
        if "kind" in d and "action" in d:  # a recorded event
            lines.append(f"  {clock(d.get('ts'))} {d['kind']} {d.get('action')} on {d.get('node')}: {d.get('reason')}")
            details = d.get("details") or {}
            lines += _inputs_line(details.get("inputs") or {})
        else:
            where = d.get("source") or d.get("node")
            lines.append(f"  {d.get('kind')} on {where}" + (f" -> {d['target']}" if d.get("target") else "")
                         + f": {d.get('reason')}" + (f" ({d['phase']})" if d.get("phase") else ""))  # fmt: skip
            lines += _inputs_line(d.get("inputs") or {})
    return lines


def pod_report(data: Mapping[str, Any]) -> str:
    out = [f"pod {data.get('pod')}", ""]
    for service, answer in (data.get("services") or {}).items():
        if "error" in answer:
            out += [f"{service}: not asked ({answer['error']})", ""]
        elif service == "scheduler-extender":
            out += extender_lines(answer) + [""]
        else:
            out += decision_lines(service, answer) + [""]
    return "\n".join(out).rstrip() + "\n"
