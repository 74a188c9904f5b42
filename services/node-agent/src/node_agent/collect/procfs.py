"""Node CPU and memory from /proc (koordlet util/stat.go, util/meminfo.go).

CPU: the `cpu` line of /proc/stat, user + nice + system + irq + softirq (fields 1, 2, 3,
6, 7; idle, iowait, steal and guest are not usage), in clock ticks. Memory: MemTotal -
MemAvailable (usage without page cache), kB -> bytes.
"""

from __future__ import annotations

import os
from pathlib import Path


class ProcFormatError(ValueError):
    pass


def clock_ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100  # koordlet's default jiffy is 10 ms


def parse_cpu_ticks(stat_text: str) -> int:
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            if len(fields) <= 7:
                raise ProcFormatError(f"/proc/stat cpu line has {len(fields)} fields, need more than 7")
            try:
                return sum(int(fields[i]) for i in (1, 2, 3, 6, 7))
            except ValueError as exc:
                raise ProcFormatError(f"/proc/stat cpu line is not numeric: {exc}") from None
    raise ProcFormatError("/proc/stat has no 'cpu' line")


def parse_meminfo(text: str) -> dict[str, int]:
    """Values in kB as written (`MemTotal:  24683584 kB`)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            try:
                out[name.strip()] = int(parts[0])
            except ValueError:
                continue
    return out


def memory_usage_bytes(meminfo: dict[str, int], with_page_cache: bool = False) -> int:
    try:
        total = meminfo["MemTotal"]
        free = meminfo["MemFree"] if with_page_cache else meminfo["MemAvailable"]
    except KeyError as exc:
        raise ProcFormatError(f"/proc/meminfo lacks {exc.args[0]}") from None
    return max(total - free, 0) * 1024


def memory_total_bytes(meminfo: dict[str, int]) -> int:
    return meminfo.get("MemTotal", 0) * 1024


class ProcReader:
    def __init__(self, proc_root: str | Path = "/proc") -> None:
        self.root = Path(proc_root)
        self.ticks_per_s = clock_ticks_per_s()

    def cpu_ticks(self) -> int:
        return parse_cpu_ticks((self.root / "stat").read_text())

    def meminfo(self) -> dict[str, int]:
        return parse_meminfo((self.root / "meminfo").read_text())

    def cpu_count(self) -> int:
        n = 0
        for line in (self.root / "stat").read_text().splitlines():
            head = line.split(" ", 1)[0]
            if head.startswith("cpu") and head[3:].isdigit():
                n += 1
        return n or (os.cpu_count() or 1)
