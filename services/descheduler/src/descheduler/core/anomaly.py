"""Koordinator's BasicDetector: a node acts only after it stayed abnormal long enough."""

from __future__ import annotations

from dataclasses import dataclass

from .config import AnomalyCondition

OK = "ok"
ANOMALY = "anomaly"


@dataclass
class Detector:
    condition: AnomalyCondition
    state: str = OK
    abnormalities: int = 0
    normalities: int = 0
    since_s: float = 0.0
    touched_s: float = 0.0  # the last abnormal mark: the detector is forgotten detectorCacheTimeout after it

    def mark(self, normal: bool, now_s: float) -> str:
        if self.condition.consecutiveAbnormalities == 1:
            # Koordinator bypasses the detector: every source node is anomalous at once.
            if not normal:
                self.touched_s = now_s
            self.state = OK if normal else ANOMALY
            return self.state
        if self.state == ANOMALY and now_s - self.since_s > self.condition.timeoutSeconds:
            self._set(OK, now_s)
        if normal:
            self.normalities += 1
            self.abnormalities = 0
            if self.state == ANOMALY and self.normalities > self.condition.consecutiveNormalities:
                self._set(OK, now_s)
        else:
            self.touched_s = now_s
            self.abnormalities += 1
            self.normalities = 0
            # Strict comparison, as in Koordinator: the default 5 needs 6 consecutive rounds.
            if self.state == OK and self.abnormalities > self.condition.consecutiveAbnormalities:
                self._set(ANOMALY, now_s)
        return self.state

    def reset(self, now_s: float) -> None:
        self._set(OK, now_s)

    def _set(self, state: str, now_s: float) -> None:
        self.state = state
        self.abnormalities = 0
        self.normalities = 0
        self.since_s = now_s
