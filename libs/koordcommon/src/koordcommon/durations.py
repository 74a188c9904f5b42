"""Go durations (`metav1.Duration`, `time.ParseDuration`): `300ms`, `1.5h`, `2h45m`, `-1m30s`, `0`.

Koordinator's configuration writes durations this way (a Reservation's `ttl`, a node's
`aggregatedUsage.usageAggregatedDuration`), so they are parsed as Go parses them, to integer
milliseconds (anything below a millisecond truncates toward zero).
"""

from __future__ import annotations

import re
from decimal import Decimal

_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    pass


def parse_duration_ms(text: str) -> int:
    """A Go duration string in milliseconds. Raises DurationError naming what is wrong."""
    if not isinstance(text, str):
        raise DurationError(f"duration {text!r} is not a string")
    s = text.strip()
    sign = 1
    if s[:1] in ("+", "-"):
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    if s == "0":
        return 0
    if not s:
        raise DurationError(f"invalid duration {text!r}")
    total_ns = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _TERM.match(s, pos)
        if m is None:
            missing = "missing unit in" if re.fullmatch(r"[\d.]+", s[pos:]) else "invalid"
            raise DurationError(f"{missing} duration {text!r} (units: ns, us, ms, s, m, h)")
        total_ns += Decimal(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    return sign * int(total_ns // 1_000_000)


__all__ = ["DurationError", "parse_duration_ms"]
