"""Recommender methods behind one interface (`base.Recommender`): VPA's, Autopilot's moving
window (with its defaults, and the preset the evaluation found best for memory that climbs in
steps) and Autopilot's ML ensemble (underrun as a share of the limit, or in resource units). `METHODS` names them as the settings and the workload
annotation do."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from koordcommon.suggest import closest

from . import autopilot_ml as ml
from . import autopilot_window as mw
from .autopilot_ml import AutopilotML, AutopilotMLUnits
from .autopilot_window import AutopilotWindow, AutopilotWindowRise
from .base import Amounts, Recommendation, Recommender, Sample
from .vpa import VPA

METHODS: dict[str, type[Recommender]] = {
    m.name: m for m in (VPA, AutopilotWindow, AutopilotWindowRise, AutopilotML, AutopilotMLUnits)
}

# Fields a deployment may not change: they follow from the resource (memory takes one peak per
# window, CPU every sample) and from the 5-minute aggregation the methods are defined on.
_FIXED = ("peaks_only", "window_s")


def overridden(defaults: Any, overrides: Mapping[str, Any], where: str) -> Any:
    """The defaults with `overrides` applied; an unknown or fixed field, or a value the settings
    class refuses, is an error that names it (`where` says which setting)."""
    known = [f.name for f in dataclasses.fields(defaults) if f.name not in _FIXED]
    changes = {}
    for key, value in overrides.items():
        if key not in known:
            near = closest(key, known)
            hint = f" (did you mean {near}?)" if near else f" (one of {', '.join(known)})"
            raise ValueError(f"{where}: unknown field {key!r}{hint}")
        # JSON and YAML give lists where the settings hold tuples (the ensemble's half-lives, margins)
        changes[key] = tuple(value) if isinstance(value, list) else value
    try:
        return dataclasses.replace(defaults, **changes)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def configured_methods(
    window_cpu: Mapping[str, Any] | None = None,
    window_memory: Mapping[str, Any] | None = None,
    ml_cpu: Mapping[str, Any] | None = None,
    ml_memory: Mapping[str, Any] | None = None,
) -> dict[str, Recommender]:
    """The non-VPA methods with each resource's settings over its documented defaults
    (VPA's own knobs are the service's estimator settings; the presets are fixed, the window
    settings tune `autopilot-window`, the ML settings `autopilot-ml`)."""
    return {
        AutopilotWindow.name: AutopilotWindow(
            overridden(mw.CPU_DEFAULTS, window_cpu or {}, "window_cpu"),
            overridden(mw.MEMORY_DEFAULTS, window_memory or {}, "window_memory"),
        ),
        AutopilotWindowRise.name: AutopilotWindowRise(),
        AutopilotML.name: AutopilotML(
            overridden(ml.CPU_DEFAULTS, ml_cpu or {}, "ml_cpu"),
            overridden(ml.MEMORY_DEFAULTS, ml_memory or {}, "ml_memory"),
        ),
        AutopilotMLUnits.name: AutopilotMLUnits(),
    }


__all__ = [
    "METHODS", "VPA", "Amounts", "AutopilotML", "AutopilotMLUnits", "AutopilotWindow", "AutopilotWindowRise",
    "Recommendation", "Recommender", "Sample",
    "configured_methods", "overridden",
]  # fmt: skip
