"""The one place cgroup writes happen: idempotent, confined to the root, each change an Event."""

from __future__ import annotations

import logging

from koordcommon.schemas import Event
from prometheus_client import Counter

from ..collect.cgroups import CgroupPathError
from .files import UnsupportedFile
from .model import CgroupWrite

log = logging.getLogger(__name__)

WRITES = Counter("koord_agent_qos_writes_total", "cgroup writes by outcome", ["strategy", "outcome"])


class Executor:
    def __init__(self, files, node: str, dry_run: bool = False) -> None:
        self.files = files
        self.node = node
        self.dry_run = dry_run
        self.unsupported: set[str] = set()

    def apply(self, writes: list[CgroupWrite], now_ms: int | None = None) -> list[Event]:
        events: list[Event] = []
        refused: list[CgroupWrite] = []
        for w in writes:
            if not self._one(w, events, retry=False):
                refused.append(w)
        for w in refused:  # an ordering the kernel refused (child wider than parent) settles now
            self._one(w, events, retry=True)
        if now_ms is not None:
            for e in events:
                e.ts = now_ms
        return events

    def _one(self, w: CgroupWrite, events: list[Event], retry: bool) -> bool:
        try:
            if self.dry_run:
                current = self.files.read(w.rel, w.resource)
                change = None if current == str(w.value) else (current or "", str(w.value))
            else:
                change = self.files.write(w.rel, w.resource, w.value)
        except CgroupPathError as exc:
            WRITES.labels(w.strategy, "refused").inc()
            log.error("cgroup write outside the root refused", extra={"dir": w.rel, "file": w.resource,
                                                                      "error": str(exc)})
            return True
        except UnsupportedFile:
            WRITES.labels(w.strategy, "unsupported").inc()
            if w.resource not in self.unsupported:
                self.unsupported.add(w.resource)
                log.warning("cgroup file not supported by this kernel; skipped",
                            extra={"file": w.resource, "strategy": w.strategy})
                events.append(Event(kind="qos", node=self.node, action="unsupported", reason=w.resource,
                                    target={"path": w.rel, "file": w.resource}, details={"strategy": w.strategy}))
            return True
        except OSError as exc:
            if not retry:
                return False
            WRITES.labels(w.strategy, "error").inc()
            log.warning("cgroup write failed", extra={"dir": w.rel, "file": w.resource, "error": str(exc)})
            return True
        if change is None:
            WRITES.labels(w.strategy, "unchanged").inc()
            return True
        WRITES.labels(w.strategy, "dry_run" if self.dry_run else "written").inc()
        old, new = change
        events.append(
            Event(
                kind="qos",
                node=self.node,
                action=w.strategy,
                reason=f"{w.resource} {old} -> {new}",
                dry_run=self.dry_run,
                target={"path": w.rel, "file": w.resource, "level": w.level},
                details={"old": old, "new": new, "value": w.value},
            )
        )
        return True
