"""Human units for tables."""

from __future__ import annotations

GIB = 1024**3


def cores(milli: int | None) -> str:
    if milli is None:
        return "-"
    return f"{milli / 1000:.1f}"


def gib(b: int | None) -> str:
    if b is None:
        return "-"
    return f"{b / GIB:.1f}Gi"
