"""Kubernetes pod cgroups on cgroup v1 and v2, cgroupfs and systemd drivers (koordlet
util/system/cgroup_driver.go, cgroup_parent_utils.go, resourceexecutor/reader.go).

Every path is built from validated ids below a configurable root, so tests run against a
fake tree in a temp dir and nothing an id says can reach outside the root: a pod uid or
container id that is not a plain name (`..`, `/`, NUL, a newline, an absolute path), or a dir or
file that resolves outside the root through a symlink, is refused with CgroupPathError, counted
(`koord_agent_cgroup_refused_total{what}`) and logged once per value.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from koordcommon.model import KubeQoS
from prometheus_client import Counter

log = logging.getLogger(__name__)

REFUSED = Counter("koord_agent_cgroup_refused_total",
                  "Pod uids, container ids, dirs and files refused because they would leave the cgroup root",
                  ["what"])  # fmt: skip

V1 = "v1"
V2 = "v2"
CGROUPFS = "cgroupfs"
SYSTEMD = "systemd"

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,253}")
_FILE = re.compile(r"[a-z][a-z0-9_.]{0,63}")  # cpu.max, memory.limit_in_bytes, cpu.bvt_warp_ns
# container runtime -> systemd scope prefix
_SCOPE_PREFIX = {"docker": "docker-", "containerd": "cri-containerd-", "cri-o": "crio-", "pouch": "pouch-"}
_SCOPE = re.compile(r"^(?:docker|cri-containerd|crio|pouch)-([0-9a-fA-F]+)\.scope$")

# v1 subsystem holding each file; v2 has one unified dir
_SUBSYSTEM = {
    "cpuacct.usage": "cpuacct",
    "cpu.pressure": "cpuacct",  # Anolis kernels expose PSI under cpuacct on v1
    "memory.pressure": "cpuacct",
    "io.pressure": "cpuacct",
}


# (base, rel) -> checked dir: resolving every path on every read costs more than reading the file
_CONFINED: dict[tuple[Path, str], Path] = {}
_CONFINED_MAX = 65536


class CgroupPathError(ValueError):
    """An id or path that would not stay below the cgroup root."""


class CgroupFormatError(ValueError):
    pass


# Refused values already logged: the same pod is seen again every round, the log says it once.
_LOGGED: set[tuple[str, str]] = set()
_LOGGED_MAX = 4096


def refused(what: str, value: object, message: str) -> CgroupPathError:
    """The error for a refused id or path (`what`: pod uid, container id, dir, file), counted
    every time and logged the first time this value is refused."""
    REFUSED.labels(what).inc()
    key = (what, repr(value))
    if key not in _LOGGED:
        if len(_LOGGED) >= _LOGGED_MAX:
            _LOGGED.clear()
        _LOGGED.add(key)
        log.error("cgroup path refused", extra={"what": what, "value": repr(value)[:300], "reason": message})
    return CgroupPathError(message)


def is_id(value: object) -> bool:
    """A plain name fit for one path component (fullmatch: `$` would let a trailing newline through)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None and ".." not in value


def validate_id(value: str, what: str = "id") -> str:
    if not is_id(value):
        raise refused(what, value, f"invalid {what} {value!r} for a cgroup path")
    return value


def subsystem_of(filename: str) -> str:
    if filename in _SUBSYSTEM:
        return _SUBSYSTEM[filename]
    return filename.split(".", 1)[0]  # cpu.*, cpuset.*, memory.*, blkio.*


@dataclass(frozen=True)
class CgroupLayout:
    root: Path
    version: str = V2
    driver: str = SYSTEMD

    @classmethod
    def detect(cls, root: str | Path, version: str = "auto", driver: str = "auto") -> CgroupLayout:
        root = Path(root)
        if version == "auto":
            # a unified hierarchy has cgroup.controllers at its root and no per-subsystem dirs
            v1_dirs = (root / "cpuacct").is_dir() or (root / "cpu").is_dir() or (root / "memory").is_dir()
            version = V2 if (root / "cgroup.controllers").exists() and not v1_dirs else V1
        if driver == "auto":
            base = root if version == V2 else root / "cpu"
            if (base / "kubepods.slice").is_dir():
                driver = SYSTEMD
            elif (base / "kubepods").is_dir():
                driver = CGROUPFS
            else:
                driver = SYSTEMD  # koordlet's fallback
        return cls(root, version, driver)

    # -- relative dirs

    def kubepods_dir(self) -> str:
        return "kubepods.slice" if self.driver == SYSTEMD else "kubepods"

    def qos_dir(self, kube_qos: KubeQoS | str) -> str:
        q = KubeQoS(kube_qos)
        if q is KubeQoS.GUARANTEED:
            return self.kubepods_dir()
        name = "burstable" if q is KubeQoS.BURSTABLE else "besteffort"
        if self.driver == SYSTEMD:
            return f"kubepods.slice/kubepods-{name}.slice"
        return f"kubepods/{name}"

    def pod_dir(self, uid: str, kube_qos: KubeQoS | str) -> str:
        uid = validate_id(uid, "pod uid")
        q = KubeQoS(kube_qos)
        parent = self.qos_dir(q)
        if self.driver == SYSTEMD:
            kind = {KubeQoS.GUARANTEED: "", KubeQoS.BURSTABLE: "burstable-", KubeQoS.BEST_EFFORT: "besteffort-"}[q]
            return f"{parent}/kubepods-{kind}pod{uid.replace('-', '_')}.slice"
        return f"{parent}/pod{uid}"

    def container_dir(self, pod_dir: str, container_id: str) -> str:
        """`containerd://abc` -> `<pod>/abc` (cgroupfs) or `<pod>/cri-containerd-abc.scope` (systemd)."""
        runtime, sep, cid = container_id.partition("://")
        if not sep:
            runtime, cid = "containerd", container_id
        if not is_id(cid):
            raise refused("container id", container_id, f"invalid container id {container_id!r} for a cgroup path")
        if self.driver == SYSTEMD:
            prefix = _SCOPE_PREFIX.get(runtime)
            if prefix is None:
                raise refused("container id", container_id, f"unknown container runtime {runtime!r}")
            return f"{pod_dir}/{prefix}{cid}.scope"
        return f"{pod_dir}/{cid}"

    # -- files

    def dir_path(self, rel: str, subsystem: str = "cpu") -> Path:
        base = self.root if self.version == V2 else self.root / subsystem
        return self._confined(base, rel)

    def file_path(self, rel: str, filename: str) -> Path:
        """The file `filename` of the dir `rel`, itself checked: a file that is a symlink out of
        the root is refused as its dir would be."""
        if not _FILE.fullmatch(filename):
            raise refused("file", filename, f"invalid cgroup file name {filename!r}")
        base = self.root if self.version == V2 else self.root / subsystem_of(filename)
        return self._confined(base, f"{rel}/{filename}", "file")

    def _confined(self, base: Path, rel: str, what: str = "dir") -> Path:
        key = (base, rel)
        hit = _CONFINED.get(key)
        if hit is not None:
            return hit
        parts = [p for p in rel.split("/") if p]
        if any(p in (".", "..") or "\0" in p for p in parts) or rel.startswith("/"):
            raise refused(what, rel, f"cgroup {what} {rel!r} leaves the root")
        path = base.joinpath(*parts)
        root = self.root.resolve()
        try:
            path.resolve().relative_to(root)
        except ValueError:
            raise refused(what, rel, f"cgroup {what} {rel!r} resolves outside {root}") from None
        if path.exists():  # only settled dirs are remembered (a missing one may appear as a symlink)
            if len(_CONFINED) >= _CONFINED_MAX:
                _CONFINED.clear()
            _CONFINED[key] = path
        return path

    def container_dirs(self, pod_rel: str) -> list[tuple[str, str]]:
        """(container id, relative dir) of the container cgroups found under a pod dir."""
        base = self.dir_path(pod_rel, "cpuacct" if self.version == V1 else "cpu")
        out = []
        try:
            entries = sorted(p.name for p in base.iterdir() if p.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        for name in entries:
            if self.driver == SYSTEMD:
                m = _SCOPE.match(name)
                if m:
                    out.append((m.group(1), f"{pod_rel}/{name}"))
            elif _ID.fullmatch(name):
                out.append((name, f"{pod_rel}/{name}"))
        return out


# --------------------------------------------------------------------------- parsing


def parse_flat_keyed(text: str, keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """`key value` lines (memory.stat, cpu.stat); only `keys` when given (the files are long)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and (keys is None or parts[0] in keys):
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


V1_MEMORY_KEYS = (
    "total_cache",
    "total_rss",
    "total_inactive_file",
    "total_active_file",
    "total_inactive_anon",
    "total_active_anon",
    "total_unevictable",
)
V2_MEMORY_KEYS = ("file", "anon", "inactive_file", "active_file", "inactive_anon", "active_anon", "unevictable")


def memory_usage_from_stat(stat: dict[str, int], version: str) -> int:
    """Working set without page cache: inactive_anon + active_anon + unevictable (v1: total_*)."""
    keys = V1_MEMORY_KEYS if version == V1 else V2_MEMORY_KEYS
    missing = [k for k in keys if k not in stat]
    if missing:
        raise CgroupFormatError(f"memory.stat lacks {', '.join(missing)}")
    p = "total_" if version == V1 else ""
    return stat[p + "inactive_anon"] + stat[p + "active_anon"] + stat[p + "unevictable"]


def parse_psi(text: str) -> dict[str, float]:
    """`some avg10=.. avg60=.. avg300=.. total=..` (+ optional `full ...`) -> avg10 values.

    A missing `full` line means the kernel does not report it: full_supported = 0.
    """
    out = {"some_avg10": 0.0, "full_avg10": 0.0, "full_supported": 0.0}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] not in ("some", "full"):
            raise CgroupFormatError(f"unexpected PSI line {line!r}")
        fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        try:
            out[f"{parts[0]}_avg10"] = float(fields["avg10"])
        except (KeyError, ValueError):
            raise CgroupFormatError(f"PSI line without avg10: {line!r}") from None
        if parts[0] == "full":
            out["full_supported"] = 1.0
    return out


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Throttle:
    nr_periods: int
    nr_throttled: int
    throttled_ns: int


_CPU_KEYS = ("usage_usec", "nr_periods", "nr_throttled", "throttled_usec", "throttled_time")


def _throttle(stat: dict[str, int]) -> Throttle | None:
    if "nr_throttled" not in stat:
        return None
    if "throttled_usec" in stat:
        ns = stat["throttled_usec"] * 1000
    else:
        ns = stat.get("throttled_time", 0)  # v1: nanoseconds
    return Throttle(stat.get("nr_periods", 0), stat["nr_throttled"], ns)


class CgroupReader:
    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout
        self._psi: bool | None = None
        self._paths: dict[tuple[str, str], str] = {}

    def _read(self, rel: str, filename: str) -> str:
        key = (rel, filename)
        path = self._paths.get(key)
        if path is None:
            path = str(self.layout.file_path(rel, filename))
            if len(self._paths) >= _CONFINED_MAX:
                self._paths.clear()
            self._paths[key] = path
        with open(path) as f:
            return f.read()

    def cpu_usage_ns(self, rel: str) -> int:
        return self.cpu(rel)[0]

    def cpu(self, rel: str) -> tuple[int, Throttle | None]:
        """(usage ns, throttling) with one read of cpu.stat on v2."""
        if self.layout.version == V1:
            return int(self._read(rel, "cpuacct.usage").strip()), self.throttle(rel)
        stat = parse_flat_keyed(self._read(rel, "cpu.stat"), _CPU_KEYS)
        if "usage_usec" not in stat:
            raise CgroupFormatError("cpu.stat lacks usage_usec")
        return stat["usage_usec"] * 1000, _throttle(stat)

    def memory_bytes(self, rel: str) -> int:
        keys = V1_MEMORY_KEYS if self.layout.version == V1 else V2_MEMORY_KEYS
        return memory_usage_from_stat(parse_flat_keyed(self._read(rel, "memory.stat"), keys), self.layout.version)

    def oom_kills(self, rel: str) -> int | None:
        """Processes of this cgroup killed by an OOM killer so far (v2 memory.events, v1
        memory.oom_control); None where the kernel does not count them."""
        filename = "memory.oom_control" if self.layout.version == V1 else "memory.events"
        try:
            return parse_flat_keyed(self._read(rel, filename)).get("oom_kill")
        except (FileNotFoundError, CgroupFormatError):
            return None

    def throttle(self, rel: str) -> Throttle | None:
        try:
            stat = parse_flat_keyed(self._read(rel, "cpu.stat"))
        except FileNotFoundError:
            return None
        return _throttle(stat)

    def psi_supported(self) -> bool:
        """Checked once, on the kubepods dir, as koordlet does."""
        if self._psi is None:
            try:
                self._psi = self.layout.file_path(self.layout.kubepods_dir(), "cpu.pressure").exists()
            except CgroupPathError:
                self._psi = False
        return self._psi

    def psi(self, rel: str) -> dict[str, dict[str, float]] | None:
        if not self.psi_supported():
            return None
        out = {}
        for res, filename in (("cpu", "cpu.pressure"), ("mem", "memory.pressure"), ("io", "io.pressure")):
            try:
                out[res] = parse_psi(self._read(rel, filename))
            except (FileNotFoundError, CgroupFormatError):
                continue
        return out or None
