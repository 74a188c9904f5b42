"""Kubernetes `metav1.LabelSelector`: parse from JSON and match a label map (one implementation
for profiles, node pools, PodDisruptionBudgets and reservations)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            # Kubernetes: a missing key satisfies NotIn.
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        return all(r.matches(labels) for r in self.requirements)

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.requirements


def parse_selector(obj: Any, where: str = "selector") -> LabelSelector | None:
    """None for a nil selector (callers decide what nil means); SelectorError when malformed."""
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise SelectorError(f"{where}: must be an object with matchLabels/matchExpressions")
    ml = obj.get("matchLabels") or {}
    if not isinstance(ml, Mapping):
        raise SelectorError(f"{where}.matchLabels: must be an object of strings")
    pairs = []
    for k, v in ml.items():
        if not isinstance(v, str):
            raise SelectorError(f"{where}.matchLabels.{k}: must be a string, got {v!r}")
        pairs.append((str(k), v))
    exprs = obj.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list")
    reqs = []
    for i, e in enumerate(exprs):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(e, Mapping) or not isinstance(e.get("key"), str) or not e.get("key"):
            raise SelectorError(f"{at}: needs a non-empty key")
        op = e.get("operator")
        if op not in OPERATORS:
            raise SelectorError(f"{at}.operator: {op!r} is not one of {', '.join(OPERATORS)}")
        values = e.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{at}.values: must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{at}.values: must be non-empty for operator {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{at}.values: must be empty for operator {op}")
        reqs.append(Requirement(e["key"], op, frozenset(values)))
    return LabelSelector(tuple(pairs), tuple(reqs))
