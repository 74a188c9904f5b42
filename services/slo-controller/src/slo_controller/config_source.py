"""Config from a file, hot-reloaded: the slo-controller-config ConfigMap and the profile file.

A file is read again when its mtime or size changes (polled: works the same on every
filesystem, including a ConfigMap volume whose symlink is swapped). A file that cannot be
read or parsed is reported and the last good content stays in force.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from .core.config import SHIPPED_CONFIG_DATA, ConfigError
from .core.configmap import unwrap_configmap

log = logging.getLogger("slo_controller.config_source")


class DocumentError(ValueError):
    pass


def load_documents(path: str | Path) -> list[Any]:
    """Every YAML (or JSON) document of the file, empty ones dropped."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise DocumentError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise DocumentError(f"{path} is not valid YAML/JSON: {e}") from None


def load_configmap_data(path: str | Path) -> dict[str, Any]:
    """The data map of the slo-controller-config ConfigMap: a YAML/JSON file holding the
    ConfigMap (or its data map), or a directory as Kubernetes mounts a ConfigMap volume
    (one file per key)."""
    p = Path(path)
    if p.is_dir():
        data: dict[str, Any] = {}
        for f in sorted(p.iterdir()):
            if f.name.startswith(".") or not f.is_file():
                continue  # the volume's ..data / ..<timestamp> bookkeeping entries
            try:
                data[f.name] = f.read_text()
            except OSError as e:
                raise DocumentError(f"cannot read {f}: {e.strerror or e}") from None
        return data
    docs = load_documents(path)
    if len(docs) != 1:
        raise DocumentError(f"{path}: expected one ConfigMap document, found {len(docs)}")
    try:
        return dict(unwrap_configmap(docs[0]))
    except ConfigError as e:
        raise DocumentError(f"{path}: {e}") from None


class FileWatcher:
    """Calls `on_change(content)` with the parsed file whenever it changes."""

    def __init__(
        self,
        path: str | Path,
        on_change: Callable[[Any], Awaitable[Any]],
        loader: Callable[[str | Path], Any] = load_documents,
        poll_s: float = 5.0,
    ) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self.loader = loader
        self.poll_s = poll_s
        self._stamp: tuple | None = None
        self.last_error: str | None = None

    def _current_stamp(self) -> tuple | None:
        try:
            if self.path.is_dir():
                # A ConfigMap volume swaps a symlink: stat every key file through it.
                return tuple(
                    (f.name, st.st_mtime_ns, st.st_size)
                    for f in sorted(self.path.iterdir())
                    if not f.name.startswith(".") and f.is_file()
                    for st in (os.stat(f),)
                )
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    async def check(self) -> bool:
        """Reload when changed; True when new content was handed over."""
        stamp = self._current_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            content = self.loader(self.path)
        except DocumentError as e:
            self.last_error = str(e)
            log.error("config file rejected; the last good content stays", extra={"path": str(self.path),
                                                                                  "error": str(e)})
            return False
        self.last_error = None
        await self.on_change(content)
        return True

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # the watcher outlives one bad reload
                log.exception("config reload failed", extra={"path": str(self.path)})
            await asyncio.sleep(self.poll_s)


def shipped_configmap() -> dict[str, str]:
    """Koordinator's shipped slo-controller-config, used when no file is configured."""
    return dict(SHIPPED_CONFIG_DATA)
