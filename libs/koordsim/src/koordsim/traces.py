"""Loaders for the real cluster traces (see PROVENANCE.md and SCHEMAS.md in the traces folder).

Every loader is lazy and cached per (directory, key): the simulated cluster asks for the same
VMs in every process and on every genesis. Values are converted to the system's units here
(milli-cores, bytes) so callers never see MHz, KB or normalised percentages.

When the traces folder is absent, `SyntheticDiurnal` stands in (with a warning): a seeded
24-hour sine plus noise, so the simulated cluster still runs, just not on real data.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import logging
import math
import os
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from koordcommon import paths

log = logging.getLogger(__name__)

BITBRAINS_DIR = "bitbrains-rnd-2013-7/rnd/2013-7"
BITBRAINS_VM_COUNT = 500
BITBRAINS_STEP_S = 300
ALIBABA_2018_DIR = "alibaba-v2018-gohsyi"
ALIBABA_2017_BATCH_TASK = "alibaba-v2017-priyadarshinidas/batch_task.csv"
GENAI_MEMORY_UTIL = "alibaba-genai-v2026/pod_memory_util_anon.tar.gz"
MACHINE_USAGE_STEP_S = 60
KIB = 1024
# Bitbrains rows where cores or capacity are 0 cannot give MHz per core; a 2013 Xeon core
# (the median per-core capacity of the rnd VMs) stands in so usage is still converted.
FALLBACK_MHZ_PER_CORE = 2926.0


def find_traces_dir() -> Path | None:
    """`KOORD_TRACES_DIR`, else `traces/` in the shared reference folder."""
    env = os.environ.get("KOORD_TRACES_DIR")
    if env:
        return Path(env)
    shared = paths.shared_dir()
    if shared is not None and (shared / "traces").is_dir():
        return shared / "traces"
    return None


def _resolve(traces_dir: str | Path | None) -> Path | None:
    if traces_dir is not None:
        p = Path(traces_dir)
        return p if p.is_dir() else None
    return find_traces_dir()


def rebin(ts_s: np.ndarray, values: np.ndarray, step_s: int, start_s: int | None = None) -> tuple[int, np.ndarray]:
    """Mean per `step_s` bin on a regular grid; empty bins carry the previous bin forward.

    Real traces report irregularly (duplicates, 116/184-s gaps, multi-hour holes), while the
    simulator indexes by time, so every series is put on a grid first.
    Returns (grid start in seconds, values per bin); `values` may be 2-D (rows x columns).
    """
    ts = np.asarray(ts_s, dtype=np.int64)
    vals = np.asarray(values, dtype=np.float64)
    if vals.ndim == 1:
        vals = vals[:, None]
    if ts.size == 0:
        return int(start_s or 0), np.zeros((0, vals.shape[1]))
    t0 = int(ts.min()) if start_s is None else int(start_s)
    t0 -= t0 % step_s
    idx = (ts - t0) // step_s
    keep = idx >= 0
    idx, vals = idx[keep], vals[keep]
    n = int(idx.max()) + 1
    counts = np.bincount(idx, minlength=n)
    out = np.empty((n, vals.shape[1]))
    for c in range(vals.shape[1]):
        sums = np.bincount(idx, weights=vals[:, c], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, c] = sums / counts
    # forward fill the holes (first bin is never empty: it holds the minimum timestamp)
    filled = np.where(counts > 0, np.arange(n), 0)
    np.maximum.accumulate(filled, out=filled)
    out = out[filled]
    return t0, out


# --------------------------------------------------------------------------- Bitbrains


@dataclass(frozen=True)
class VmTrace:
    """One Bitbrains VM on a 300-s grid: usage in system units and what it was provisioned."""

    vm_id: int
    start_s: int
    step_s: int
    cores: int
    memory_bytes_provisioned: int
    cpu_milli: np.ndarray  # float64 per step
    memory_bytes: np.ndarray  # float64 per step

    @property
    def cpu_milli_provisioned(self) -> int:
        return self.cores * 1000

    def __len__(self) -> int:
        return int(self.cpu_milli.shape[0])


def cpu_milli_from_mhz(usage_mhz: np.ndarray, capacity_mhz: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """usage MHz / (capacity MHz / cores) x 1000: the milli-cores a VM used."""
    usage = np.asarray(usage_mhz, dtype=np.float64)
    cap = np.asarray(capacity_mhz, dtype=np.float64)
    cores = np.asarray(cores, dtype=np.float64)
    per_core = np.full(np.broadcast(usage, cap, cores).shape, FALLBACK_MHZ_PER_CORE)
    ok = (cap > 0) & (cores > 0)
    np.divide(cap, cores, out=per_core, where=ok)
    return np.maximum(usage, 0.0) / per_core * 1000.0


def parse_bitbrains(raw: bytes, vm_id: int = 0) -> VmTrace:
    """Parse one `;`+TAB separated Bitbrains file (header + 11 columns)."""
    # columns: ts, cores, cap MHz, usage MHz, usage %, mem prov KB, mem usage KB, ...
    arr = np.loadtxt(io.BytesIO(raw), delimiter=";", skiprows=1, usecols=(0, 1, 2, 3, 5, 6), ndmin=2)
    if arr.shape[0] == 0:
        return VmTrace(vm_id, 0, BITBRAINS_STEP_S, 0, 0, np.zeros(1), np.zeros(1))
    ts, cores, cap, usage, mem_prov, mem_used = arr.T
    cpu = cpu_milli_from_mhz(usage, cap, cores)
    mem = np.maximum(mem_used, 0.0) * KIB
    start, binned = rebin(ts, np.stack([cpu, mem], axis=1), BITBRAINS_STEP_S)
    return VmTrace(
        vm_id=vm_id,
        start_s=start,
        step_s=BITBRAINS_STEP_S,
        cores=int(cores.max()),
        memory_bytes_provisioned=int(mem_prov.max() * KIB),
        cpu_milli=binned[:, 0],
        memory_bytes=binned[:, 1],
    )


def cache_dir() -> Path | None:
    """Where parsed traces are kept between runs: KOORD_TRACE_CACHE_DIR ("off" disables), else
    $XDG_CACHE_HOME/koordcommon/traces. Parsing a Bitbrains file costs ~6 ms; reading it back ~0.3 ms,
    which matters when every service of the demo builds the same simulated cluster at start."""
    env = os.environ.get("KOORD_TRACE_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "false") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "koordcommon" / "traces"


def _cache_file(source: Path) -> Path | None:
    cdir = cache_dir()
    if cdir is None:
        return None
    st = source.stat()
    key = hashlib.sha1(f"{source.resolve()}:{st.st_size}:{st.st_mtime_ns}:v1".encode()).hexdigest()[:20]
    return cdir / f"{source.name.split('.')[0]}-{key}.npz"


def _read_cached_vm(path: Path, vm_id: int) -> VmTrace | None:
    try:
        with np.load(path) as z:
            meta = z["meta"]
            return VmTrace(vm_id, int(meta[0]), int(meta[1]), int(meta[2]), int(meta[3]), z["cpu"], z["mem"])
    except (OSError, KeyError, ValueError):
        return None


def _write_cached_vm(path: Path, vm: VmTrace) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        meta = np.asarray([vm.start_s, vm.step_s, vm.cores, vm.memory_bytes_provisioned], dtype=np.int64)
        np.savez(tmp, meta=meta, cpu=vm.cpu_milli, mem=vm.memory_bytes)
        os.replace(tmp, path)  # atomic: concurrent services never read a half-written file
    except OSError as exc:
        log.debug("trace cache not written", extra={"path": str(path), "error": repr(exc)})


@lru_cache(maxsize=1024)
def _bitbrains_vm(root: Path, vm_id: int) -> VmTrace:
    source = root / BITBRAINS_DIR / f"{vm_id}.csv.gz"
    cached = _cache_file(source)
    if cached is not None and cached.is_file():
        vm = _read_cached_vm(cached, vm_id)
        if vm is not None:
            return vm
    vm = parse_bitbrains(gzip.decompress(source.read_bytes()), vm_id)
    if cached is not None:
        _write_cached_vm(cached, vm)
    return vm


def bitbrains_vm(vm_id: int, traces_dir: str | Path | None = None) -> VmTrace:
    """VM `vm_id` (1..500) of the Bitbrains rnd 2013-7 trace."""
    root = _resolve(traces_dir)
    if root is None:
        raise FileNotFoundError("traces directory not found (set KOORD_TRACES_DIR)")
    return _bitbrains_vm(root, int(vm_id))


def bitbrains_available(traces_dir: str | Path | None = None) -> bool:
    root = _resolve(traces_dir)
    return root is not None and (root / BITBRAINS_DIR / "1.csv.gz").is_file()


def bitbrains_vm_ids(traces_dir: str | Path | None = None) -> list[int]:
    root = _resolve(traces_dir)
    if root is None:
        return []
    return sorted(int(p.name.split(".")[0]) for p in (root / BITBRAINS_DIR).glob("*.csv.gz"))


# --------------------------------------------------------------------------- Alibaba 2018


@dataclass(frozen=True)
class MachineUsage:
    """Whole-machine CPU and memory utilisation (percent 0-100) of one Alibaba 2018 machine."""

    machine_id: str
    start_s: int
    step_s: int
    cpu_percent: np.ndarray
    mem_percent: np.ndarray

    def __len__(self) -> int:
        return int(self.cpu_percent.shape[0])


@lru_cache(maxsize=8)
def _machine_usage(root: Path) -> dict[str, MachineUsage]:
    text = (root / ALIBABA_2018_DIR / "machine_usage.csv").read_bytes()
    # machine ids are `m_N`: keep N so one numeric parse covers the columns we need
    arr = np.loadtxt(
        io.BytesIO(text.replace(b"m_", b"")), delimiter=",", usecols=(0, 1, 2, 3), ndmin=2
    )
    out: dict[str, MachineUsage] = {}
    mids = arr[:, 0].astype(np.int64)
    for mid in np.unique(mids):
        rows = arr[mids == mid]
        cpu, mem = rows[:, 2], rows[:, 3]
        valid = (cpu >= 0) & (cpu <= 100) & (mem >= 0) & (mem <= 100)  # -1 / 101 mark invalid
        rows = rows[valid]
        if rows.shape[0] == 0:
            continue
        start, binned = rebin(rows[:, 1], rows[:, 2:4], MACHINE_USAGE_STEP_S)
        name = f"m_{mid}"
        out[name] = MachineUsage(name, start, MACHINE_USAGE_STEP_S, binned[:, 0], binned[:, 1])
    return out


def alibaba2018_machine_usage(traces_dir: str | Path | None = None) -> dict[str, MachineUsage]:
    """machine_id -> usage re-binned to 60 s (16 machines in the saved sample)."""
    root = _resolve(traces_dir)
    if root is None:
        raise FileNotFoundError("traces directory not found (set KOORD_TRACES_DIR)")
    return _machine_usage(root)


@dataclass(frozen=True)
class MachineMeta:
    machine_id: str
    time_s: int
    failure_domain_1: int
    failure_domain_2: str
    cpu_num: int
    mem_size: int  # normalised 0-100
    status: str


@lru_cache(maxsize=8)
def _machine_meta(root: Path) -> list[MachineMeta]:
    latest: dict[str, MachineMeta] = {}
    with open(root / ALIBABA_2018_DIR / "machine_meta.csv", newline="") as f:
        for row in csv.reader(f):
            if len(row) < 7:
                continue
            m = MachineMeta(row[0], int(row[1]), int(row[2]), row[3], int(row[4]), int(row[5]), row[6])
            prev = latest.get(m.machine_id)
            if prev is None or m.time_s >= prev.time_s:
                latest[m.machine_id] = m
    return sorted(latest.values(), key=lambda m: int(m.machine_id[2:]) if m.machine_id[2:].isdigit() else 0)


def alibaba2018_machine_meta(traces_dir: str | Path | None = None) -> list[MachineMeta]:
    """The machine inventory: the latest record of each machine, ordered by machine number."""
    root = _resolve(traces_dir)
    if root is None:
        raise FileNotFoundError("traces directory not found (set KOORD_TRACES_DIR)")
    return _machine_meta(root)


# --------------------------------------------------------------------------- Alibaba 2017 batch


@dataclass(frozen=True)
class BatchTasks:
    """The Alibaba 2017 batch_task table as columns, ordered by create time.

    plan_cpu_milli is per instance (plan_cpu 100 = 1 core, so x10); -1 where the trace left it
    empty. memory_norm is the normalised per-instance memory (fraction of a machine).
    """

    create_s: np.ndarray
    end_s: np.ndarray
    job_id: np.ndarray
    task_id: np.ndarray
    instances: np.ndarray
    status: np.ndarray  # str objects
    plan_cpu_milli: np.ndarray
    memory_norm: np.ndarray  # NaN where empty

    def __len__(self) -> int:
        return int(self.create_s.shape[0])

    @property
    def duration_s(self) -> np.ndarray:
        return np.maximum(self.end_s - self.create_s, 0)


@lru_cache(maxsize=4)
def _batch_tasks(root: Path) -> BatchTasks:
    cols: list[list] = [[] for _ in range(8)]
    with open(root / ALIBABA_2017_BATCH_TASK, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)  # header added by the repository author
        for row in reader:
            if len(row) < 8:
                continue
            try:
                create, end, job, task, inst = (int(x) for x in row[:5])
            except ValueError:
                continue
            cols[0].append(create)
            cols[1].append(end)
            cols[2].append(job)
            cols[3].append(task)
            cols[4].append(inst)
            cols[5].append(row[5])
            cols[6].append(int(float(row[6]) * 10) if row[6].strip() else -1)
            cols[7].append(float(row[7]) if row[7].strip() else math.nan)
    order = np.argsort(np.asarray(cols[0], dtype=np.int64), kind="stable")
    ints = [np.asarray(c, dtype=np.int64)[order] for c in (cols[0], cols[1], cols[2], cols[3], cols[4], cols[6])]
    return BatchTasks(
        create_s=ints[0],
        end_s=ints[1],
        job_id=ints[2],
        task_id=ints[3],
        instances=ints[4],
        status=np.asarray(cols[5], dtype=object)[order],
        plan_cpu_milli=ints[5],
        memory_norm=np.asarray(cols[7], dtype=np.float64)[order],
    )


def alibaba2017_batch_tasks(traces_dir: str | Path | None = None) -> BatchTasks:
    root = _resolve(traces_dir)
    if root is None:
        raise FileNotFoundError("traces directory not found (set KOORD_TRACES_DIR)")
    return _batch_tasks(root)


# --------------------------------------------------------------------------- Alibaba GenAI


@dataclass(frozen=True)
class PodSeries:
    pod: str  # container_ip: MD5 of the pod IP
    ts_s: np.ndarray
    values: np.ndarray


@lru_cache(maxsize=4)
def _genai_memory(root: Path) -> dict[str, PodSeries]:
    with tarfile.open(root / GENAI_MEMORY_UTIL, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv"))
        f = tar.extractfile(member)
        assert f is not None
        reader = csv.reader(io.TextIOWrapper(f, newline=""))
        header = next(reader)
        # column order differs between the GenAI files: read by name
        iv, it, ip = header.index("value"), header.index("timestamp_anon"), header.index("container_ip")
        per: dict[str, tuple[list[float], list[float]]] = {}
        for row in reader:
            if len(row) <= max(iv, it, ip):
                continue
            try:
                ts, v = float(row[it]), float(row[iv])
            except ValueError:
                continue
            lists = per.setdefault(row[ip], ([], []))
            lists[0].append(ts)
            lists[1].append(v)
    out: dict[str, PodSeries] = {}
    for pod, (ts, vs) in per.items():
        t = np.asarray(ts)
        order = np.argsort(t, kind="stable")
        out[pod] = PodSeries(pod, t[order], np.asarray(vs)[order])
    return out


def genai_pod_memory_util(traces_dir: str | Path | None = None) -> dict[str, PodSeries]:
    """Per-pod memory utilisation (fraction 0-1, though documented as percent) at ~60 s."""
    root = _resolve(traces_dir)
    if root is None:
        raise FileNotFoundError("traces directory not found (set KOORD_TRACES_DIR)")
    return _genai_memory(root)


# --------------------------------------------------------------------------- synthetic


@dataclass(frozen=True)
class SyntheticDiurnal:
    """A seeded 24-hour sine plus Gaussian noise, clipped at 0: the stand-in when traces are absent."""

    seed: int = 0
    mean: float = 0.3
    amplitude: float = 0.15
    noise: float = 0.03
    period_s: int = 86_400
    step_s: int = 300

    def series(self, n: int, phase_s: float = 0.0) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        t = np.arange(n) * self.step_s + phase_s
        wave = self.mean + self.amplitude * np.sin(2 * math.pi * t / self.period_s)
        return np.maximum(wave + rng.normal(0.0, self.noise, n), 0.0)

    def vm(self, vm_id: int, cores: int = 2, memory_bytes: int = 8 << 30, days: int = 7) -> VmTrace:
        """A VmTrace shaped like a Bitbrains one: utilisation x provisioned size."""
        n = days * self.period_s // self.step_s
        gen = SyntheticDiurnal(self.seed * 1_000_003 + vm_id, self.mean, self.amplitude, self.noise, self.period_s, self.step_s)
        phase = (vm_id * 7919) % self.period_s
        cpu = np.minimum(gen.series(n, phase), 1.0) * cores * 1000
        mem = np.minimum(0.5 * gen.series(n, phase) + 0.2, 1.0) * memory_bytes
        return VmTrace(vm_id, 0, self.step_s, cores, memory_bytes, cpu, mem)


_warned: set[str] = set()


def warn_synthetic(what: str) -> None:
    if what not in _warned:
        _warned.add(what)
        log.warning("traces directory not found; using a synthetic diurnal series for %s", what)
