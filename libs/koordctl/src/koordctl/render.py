"""Tables for the terminal: human units, one builder per command. Pure: data in, Table out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

GIB = 1024**3


def cores(milli: float | None) -> str:
    if milli is None:
        return "-"
    return f"{milli / 1000:.1f}"


def gib(b: float | None) -> str:
    if b is None:
        return "-"
    return f"{b / GIB:.1f}Gi"


def res(r: Mapping[str, Any] | None) -> str:
    """`{cpu_milli, memory_bytes}` as `2.5c/6.0Gi`; `-` when absent."""
    if not r:
        return "-"
    return f"{cores(r.get('cpu_milli'))}c/{gib(r.get('memory_bytes'))}"


def clock(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(title: str, columns: Iterable[str]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, no_wrap=i == 0)  # names stay whole; long values wrap
    return t


def services_table(health: Mapping[str, Mapping[str, Any]]) -> Table:
    t = _table("services", ("service", "url", "ready", "detail"))
    for name, h in health.items():
        mark = "[green]yes[/]" if h["ready"] else "[red]no[/]"
        t.add_row(name, h["url"], mark, h.get("detail", ""))
    return t


def nodes_table(items: list[Mapping[str, Any]], title: str = "nodes") -> Table:
    t = _table(title, ("node", "pods", "capacity", "usage", "prod used", "batch allocatable", "batch allocated",
                       "mid allocatable", "state"))  # fmt: skip
    for n in items:
        degraded = n.get("degraded")
        state = "-" if degraded is None else "[red]degraded[/]" if degraded else "ok"
        t.add_row(str(n.get("node")), str(n.get("pods", "-")), res(n.get("capacity")), res(n.get("usage")),
                  res(n.get("prod_usage")), res(n.get("batch_allocatable")), res(n.get("batch_allocated")),
                  res(n.get("mid_allocatable")), state)  # fmt: skip
    return t


def batch_totals(items: list[Mapping[str, Any]]) -> dict[str, int]:
    """Cluster batch allocatable and allocated, summed over the nodes that report them."""
    out = {"batch_allocatable_cpu_milli": 0, "batch_allocatable_memory_bytes": 0,
           "batch_allocated_cpu_milli": 0, "batch_allocated_memory_bytes": 0}  # fmt: skip
    for n in items:
        for key in ("batch_allocatable", "batch_allocated"):
            r = n.get(key) or {}
            out[f"{key}_cpu_milli"] += int(r.get("cpu_milli") or 0)
            out[f"{key}_memory_bytes"] += int(r.get("memory_bytes") or 0)
    return out


def pods_table(items: list[Mapping[str, Any]]) -> Table:
    t = _table("pods", ("namespace/name", "node", "band", "qos", "priority", "requests", "batch requests", "usage"))
    for p in items:
        t.add_row(f"{p.get('namespace')}/{p.get('name')}", str(p.get("node") or "-"), str(p.get("band") or "-"),
                  str(p.get("qos") or "-"), str(p.get("priority_class") or p.get("priority") or "-"),
                  res(p.get("requests")), res(p.get("batch_requests")), res(p.get("usage")))  # fmt: skip
    return t


def recommendations_table(items: list[Mapping[str, Any]]) -> Table:
    t = _table("recommendations", ("workload", "container", "method", "current", "target", "confidence", "savings"))
    for w in items:
        for c in w.get("containers", []):
            rec = c.get("recommendation") or {}
            # less than a day of history: shown, marked, and not counted in the savings total
            mark = " [yellow]provisional[/]" if c.get("provisional") else ""
            t.add_row(f"{w.get('namespace')}/{w.get('kind')}/{w.get('name')}", str(c.get("container")),
                      method_cell(c.get("method")), res(c.get("current_requests")), res(rec.get("target")),
                      f"{rec.get('confidence', 0):.2f}{mark}", res(c.get("estimated_savings")))  # fmt: skip
    return t


def method_cell(method: Mapping[str, Any] | None) -> str:
    """The method behind the target; a workload set to another method that has no samples of
    its own yet shows VPA's target, and says so."""
    if not method:
        return "-"
    used, configured = method.get("used", "-"), method.get("configured")
    return used if not configured or configured == used else f"{used} (set: {configured}, no samples of its own yet)"


def provisional_count(items: list[Mapping[str, Any]]) -> int:
    """Containers whose recommendation is provisional (left out of the savings total)."""
    return sum(1 for w in items for c in w.get("containers", []) if c.get("provisional"))


def total_savings(items: list[Mapping[str, Any]]) -> dict[str, int]:
    cpu = sum(int((w.get("estimated_savings") or {}).get("cpu_milli") or 0) for w in items)
    mem = sum(int((w.get("estimated_savings") or {}).get("memory_bytes") or 0) for w in items)
    return {"cpu_milli": cpu, "memory_bytes": mem}


def _target(target: Mapping[str, Any] | None) -> str:
    target = target or {}
    if target.get("name"):
        ns = target.get("namespace")
        return f"{ns}/{target['name']}" if ns else str(target["name"])
    if target.get("path"):
        return f"{target['path']}/{target.get('file', '')}".rstrip("/")
    return "-"


def event_line(e: Mapping[str, Any]) -> str:
    """One event as one line (for --follow)."""
    dry = " (dry run)" if e.get("dry_run") else ""
    return (f"{clock(e.get('ts'))} {e.get('kind')} {e.get('node') or '-'} {e.get('action')} "
            f"{_target(e.get('target'))}{dry}: {e.get('reason') or ''}").rstrip(": ")  # fmt: skip


def events_table(items: list[Mapping[str, Any]]) -> Table:
    t = _table("events", ("time", "kind", "node", "action", "target", "reason", "dry run"))
    for e in items:
        t.add_row(clock(e.get("ts")), str(e.get("kind")), str(e.get("node") or "-"), str(e.get("action")),
                  _target(e.get("target")), str(e.get("reason") or ""), "yes" if e.get("dry_run") else "no")  # fmt: skip
    return t


def profile_summary(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a ClusterColocationProfile an operator scans for."""
    spec = obj.get("spec") or {}

    def selector(s: Mapping[str, Any] | None) -> str:
        if s is None:
            return "-"
        parts = [f"{k}={v}" for k, v in (s.get("matchLabels") or {}).items()]
        parts += [f"{e.get('key')} {e.get('operator')} {','.join(e.get('values') or [])}".strip()
                  for e in s.get("matchExpressions") or []]  # fmt: skip
        return ", ".join(parts) or "(all)"

    return {
        "name": (obj.get("metadata") or {}).get("name"),
        "namespaceSelector": selector(spec.get("namespaceSelector")),
        "selector": selector(spec.get("selector")),
        "qosClass": spec.get("qosClass"),
        "priorityClassName": spec.get("priorityClassName"),
        "koordinatorPriority": spec.get("koordinatorPriority"),
        "schedulerName": spec.get("schedulerName"),
        "probability": spec.get("probability", 100),
    }


def profiles_table(objs: list[Mapping[str, Any]]) -> Table:
    t = _table("cluster colocation profiles", ("name", "namespaces", "pods", "qos", "priority class",
                                                "koord priority", "scheduler", "probability"))  # fmt: skip
    for o in objs:
        s = profile_summary(o)
        t.add_row(*(str("-" if s[k] is None else s[k]) for k in (
            "name", "namespaceSelector", "selector", "qosClass", "priorityClassName", "koordinatorPriority",
            "schedulerName", "probability")))  # fmt: skip
    return t


def size(b: int) -> str:
    return f"{b / 1e6:.1f} MB" if b >= 100_000 else f"{b / 1e3:.0f} kB"


def traces_table(rows: list[Mapping[str, Any]]) -> Table:
    """One row per dataset: what the bundled sample and the full set hold of it."""
    t = _table("trace datasets", ["dataset", "what", "sample", "full set", "used for", "where to get it"])
    for r in rows:
        cells = []
        for where in ("sample", "full"):
            have = r[where]
            cells.append("not set" if have is None else (f"{have['files']} files, {size(have['bytes'])}" if have["files"] else "absent"))
        t.add_row(r["name"], r["what"], *cells, r["used_by"], r["origin"])
    return t
