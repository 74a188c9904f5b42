"""The what-if report: one table, a recommendation, the assumptions, JSON and two plots.

The recommendation is the configuration that reclaims the most batch CPU (mean allocatable)
among those that offer some (at least 1 % of node CPU), whose settings do not fight each other
(no error from `koordctl check-config`, whose findings the report lists for every configuration)
and whose online risk (node-minutes over the risk reference, and over CPU and memory capacity) is
no worse than the baseline's; a tie goes to fewer evictions. When none qualifies, the report says
so and names the one with the least risk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .checkconfig import ERROR, Finding, check
from .config import from_doc
from .ledger import RISK_THRESHOLD_PCT
from .runner import ConfigRun

COLUMNS = (
    ("config", "config"),
    ("reclaimed CPU % mean / p10 / p50", "reclaimed_cpu"),
    ("reclaimed mem % mean", "reclaimed_mem"),
    ("batch CPU used %", "batch_used"),
    ("batch CPU-h done", "done"),
    ("queue delay p50 / p95", "delay"),
    ("held back by", "held_back"),
    (f"node-min over {RISK_THRESHOLD_PCT:g} % CPU (excess)", "over_thr"),
    ("over capacity node-min (cpu / mem)", "over_cap"),
    ("BE CPU-s suppressed (pod-h held)", "suppressed"),
    ("evictions (qos / desched)", "evictions"),
    ("loops", "loops"),
    ("CPU util % mean / p95 / std", "util"),
)


def _num(x: float, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _duration(s: float) -> str:
    if s is None or math.isnan(s):
        return "-"
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h")


def _held_back(shares: dict[str, float]) -> str:
    """The reason nodes refused batch pods most often, short: `batch-memory 92 %`."""
    if not shares:
        return "-"
    reason, share = next(iter(shares.items()))
    short = reason.replace("Insufficient koordinator.sh/", "").replace("Insufficient ", "")
    return f"{short} {share:.0%}".replace("%", " %")


def row(run: ConfigRun) -> dict[str, str]:
    s = run.summary
    ev = s["evictions"]
    qos = sum(v for k, v in ev.items() if k.startswith("qos:"))
    if s["baseline"]:
        batch = dict.fromkeys(("reclaimed_cpu", "reclaimed_mem", "batch_used", "done", "delay", "held_back",
                               "suppressed", "evictions", "loops"), "-")  # fmt: skip
    else:
        rc, rm = s["reclaimed_cpu_pct"], s["reclaimed_memory_pct"]
        batch = {
            "reclaimed_cpu": f"{_num(rc['mean'])} / {_num(rc['p10'])} / {_num(rc['p50'])}",
            "reclaimed_mem": _num(rm["mean"]),
            "batch_used": _num(s["batch_cpu_used_pct"]),
            "done": _num(s["batch_cpu_hours_completed"], 0),
            "delay": f"{_duration(s['queueing_delay_s']['p50'])} / {_duration(s['queueing_delay_s']['p95'])}",
            "held_back": _held_back(s.get("held_back_by") or {}),
            "suppressed": f"{_num(s['be_cpu_seconds_suppressed'], 0)} ({_num(s.get('batch_pod_hours_held', math.nan), 0)})",
            "evictions": f"{qos} / {ev.get('descheduler', 0)}",
            "loops": str(run.loops),
        }
    risk = s["online_risk"]
    util = s["utilisation_cpu_pct"]
    return {
        "config": run.name,
        **batch,
        "over_thr": f"{_num(risk['node_minutes_over_risk_threshold'], 0)} "
                    f"({_num(risk.get('core_hours_over_risk_threshold', math.nan), 1)} core-h)",
        "over_cap": f"{_num(risk['node_minutes_over_cpu_capacity'], 0)} / {_num(risk['node_minutes_over_memory_capacity'], 0)}",
        "util": f"{_num(util['mean'])} / {_num(util['p95'])} / {_num(util['stddev_across_nodes'])}",
    }


def markdown_table(runs: Sequence[ConfigRun]) -> str:
    head = "| " + " | ".join(h for h, _ in COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [head, sep]
    for r in runs:
        cells = row(r)
        lines.append("| " + " | ".join(cells[k] for _, k in COLUMNS) + " |")
    return "\n".join(lines)


def _risk(run: ConfigRun) -> tuple[float, float, float]:
    r = run.summary["online_risk"]
    return (r["node_minutes_over_risk_threshold"], r["node_minutes_over_cpu_capacity"],
            r["node_minutes_over_memory_capacity"])


# a configuration must offer at least this much batch CPU (mean, % of node capacity) to be
# recommended: offering nothing is always safe and never the answer
MIN_RECLAIMED_PCT = 1.0


def findings(run: ConfigRun) -> list[Finding]:
    """What `koordctl check-config` finds in a replayed configuration (none for the baseline)."""
    return [] if run.summary["baseline"] else check(from_doc(run.config))


def recommend(runs: Sequence[ConfigRun]) -> tuple[ConfigRun | None, str]:
    """(the recommended configuration, why), by the rule in the module doc."""
    base = next((r for r in runs if r.summary["baseline"]), None)

    def reclaimed(r: ConfigRun) -> float:
        return r.summary["reclaimed_cpu_pct"]["mean"] or 0.0

    replayed = [r for r in runs if not r.summary["baseline"]]
    if not replayed:
        return None, "no configuration was replayed"
    offering = [r for r in replayed if reclaimed(r) >= MIN_RECLAIMED_PCT]
    if not offering:
        return None, f"no configuration offers batch capacity (at least {MIN_RECLAIMED_PCT:g} % of node CPU)"
    # settings that fight each other are not recommended, whatever this history made of them
    candidates = [r for r in offering if not any(f.level == ERROR for f in findings(r))]
    if not candidates:
        return None, ("every configuration offering batch has settings that fight each other (koordctl check-config "
                      "errors, listed below the table)")
    set_aside = len(offering) - len(candidates)
    aside = (f"; {set_aside} more offering batch were set aside, their settings fighting each other (check-config "
             "errors, listed below the table)") if set_aside else ""
    if base is None:
        best = max(candidates, key=reclaimed)
        return best, f"no baseline to compare risk with: the one that reclaims the most CPU{aside}"
    limit = _risk(base)

    def evictions(r: ConfigRun) -> int:
        return sum(r.summary["evictions"].values())

    safe = [r for r in candidates if all(a <= b for a, b in zip(_risk(r), limit, strict=True))]
    if safe:
        best = max(safe, key=lambda r: (reclaimed(r), -evictions(r)))
        return best, (
            f"it reclaims the most CPU ({reclaimed(best):.1f} % of node capacity on average as batch allocatable) "
            f"among the {len(safe)} of {len(candidates)} configurations offering batch whose online risk is no "
            f"worse than without colocation ({limit[0]:.0f} node-minutes above {RISK_THRESHOLD_PCT:g} % CPU, "
            f"{limit[1]:.0f} / {limit[2]:.0f} over CPU / memory capacity){aside}"
        )
    best = min(candidates, key=lambda r: (_risk(r), -reclaimed(r)))
    return best, (
        "no configuration offering batch keeps the online risk at the baseline's; this one has the least "
        f"({_risk(best)[0]:.0f} node-minutes above {RISK_THRESHOLD_PCT:g} % CPU against {limit[0]:.0f} without "
        f"colocation) and reclaims {reclaimed(best):.1f} % of node CPU{aside}"
    )


def report_doc(runs: Sequence[ConfigRun], scenario: dict[str, Any]) -> dict[str, Any]:
    best, why = recommend(runs)
    return {
        "scenario": scenario,
        # every run's, once each, in order: the trace's are common to all, a configuration's own
        # (its descheduler round, say) appear once whichever configurations state them
        "assumptions": list(dict.fromkeys(a for r in runs for a in r.assumptions)),
        "runs": [
            {"config": r.config, "summary": r.summary, "hourly": r.hourly, "wall_s": r.wall_s, "loops": r.loops,
             "findings": [f.__dict__ for f in findings(r)]}
            for r in runs
        ],
        "recommended": best.name if best else None,
        "why": why,
    }


def write(runs: Sequence[ConfigRun], scenario: dict[str, Any], out: Path) -> dict[str, Path]:
    """report.json, report.md and the two PNGs into `out`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    doc = report_doc(runs, scenario)
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    paths["json"].write_text(json.dumps(finite(doc), indent=1, allow_nan=False))
    paths["markdown"].write_text(markdown(doc, runs))
    paths.update(plots(runs, doc, out))
    return paths


def finite(x: Any) -> Any:
    """`x` with every NaN or infinite float as null (JSON has no NaN: a figure without data)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


def markdown(doc: dict[str, Any], runs: Sequence[ConfigRun]) -> str:
    lines = [f"# What-if replay: {doc['scenario'].get('title', '')}", ""]
    lines += [markdown_table(runs), ""]
    if doc["recommended"]:
        lines += [f"**Recommended: {doc['recommended']}**: {doc['why']}.", ""]
    lines += fights_section(doc["runs"])
    lines += ["Assumptions:", ""] + [f"- {a}" for a in doc["assumptions"]] + [""]
    return "\n".join(lines)


def fights_section(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The check-config findings of each configuration, by their settings (`koordctl check-config`
    says why and the fix); one that every replayed configuration (of several) shares is listed once."""
    named = [(r["config"]["name"], [(f["level"], " vs ".join(f["settings"])) for f in r["findings"]])
             for r in runs if not r["summary"]["baseline"]]
    if not any(found for _, found in named):
        return []
    common = set.intersection(*(set(found) for _, found in named)) if len(named) > 1 else set()
    lines = [("Settings that fight each other (`koordctl check-config` gives the reason and the fix; a "
             "configuration with an error is not recommended):"), ""]
    if common:
        lines.append("- every configuration: " + "; ".join(f"{lvl} {what}" for lvl, what in sorted(common)))
    for name, found in named:
        own = [f"{lvl} {what}" for lvl, what in found if (lvl, what) not in common]
        if own:
            lines.append(f"- {name}: " + "; ".join(own))
    return lines + [""]


def plots(runs: Sequence[ConfigRun], doc: dict[str, Any], out: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths: dict[str, Path] = {}
    base = next((r for r in runs if r.summary["baseline"]), None)
    others = [r for r in runs if not r.summary["baseline"]]
    fig, ax = plt.subplots(figsize=(11, 6))
    top = 1.0
    colours = plt.get_cmap("tab10")
    fights = {d["config"]["name"] for d in doc["runs"] if any(f["level"] == ERROR for f in d["findings"])}
    for i, r in enumerate(others):
        x = r.summary["online_risk"]["node_minutes_over_risk_threshold"]
        offered = r.summary["reclaimed_cpu_pct"]["mean"]
        used = r.summary["batch_cpu_used_pct"]
        top = max(top, offered, used)
        star = r.name == doc["recommended"]
        c = colours(i % 10)
        # offered (filled) and used (hollow) on one vertical: the gap is capacity batch could not use
        ax.plot([x, x], [used, offered], color=c, lw=1, alpha=0.6)
        ax.scatter([x], [offered], s=140 if star else 50, marker="*" if star else "o", color=c, zorder=3,
                   label=f"{i + 1}. {r.name}" + ("  (recommended)" if star else "")
                   + ("  (settings fight: check-config error)" if r.name in fights else ""))
        ax.scatter([x], [used], s=40, marker="o", facecolors="none", edgecolors=[c], zorder=3)
        ax.annotate(str(i + 1), (x, offered), textcoords="offset points", xytext=(6, 3), fontsize=8)
    if base is not None:
        ax.axvline(base.summary["online_risk"]["node_minutes_over_risk_threshold"], color="grey", ls="--",
                   label="online alone (no colocation)")
    ax.set_ylim(0, top * 1.15)
    ax.ticklabel_format(axis="both", useOffset=False, style="plain")
    ax.set_xlabel(f"online risk: node-minutes above {RISK_THRESHOLD_PCT:g} % CPU (left is safer)")
    ax.set_ylabel("% of node CPU: batch allocatable offered (filled), batch used (hollow)")
    ax.set_title("Reclaimed capacity against online risk, per configuration")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    paths["tradeoff_png"] = out / "reclaimed-vs-risk.png"
    fig.savefig(paths["tradeoff_png"], dpi=120)
    plt.close(fig)

    shown = next((r for r in others if r.name == doc["recommended"]), others[0] if others else base)
    if shown is not None and shown.hourly["hours"]:
        h = shown.hourly
        hours = np.arange(len(h["hours"]))
        cap = float(np.sum(h["capacity_cpu"])) / 1000
        online = np.array(h["online_cpu"]).sum(axis=1) / 1000
        batch_used = np.array(h["batch_cpu"]).sum(axis=1) / 1000
        offered = np.array(h["batch_alloc_cpu"]).sum(axis=1) / 1000
        fig, ax = plt.subplots(figsize=(11, 5))
        ax.fill_between(hours, 0, online, color="#4c72b0", alpha=0.85, label="online used")
        ax.fill_between(hours, online, online + batch_used, color="#dd8452", alpha=0.85, label="batch used")
        ax.plot(hours, online + offered, color="#55a868", lw=1.2, label="online used + batch offered")
        ax.axhline(cap, color="black", lw=1, label="capacity")
        ax.set_xlabel("hour of the replay")
        ax.set_ylabel("cores (all nodes)")
        ax.set_ylim(0, cap * 1.05)
        ax.set_title(f"Per hour, {shown.name}")
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths["hourly_png"] = out / "hourly-bands.png"
        fig.savefig(paths["hourly_png"], dpi=120)
        plt.close(fig)
    return paths
