"""Recommender methods behind one interface (`base.Recommender`): VPA's, Autopilot's moving
window and Autopilot's ML ensemble. `METHODS` names them as the settings and the workload
annotation do."""

from __future__ import annotations

from .autopilot_ml import AutopilotML
from .autopilot_window import AutopilotWindow
from .base import Amounts, Recommendation, Recommender, Sample
from .vpa import VPA

METHODS: dict[str, type[Recommender]] = {VPA.name: VPA, AutopilotWindow.name: AutopilotWindow, AutopilotML.name: AutopilotML}

__all__ = ["METHODS", "VPA", "Amounts", "AutopilotML", "AutopilotWindow", "Recommendation", "Recommender", "Sample"]
