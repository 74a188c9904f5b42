"""Where the shared reference data lives: Kubernetes fixtures and the real cluster traces.

`KOORD_SHARED_DIR` wins; otherwise the `shared/` folder beside the repository checkout
(`<repo>/../shared`) or beside the working directory is used.
"""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "libs" / "koordcommon").is_dir() and (parent / "services").is_dir():
            return parent
    return None


def shared_dir() -> Path | None:
    env = os.environ.get("KOORD_SHARED_DIR")
    if env:
        return Path(env)
    candidates = []
    root = repo_root()
    if root is not None:
        candidates.append(root.parent / "shared")
    cwd = Path.cwd().resolve()
    candidates += [cwd.parent / "shared", cwd / "shared"]
    for c in candidates:
        if c.is_dir():
            return c
    return None


def fixtures_dir() -> Path | None:
    shared = shared_dir()
    if shared is not None and (shared / "fixtures" / "k8s").is_dir():
        return shared / "fixtures" / "k8s"
    return None
