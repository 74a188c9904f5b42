"""`koordctl explain recommendation`: a workload's recommendation as text, each container's
target with the figures its method made it of. Pure: the recommender's answer in, lines out.

The recommender names the method behind each target and what it was made of
(`method.explanation`, one shape per method): VPA's histogram percentiles and safety margin,
the moving window's statistic, margin and rise headroom, the ML ensemble's models with their
limits and decayed costs. Each shape is spelt out as the sum it is; a shape this module does
not know (a method added later) is still shown, as its figures one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .explain_render import amount
from .render import method_cell

RESOURCES = ("cpu", "memory")


def qty(value: float | None, resource: str) -> str:
    """An explanation's figure (CPU in cores, memory in bytes) in koordctl's units."""
    if value is None:
        return "none yet"
    return amount(value * 1000 if resource == "cpu" else value, resource)


def span(seconds: float | None) -> str:
    """A half-life or window as people say it: 30 min, 12 h, 2 d."""
    if seconds is None:
        return "?"
    s = float(seconds)
    if s >= 172800 and s % 86400 == 0:
        return f"{s / 86400:g} d"
    if s >= 3600 and s % 3600 == 0:
        return f"{s / 3600:g} h"
    if s >= 60 and s % 60 == 0:
        return f"{s / 60:g} min"
    return f"{s:g} s"


def pct(fraction: float | None) -> str:
    return "?" if fraction is None else f"{fraction * 100:g} %"


def nth(p: float | None) -> str:
    """0.95 -> 'p95', 0.995 -> 'p99.5'."""
    return "p?" if p is None else f"p{p * 100:g}"


def _figure(r: Mapping[str, Any] | None, resource: str) -> float | None:
    """A target's amount in the explanation's units (cores, bytes)."""
    if not r:
        return None
    if resource == "cpu":
        return None if r.get("cpu_milli") is None else r["cpu_milli"] / 1000
    return r.get("memory_bytes")


# ----------------------------------------------------------------------------- each method's shape


def vpa_lines(x: Mapping[str, Any], target: Mapping[str, Any] | None) -> list[str]:
    """VPA: the target is the histogram's percentile plus the safety margin, each truncated (to
    milli-cores, to bytes), so it is shown as the recommender gave it."""
    margin = x.get("safety_margin", 0.0)
    out = []
    for res, what in (("cpu", "CPU usage"), ("memory", "daily memory peaks")):
        p, at = x.get(f"target_{res}_percentile"), x.get(f"{res}_at_percentile")
        out.append(f"  {res}: {nth(p)} of the {what} histogram (weights halve every {span(x.get(f'{res}_half_life_s'))})"
                   f" = {qty(at, res)}; + safety margin {pct(margin)}: target {qty(_figure(target, res), res)}"
                   + _floored(None if at is None else at * (1 + margin), target, res))  # fmt: skip
    return out


def window_lines(res: str, x: Mapping[str, Any], target: Mapping[str, Any] | None) -> str:
    stat, value = x.get("statistic"), x.get("statistic_value")
    if stat == "max":
        what = f"the highest peak of the last {x.get('max_windows')} windows of {span(x.get('window_s'))}"
    elif stat == "percentile":
        what = f"{nth(x.get('percentile'))} of the usage histogram (weights halve every {span(x.get('half_life_s'))})"
    else:
        what = f"the decayed average (weights halve every {span(x.get('half_life_s'))})"
    margin = x.get("margin", 0.0)
    line = f"  {res}: {what} = {qty(value, res)}; + margin {pct(margin)}"
    total = None if value is None else value * (1 + margin)
    if x.get("rise_headroom"):
        rise = x.get("largest_rise")
        line += f" + {x['rise_headroom']:g} x the largest rise between windows ({qty(rise, res)})"
        total = None if total is None or rise is None else total + x["rise_headroom"] * rise
    limit = x.get("limit")
    line += f" = limit {qty(limit, res)}"
    if limit is not None and total is not None and limit > total * (1 + 1e-6) + 1e-9:
        line += (f" (held above {qty(total, res)} while a drop takes effect, halving every "
                 f"{span(x.get('fall_half_life_s'))})")  # fmt: skip
    return line + _floored(limit, target, res)


def ensemble_lines(res: str, x: Mapping[str, Any], target: Mapping[str, Any] | None) -> list[str]:
    models: Sequence[Mapping[str, Any]] = x.get("models") or []
    chosen = x.get("chosen_model")
    if chosen is None or not 0 <= chosen < len(models):
        return [f"  {res}: no model has chosen a limit yet (no samples scored)"]
    m = models[chosen]
    costs = [(mm.get("decayed_cost"), i) for i, mm in enumerate(models) if mm.get("decayed_cost") is not None]
    runner = min(((c, i) for c, i in costs if i != chosen), default=None)
    line = (f"  {res}: model {chosen + 1} of {len(models)} (half-life {span(m.get('half_life_s'))}, margin "
            f"{pct(m.get('margin'))}): limit {qty(x.get('limit'), res)}, decayed cost {_cost(m.get('decayed_cost'))}")
    if runner is not None:
        line += f"; next: model {runner[1] + 1}, {_cost(runner[0])}"
    w = x.get("weights") or {}
    out = [line + _floored(x.get("limit"), target, res)]
    out.append(f"    chosen by the least decayed cost (x {w.get('cost_decay', '?')} per decision) of overrun x "
               f"{w.get('w_over', '?')} + underrun x {w.get('w_under', '?')} ({_underrun(x.get('underrun'), res)}), plus "
               f"{w.get('w_limit_change', '?')} to move the limit and {w.get('w_model_change', '?')} to switch model")
    cells = [f"{'*' if i == chosen else ' '}{i + 1}: {span(mm.get('half_life_s'))}/{pct(mm.get('margin'))} "
             f"{qty(mm.get('limit'), res)} ({_cost(mm.get('decayed_cost'))})" for i, mm in enumerate(models)]
    out += ["    models (half-life/margin, limit, decayed cost): " + "; ".join(cells[:4])]
    out += ["      " + "; ".join(cells[i : i + 4]) for i in range(4, len(cells), 4)]
    return out


def _underrun(text: str | None, res: str) -> str:
    """How the ensemble counts underrun: 'share of the limit', or 'in units of U' (U in cores or
    bytes, shown in koordctl's units)."""
    head = "in units of "
    if text and text.startswith(head):
        try:
            return head + qty(float(text[len(head):]), res)
        except ValueError:
            pass
    return text or "?"


def _cost(c: float | None) -> str:
    return "-" if c is None else f"{c:.4g}"


def _floored(made: float | None, target: Mapping[str, Any] | None, res: str) -> str:
    """Where the method's figure is below the target, the target is the per-pod minimum."""
    t = _figure(target, res)
    if made is None or t is None:
        return ""
    # the target is truncated to milli-cores and bytes: only a clear step up is the minimum's
    step = 0.001 if res == "cpu" else 1.0
    return f" (the method's {qty(made, res)} is below the minimum: target {qty(t, res)})" if t > made + step else ""


def generic_lines(x: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """A shape this module does not know: its figures one by one."""
    out = []
    for k, v in x.items():
        if isinstance(v, Mapping):
            out.append(f"{indent}{k}:")
            out += generic_lines(v, indent + "  ")
        else:
            out.append(f"{indent}{k}: {v}")
    return out


def explanation_lines(x: Mapping[str, Any] | None, target: Mapping[str, Any] | None) -> list[str]:
    """What the target was made of, by the shape of the method's explanation."""
    if not x:
        return ["  no explanation given (a recommender older than this koordctl, or no samples yet)"]
    x = dict(x)
    minimums = x.pop("minimums", None)
    if "target_cpu_percentile" in x:
        out = vpa_lines(x, target)
    elif all(isinstance(x.get(r), Mapping) for r in RESOURCES):
        out = []
        for r in RESOURCES:
            part = x[r]
            if "statistic" in part:
                out.append(window_lines(r, part, target))
            elif "models" in part:
                out += ensemble_lines(r, part, target)
            else:
                out += [f"  {r}:"] + generic_lines(part, "    ")
    else:
        out = generic_lines(x)
    if minimums:
        out.append(f"  minimums: no target below this container's share of the per-pod minimums, "
                   f"{amount(minimums.get('cpu_milli'), 'cpu')} and {amount(minimums.get('memory_bytes'), 'memory')}")
    return out


# ----------------------------------------------------------------------------- the report


def _res(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "-"
    return f"{amount(r.get('cpu_milli'), 'cpu')}, {amount(r.get('memory_bytes'), 'memory')}"


def container_lines(c: Mapping[str, Any]) -> list[str]:
    rec = c.get("recommendation") or {}
    method = c.get("method") or {}
    target = rec.get("target")
    head = f"container {c.get('container')}: method {method_cell(method)}"
    lines = [head, (f"  target {_res(target)}; requests now {_res(c.get('current_requests'))}; bounds "
                   f"{_res(rec.get('lower_bound'))} to {_res(rec.get('upper_bound'))}")]  # fmt: skip
    conf = rec.get("confidence")
    lines.append(f"  {c.get('samples', '?')} samples, confidence {conf if conf is not None else '?'}"
                 + (" (provisional: under a day of history)" if c.get("provisional") else ""))  # fmt: skip
    if method.get("configured") and method.get("used") and method["configured"] != method["used"]:
        lines.append(f"  {method['configured']} has no samples of its own yet: the target is {method['used']}'s")
    return lines + explanation_lines(method.get("explanation"), target)


def recommendation_report(data: Mapping[str, Any], container: str | None = None) -> str:
    containers = [c for c in data.get("containers") or [] if container is None or c.get("container") == container]
    out = [(f"workload {data.get('namespace')}/{data.get('kind')}/{data.get('name')}: "
           f"{len(containers)} container(s)"), ""]  # fmt: skip
    for c in containers:
        out += container_lines(c) + [""]
    return "\n".join(out).rstrip() + "\n"
