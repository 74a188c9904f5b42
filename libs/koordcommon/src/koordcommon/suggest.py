"""The name a misspelt key most likely meant: every configuration surface names it beside a key
it does not know, so that a typo is refused with its fix rather than ignored."""

from __future__ import annotations

import difflib
from collections.abc import Sequence


def closest(name: object, known: Sequence[str]) -> str | None:
    """The known name nearest to `name`, if one is near (difflib's default cut-off, 0.6)."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return close[0] if close else None


__all__ = ["closest"]
