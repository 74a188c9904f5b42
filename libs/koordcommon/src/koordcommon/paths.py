"""Where the repository checkout is, when the code runs from one (tests that read its files)."""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "libs" / "koordcommon").is_dir() and (parent / "services").is_dir():
            return parent
    return None
