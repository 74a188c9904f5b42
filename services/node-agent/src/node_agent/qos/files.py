"""Cgroup files by their v1 (logical) names, on a real tree (v1 or v2) or in memory (sim).

v2 mapping (koordlet system/cgroup_resource.go): cpu.shares -> cpu.weight
(1 + (shares - 2) x 9999 / 262142), cpu.cfs_quota_us -> first field of cpu.max (-1 = max,
period kept), cpu.cfs_burst_us -> cpu.max.burst, memory.limit_in_bytes -> memory.max
(-1 = max), memory.min/low/high keep their names (MaxInt64 = max). Values are compared in
the file's own text, so a write happens only when the file would change.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..collect.cgroups import V1, CgroupLayout, CgroupPathError, refused
from .model import MAX_INT64

V1_UNLIMITED = 1 << 62  # v1 reports "unlimited" as a page-rounded huge number


class UnsupportedFile(LookupError):
    """The kernel has no such file here (e.g. cpu.bvt_warp_ns outside Anolis)."""


def shares_to_weight(shares: int) -> int:
    return min(max(1 + (shares - 2) * 9999 // 262142, 1), 10000)


def weight_to_shares(weight: int) -> int:
    return (weight - 1) * 262142 // 9999 + 2


def _open(path: Path, flags: int) -> int:
    """O_NOFOLLOW: a file swapped for a symlink after its path was checked is refused (ELOOP),
    never followed out of the root."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refused("file", str(path), f"cgroup file {path} is a symlink") from None
        raise


def read_file(path: Path) -> str:
    fd = _open(path, os.O_RDONLY)
    try:
        with os.fdopen(fd, closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def write_file(path: Path, text: str) -> None:
    """Write an existing cgroup file (no O_CREAT: nothing is created)."""
    fd = _open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class CgroupFiles:
    """Files under one cgroup root, addressed by (relative dir, v1 resource name)."""

    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout

    def _v2_name(self, resource: str) -> str:
        return {
            "cpu.shares": "cpu.weight",
            "cpu.cfs_quota_us": "cpu.max",
            "cpu.cfs_period_us": "cpu.max",
            "cpu.cfs_burst_us": "cpu.max.burst",
            "memory.limit_in_bytes": "memory.max",
            "memory.usage_in_bytes": "memory.current",
        }.get(resource, resource)

    def path(self, rel: str, resource: str) -> Path:
        name = resource if self.layout.version == V1 else self._v2_name(resource)
        return self.layout.file_path(rel, name)  # raises CgroupPathError outside the root

    def read_text(self, rel: str, resource: str) -> str | None:
        try:
            return read_file(self.path(rel, resource)).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except CgroupPathError:
            # Unknown to the strategies, which plan on; the write is refused too. Raising here
            # would stop the QoS of the whole node for one pod whose dir leaves the root.
            return None

    def read(self, rel: str, resource: str) -> str | None:
        """The logical (v1-style) value as text."""
        text = self.read_text(rel, resource)
        if text is None:
            return None
        if self.layout.version == V1:
            if resource == "memory.limit_in_bytes" and text.isdigit() and int(text) >= V1_UNLIMITED:
                return "-1"
            return text
        if resource == "cpu.shares":
            return str(weight_to_shares(int(text)))
        if resource in ("cpu.cfs_quota_us", "cpu.cfs_period_us"):
            fields = text.split()
            v = fields[0] if resource == "cpu.cfs_quota_us" else (fields[1] if len(fields) > 1 else "100000")
            return "-1" if v == "max" else v
        if text == "max":
            return "-1" if resource == "memory.limit_in_bytes" else str(MAX_INT64)
        return text

    def file_text(self, rel: str, resource: str, value: int | str) -> str:
        """What to write for a logical value, given the current file (cpu.max keeps its period)."""
        v = str(value)
        if self.layout.version == V1:
            return v
        if resource == "cpu.shares":
            return str(shares_to_weight(int(value)))
        if resource == "cpu.cfs_quota_us":
            current = self.read_text(rel, resource) or "max 100000"
            period = current.split()[1] if len(current.split()) > 1 else "100000"
            return f"{'max' if int(value) == -1 else v} {period}"
        if resource == "memory.limit_in_bytes" and int(value) == -1:
            return "max"
        if resource in ("memory.min", "memory.low", "memory.high") and int(value) >= MAX_INT64:
            return "max"
        return v

    def write(self, rel: str, resource: str, value: int | str) -> tuple[str, str] | None:
        """(old, new) file text when it changed, None when it already held the value."""
        path = self.path(rel, resource)
        if not path.exists():
            raise UnsupportedFile(f"{path.name} does not exist in {rel}")
        old = read_file(path).strip()
        new = self.file_text(rel, resource, value)
        if old == new or self.read(rel, resource) == str(value):
            return None
        write_file(path, new + "\n")
        return old, new


class MemoryCgroupFiles:
    """The cgroups of a simulated node: every file exists, BE dirs start at the full cpuset."""

    def __init__(self, defaults: dict[str, str] | None = None) -> None:
        self.values: dict[tuple[str, str], str] = {}
        self.defaults = {
            "cpu.cfs_quota_us": "-1",
            "cpu.cfs_burst_us": "0",
            "cpu.shares": "1024",
            "cpu.bvt_warp_ns": "0",
            "memory.limit_in_bytes": "-1",
            "memory.min": "0",
            "memory.low": "0",
            "memory.high": str(MAX_INT64),
            **(defaults or {}),
        }

    def read(self, rel: str, resource: str) -> str | None:
        value = self.values.get((rel, resource))
        return self.defaults.get(resource) if value is None else value

    def write(self, rel: str, resource: str, value: int | str) -> tuple[str, str] | None:
        key = (rel, resource)
        old = self.values.get(key)
        if old is None:
            old = self.defaults.get(resource)
        new = str(value)
        if old == new:
            return None
        self.values[key] = new
        return old or "", new

    def forget_under(self, *rel_prefixes: str) -> None:
        """The kubelet removes a deleted pod's cgroup: its files (and its containers') go with it."""
        if not rel_prefixes:
            return
        for key in [k for k in self.values if k[0].startswith(rel_prefixes)]:
            del self.values[key]
