"""A mapping computed on first read: figures a caller may never look at (a descheduler round's
per-workload counts, a scheduling cycle's reasons and scores by node) cost nothing until read."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


class Deferred(Mapping[str, Any]):
    __slots__ = ("_build", "_data")

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self._build: Callable[[], dict[str, Any]] | None = build
        self._data: dict[str, Any] | None = None

    def _get(self) -> dict[str, Any]:
        if self._data is None:
            self._data = self._build()  # type: ignore[misc]
            self._build = None  # what it closed over can go
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return repr(self._get())
