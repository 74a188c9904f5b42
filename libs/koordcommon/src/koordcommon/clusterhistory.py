"""The cluster history format: what a what-if replay needs to rebuild a cluster's online load.

A history is a directory of three tables (docs/history-format.md says what each column means
and how to produce them from the metrics-collector or from Prometheus):

* `nodes`: one row per node: capacity, allocatable, labels;
* `node_usage`: one row per node and sample time: the whole node's CPU and memory usage;
* `pod_usage`: one row per pod and sample time: where the pod ran, who owns it, its priority
  class / priority / QoS, its requests and limits, and its usage.

Each table is `<name>.csv` (or `.csv.gz`) or `<name>.parquet` (Parquet needs pyarrow: the
`parquet` extra). The collector writes the CSV (`metrics_collector.api_history`), koordsim reads
it (`koordsim.history`); both use the column lists and the checks of this module, so the
format has one definition. Reading is strict: every problem is reported with the file, the line
(Parquet: the row) and the column, and nothing is guessed.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

import orjson

from .model import (
    LABEL_PRIORITY_CLASS,
    LABEL_QOS_CLASS,
    PriorityClass,
    QoSClass,
    combination_error,
    is_hp,
    parse_qos_class,
    raw_priority_class,
)
from .records import ContainerSpec, OwnerRef, PodRecord
from .resources import Resources

FORMAT_VERSION = 1
NODES, NODE_USAGE, POD_USAGE = "nodes", "node_usage", "pod_usage"
TABLES = (NODES, NODE_USAGE, POD_USAGE)
SUFFIXES = (".csv", ".csv.gz", ".parquet")
MAX_PROBLEMS = 20  # reported at once; a file wrong on every line would otherwise bury the first

# Columns in the order the collector writes them. `required`: the header must have the column;
# the others may be left out (then every row's value is empty).
NODE_COLUMNS = (
    "node", "capacity_cpu_milli", "capacity_memory_bytes", "allocatable_cpu_milli", "allocatable_memory_bytes",
    "labels",
)  # fmt: skip
NODE_USAGE_COLUMNS = ("ts", "node", "cpu_milli", "memory_bytes")
POD_USAGE_COLUMNS = (
    "ts", "node", "namespace", "name", "uid", "owner_kind", "owner_name",
    "priority_class", "priority", "qos",
    "requests_cpu_milli", "requests_memory_bytes", "limits_cpu_milli", "limits_memory_bytes",
    "cpu_milli", "memory_bytes",
)  # fmt: skip
COLUMNS = {NODES: NODE_COLUMNS, NODE_USAGE: NODE_USAGE_COLUMNS, POD_USAGE: POD_USAGE_COLUMNS}
OPTIONAL = {
    NODES: {"labels"},
    NODE_USAGE: set(),
    POD_USAGE: {"uid", "owner_kind", "owner_name", "priority_class", "priority", "qos", "limits_cpu_milli",
                "limits_memory_bytes"},
}  # fmt: skip
PRIORITY_CLASSES = tuple(c.value for c in PriorityClass if c is not PriorityClass.NONE)
QOS_CLASSES = tuple(q.value for q in QoSClass if q is not QoSClass.NONE)
MAX_NAME = 253  # Kubernetes object names are DNS subdomains


class HistoryError(ValueError):
    """A history that cannot be read; `problems` are its lines, each naming file, line and column."""

    def __init__(self, problems: list[str], more: int = 0):
        self.problems = problems
        text = "\n".join(problems)
        if more:
            text += f"\n... and {more} more problem(s)"
        super().__init__(text)


# ----------------------------------------------------------------------------- values


class _Bad(ValueError):
    """One value that does not fit its column (the message says why)."""


def _count(text: str, unit: str) -> int:
    if not text.isdigit():  # digits only: no sign, no decimal point, no exponent
        raise _Bad(f"{text!r} is not a whole non-negative number of {unit}")
    return int(text)


def parse_ts(text: str) -> int:
    """Epoch milliseconds from an integer or an RFC 3339 time with its zone."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _Bad(f"{text!r} is neither epoch milliseconds nor an RFC 3339 time") from None
    if dt.tzinfo is None:
        raise _Bad(f"{text!r} has no zone: write Z or an offset such as +02:00")
    return int(dt.timestamp() * 1000)


def _name(text: str) -> str:
    if not text:
        raise _Bad("is empty")
    if len(text) > MAX_NAME:
        raise _Bad(f"is {len(text)} characters long, more than {MAX_NAME}")
    return text


def _labels(text: str) -> dict[str, str]:
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _Bad(f"{text[:60]!r} is not a JSON object such as {{\"kubernetes.io/os\": \"linux\"}}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _Bad("must be a JSON object of string values")
    return value


def _priority_class(text: str) -> str:
    if text and text not in PRIORITY_CLASSES:
        raise _Bad(f"{text!r} is not a Koordinator priority class ({', '.join(PRIORITY_CLASSES)}) or empty")
    return text


def _priority(text: str) -> int | None:
    if not text:
        return None
    if not text.lstrip("-").isdigit():
        raise _Bad(f"{text!r} is not an integer priority")
    return int(text)


def _qos(text: str) -> str:
    if text and text not in QOS_CLASSES:
        raise _Bad(f"{text!r} is not a Koordinator QoS class ({', '.join(QOS_CLASSES)}) or empty")
    return text


def _optional_count(unit: str) -> Callable[[str], int]:
    return lambda text: _count(text, unit) if text else 0


_MILLI, _BYTES = "milli-cores", "bytes"
PARSERS: dict[str, Callable[[str], Any]] = {
    "ts": parse_ts,
    "node": _name,
    "namespace": _name,
    "name": _name,
    "uid": str,
    "owner_kind": str,
    "owner_name": str,
    "labels": _labels,
    "priority_class": _priority_class,
    "priority": _priority,
    "qos": _qos,
    "capacity_cpu_milli": lambda t: _count(t, _MILLI),
    "capacity_memory_bytes": lambda t: _count(t, _BYTES),
    "allocatable_cpu_milli": lambda t: _count(t, _MILLI),
    "allocatable_memory_bytes": lambda t: _count(t, _BYTES),
    "requests_cpu_milli": lambda t: _count(t, _MILLI),
    "requests_memory_bytes": lambda t: _count(t, _BYTES),
    "limits_cpu_milli": _optional_count(_MILLI),
    "limits_memory_bytes": _optional_count(_BYTES),
    "cpu_milli": lambda t: _count(t, _MILLI),
    "memory_bytes": lambda t: _count(t, _BYTES),
}


# ----------------------------------------------------------------------------- what a history holds


@dataclass(frozen=True)
class HistoryNode:
    name: str
    capacity: Resources
    allocatable: Resources
    labels: dict[str, str]
    where: str  # file and line, for later messages


@dataclass(frozen=True)
class HistoryPod:
    """A pod as the history recorded it (the same on every one of its rows)."""

    namespace: str
    name: str
    uid: str
    node: str
    owner_kind: str
    owner_name: str
    priority_class: str  # a Koordinator class name, or "" (then the priority value decides)
    priority: int | None
    qos: str  # koordinator.sh/qosClass, or "" (then the Kubernetes QoS class decides)
    requests: Resources
    limits: Resources
    where: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def record(self) -> PodRecord:
        """The pod as a record: its recorded class and QoS as Koordinator's labels, so the record's
        effective priority class and QoS follow koordcommon.model like any other pod's."""
        labels = {}
        if self.priority_class:
            labels[LABEL_PRIORITY_CLASS] = self.priority_class
        if self.qos:
            labels[LABEL_QOS_CLASS] = self.qos
        requests = {"cpu": self.requests.cpu_milli, "memory": self.requests.memory_bytes}
        limits = {k: v for k, v in (("cpu", self.limits.cpu_milli), ("memory", self.limits.memory_bytes)) if v}
        owners = [OwnerRef(self.owner_kind, self.owner_name)] if self.owner_kind and self.owner_name else []
        return PodRecord(
            namespace=self.namespace, name=self.name, uid=self.uid, node_name=self.node, labels=labels,
            owners=owners, priority=self.priority, priority_class_name=self.priority_class, phase="Running",
            containers=[ContainerSpec("main", requests, limits)],
        )  # fmt: skip


def is_online(pod: PodRecord) -> bool:
    """Online load in a replay: a high-priority pod (prod, mid, or no Koordinator class unless BE),
    whose usage the slo-controller subtracts before it offers batch capacity. Batch and free pods
    run on that capacity; a replay brings its own."""
    return is_hp(pod.priority_class)


@dataclass
class Series:
    """Samples of one node or pod in time order: epoch ms, milli-cores, bytes."""

    ts: list[int] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    mem: list[int] = field(default_factory=list)


@dataclass
class History:
    path: str
    nodes: dict[str, HistoryNode]
    node_usage: dict[str, Series]
    pods: list[HistoryPod]
    pod_usage: list[Series]  # pod_usage[i] belongs to pods[i]
    files: dict[str, str]  # table -> the file read

    @property
    def start_ms(self) -> int:
        return min(s.ts[0] for s in self.node_usage.values())

    @property
    def end_ms(self) -> int:
        return max(s.ts[-1] for s in self.node_usage.values())


# ----------------------------------------------------------------------------- reading


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.more = 0

    def add(self, text: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(text)
        else:
            self.more += 1

    def raise_any(self) -> None:
        if self.items:
            raise HistoryError(self.items, self.more)


def find_tables(directory: str | os.PathLike) -> dict[str, Path]:
    """The file of each table in `directory` (exactly one of .csv, .csv.gz, .parquet each)."""
    root = Path(directory)
    if not root.is_dir():
        tables = ", ".join(t + ".csv" for t in TABLES)
        raise HistoryError([f"{root}: not a directory (a history is a directory holding {tables})"])
    problems, found = [], {}
    for table in TABLES:
        files = [root / (table + s) for s in SUFFIXES if (root / (table + s)).is_file()]
        if not files:
            problems.append(f"{root}: no {table}.csv, {table}.csv.gz or {table}.parquet")
        elif len(files) > 1:
            problems.append(f"{root}: {' and '.join(f.name for f in files)} both hold {table}: keep one")
        else:
            found[table] = files[0]
    if problems:
        raise HistoryError(problems)
    return found


def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) of every row, the header first."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8") as f:
        reader = csv.reader(f, strict=True)
        start = 1
        try:
            for row in reader:
                yield start, row
                start = reader.line_num + 1
        except csv.Error as exc:
            raise HistoryError([f"{path.name} line {reader.line_num}: not valid CSV ({exc})"]) from None
        except UnicodeDecodeError as exc:
            raise HistoryError([f"{path.name}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
        except (OSError, EOFError) as exc:
            raise HistoryError([f"{path.name}: cannot be read ({exc})"]) from None


def _parquet_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(row number, fields as text) of a Parquet file, the column names first (row 0)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        need = "reading Parquet needs pyarrow (pip install 'koordcommon[parquet]'), or give the table as CSV"
        raise HistoryError([f"{path.name}: {need}"]) from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
        raise HistoryError([f"{path.name}: not a readable Parquet file ({exc})"]) from None
    yield 0, list(table.column_names)
    columns = [[_text(v) for v in col.to_pylist()] for col in table.columns]
    for i in range(table.num_rows):
        yield i + 1, [c[i] for c in columns]


def _text(value: Any) -> str:
    """A Parquet value as the CSV would hold it."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat()  # refused by parse_ts: a time without zone
        return str(int(value.timestamp() * 1000))
    return str(value)


class _Table:
    """One table's file: its header checked, its rows as text in the table's own column order."""

    def __init__(self, table: str, path: Path, problems: _Problems):
        self.path, self.problems = path, problems
        self.parquet = path.suffix == ".parquet"
        self._rows = _parquet_rows(path) if self.parquet else _csv_rows(path)
        self.columns = known = COLUMNS[table]
        try:
            _, header = next(self._rows)
        except StopIteration:
            raise HistoryError([f"{path.name}: empty (the first line names the columns: {','.join(known)})"]) from None
        header = [h.strip() for h in header]
        bad = [f"{path.name}: unknown column {h!r} (the columns of {table} are {', '.join(known)})"
               for h in header if h not in known]  # fmt: skip
        bad += [f"{path.name}: column {h!r} appears twice" for h in sorted({h for h in header if header.count(h) > 1})]
        bad += [f"{path.name}: column {c!r} is missing" for c in known if c not in header and c not in OPTIONAL[table]]
        if bad:
            raise HistoryError(bad)
        self.width = len(header)
        # where each of the table's columns is in the file (None: left out, read as empty)
        self.order = None if list(header) == list(known) else [header.index(c) if c in header else None for c in known]
        self.parsers = [PARSERS[c] for c in known]

    def where(self, line: int) -> str:
        return f"{self.path.name} {'row' if self.parquet else 'line'} {line}"

    def rows(self) -> Iterator[tuple[int, list[str]]]:
        """(line, the row's text in the table's column order) of every row with the header's width."""
        order, width = self.order, self.width
        for line, fields in self._rows:
            if len(fields) != width:
                if not self.parquet and not any(f.strip() for f in fields):
                    continue  # a blank line
                self.problems.add(f"{self.where(line)}: {len(fields)} fields, the header has {width}")
                continue
            yield line, fields if order is None else [fields[i] if i is not None else "" for i in order]

    def parse(self, line: int, fields: list[str], columns: Sequence[int]) -> list[Any] | None:
        """The values of these columns (indexes into the table's columns); None when one is bad (said)."""
        out, ok = [], True
        for i in columns:
            try:
                out.append(self.parsers[i](fields[i].strip()))
            except _Bad as exc:
                self.problems.add(f"{self.where(line)}, column {self.columns[i]}: {exc}")
                ok = False
        return out if ok else None


_ALL_NODE = range(len(NODE_COLUMNS))
_USAGE = (0, 2, 3)  # ts, cpu_milli, memory_bytes of node_usage
_POD_SAMPLE = (0, 14, 15)  # ts, cpu_milli, memory_bytes of pod_usage
_POD_ALL = range(len(POD_USAGE_COLUMNS))
_POD_STATIC = (1, *range(5, 14))  # node, owner_kind ... limits_memory_bytes: the same on all of a pod's rows
_pod_key, _pod_static_text = itemgetter(2, 3, 4), itemgetter(*_POD_STATIC)


def _read_nodes(path: Path, problems: _Problems) -> dict[str, HistoryNode]:
    nodes: dict[str, HistoryNode] = {}
    t = _Table(NODES, path, problems)
    for line, fields in t.rows():
        r = t.parse(line, fields, _ALL_NODE)
        if r is None:
            continue
        name, cap_cpu, cap_mem, alloc_cpu, alloc_mem, labels = r
        where = t.where(line)
        if name in nodes:
            problems.add(f"{where}, column node: {name!r} is already on {nodes[name].where}")
            continue
        for res, unit, c, a in (("cpu_milli", "milli-cores", cap_cpu, alloc_cpu), ("memory_bytes", "bytes", cap_mem, alloc_mem)):
            if c == 0:
                problems.add(f"{where}, column capacity_{res}: a node has some capacity (0 {unit} given)")
            elif a > c:
                problems.add(f"{where}, column allocatable_{res}: {a} {unit} is more than the capacity {c}")
        nodes[name] = HistoryNode(name, Resources(cap_cpu, cap_mem), Resources(alloc_cpu, alloc_mem), labels, where)
    return nodes


def _read_node_usage(path: Path, nodes: dict[str, HistoryNode], problems: _Problems) -> dict[str, Series]:
    usage: dict[str, Series] = {}
    seen: dict[tuple[str, int], int] = {}
    t = _Table(NODE_USAGE, path, problems)
    for line, fields in t.rows():
        node = fields[1].strip()
        if node not in nodes:
            problems.add(f"{t.where(line)}, column node: {node!r} is not in {NODES}")
            continue
        r = t.parse(line, fields, _USAGE)
        if r is None:
            continue
        ts, cpu, mem = r
        first = seen.setdefault((node, ts), line)
        if first != line:
            problems.add(f"{t.where(line)}, column ts: node {node!r} already has a sample at {ts} ({t.where(first)})")
            continue
        s = usage.get(node)
        if s is None:
            s = usage[node] = Series()
        s.ts.append(ts)
        s.cpu.append(cpu)
        s.mem.append(mem)
    return {n: _sorted(s) for n, s in usage.items()}


def _read_pod_usage(path: Path, nodes: dict[str, HistoryNode], problems: _Problems) -> tuple[list[HistoryPod], list[Series]]:
    t = _Table(POD_USAGE, path, problems)
    index: dict[tuple[str, str, str], int] = {}
    texts: list[tuple] = []  # each pod's declarations as written on its first row
    statics: list[list] = []  # ... and as values
    pods: list[HistoryPod] = []
    series: list[Series] = []
    seen: list[set[int]] = []
    for line, f in t.rows():
        written = _pod_key(f)
        i = index.get(written)
        text = _pod_static_text(f)
        if i is None or text != texts[i]:  # a new pod, or declarations written otherwise: read them all
            r = t.parse(line, f, _POD_ALL)
            if r is None:
                continue
            where = t.where(line)
            if r[1] not in nodes:
                problems.add(f"{where}, column node: {r[1]!r} is not in {NODES}")
                continue
            static = [r[c] for c in _POD_STATIC]
            key = (r[2], r[3], r[4])
            i = index.get(key)  # the pod as read (its names may be written with spaces around)
            if i is None:
                ts, node, ns, name, uid, owner_kind, owner_name, cls, prio, qos, rc, rm, lc, lm, _, _ = r
                labels = {LABEL_PRIORITY_CLASS: cls} if cls else None
                raw = raw_priority_class(labels, prio)
                error = combination_error(raw, parse_qos_class(qos)) if raw is not PriorityClass.NONE else None
                if error is not None:
                    problems.add(f"{where}, column qos: {error}")
                    continue
                i = index[key] = index[written] = len(pods)
                texts.append(text)
                statics.append(static)
                pods.append(HistoryPod(ns, name, uid, node, owner_kind, owner_name, cls, prio, qos, Resources(rc, rm),
                                       Resources(lc, lm), where))  # fmt: skip
                series.append(Series())
                seen.append(set())
            elif static != statics[i]:
                k = next(k for k, (a, b) in enumerate(zip(static, statics[i])) if a != b)
                column = POD_USAGE_COLUMNS[_POD_STATIC[k]]
                what = "pod" if not key[2] else f"pod (uid {key[2]})"
                hint = " (a pod runs on one node: give each of its incarnations its uid)" if column == "node" else ""
                problems.add(f"{where}, column {column}: {what} {key[0]}/{key[1]} has {static[k]!r} here but "
                             f"{statics[i][k]!r} on {pods[i].where}{hint}")  # fmt: skip
                continue
            ts, cpu, mem = r[0], r[14], r[15]
        else:
            r = t.parse(line, f, _POD_SAMPLE)
            if r is None:
                continue
            ts, cpu, mem = r
            key = (pods[i].namespace, pods[i].name, pods[i].uid)
        if ts in seen[i]:
            problems.add(f"{t.where(line)}, column ts: pod {key[0]}/{key[1]} already has a sample at {ts}")
            continue
        seen[i].add(ts)
        s = series[i]
        s.ts.append(ts)
        s.cpu.append(cpu)
        s.mem.append(mem)
    return pods, [_sorted(s) for s in series]


def _sorted(s: Series) -> Series:
    if all(a < b for a, b in zip(s.ts, s.ts[1:])):
        return s
    order = sorted(range(len(s.ts)), key=s.ts.__getitem__)
    return Series([s.ts[i] for i in order], [s.cpu[i] for i in order], [s.mem[i] for i in order])


def read_history(directory: str | os.PathLike) -> History:
    """Read and check a history directory; HistoryError lists what is wrong, by file, line and column."""
    files = find_tables(directory)
    problems = _Problems()
    nodes = _read_nodes(files[NODES], problems)
    if not nodes and not problems.items:
        problems.add(f"{files[NODES].name}: no nodes")
    problems.raise_any()
    node_usage = _read_node_usage(files[NODE_USAGE], nodes, problems)
    pods, pod_usage = _read_pod_usage(files[POD_USAGE], nodes, problems)
    for name, node in nodes.items():
        if name not in node_usage:
            problems.add(f"{node.where}: node {name!r} has no sample in {files[NODE_USAGE].name}")
    problems.raise_any()
    return History(str(Path(directory)), nodes, node_usage, pods, pod_usage, {t: str(p) for t, p in files.items()})


# ----------------------------------------------------------------------------- writing


def csv_text(rows: Iterable[Iterable[Any]]) -> str:
    """Rows as CSV text (the format's dialect: comma, double quotes when needed, \\n line ends)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def labels_text(labels: dict[str, str]) -> str:
    return orjson.dumps(labels, option=orjson.OPT_SORT_KEYS).decode()


__all__ = [
    "COLUMNS", "FORMAT_VERSION", "NODES", "NODE_USAGE", "POD_USAGE", "TABLES", "History", "HistoryError", "HistoryNode",
    "HistoryPod", "Series", "csv_text", "find_tables", "is_online", "labels_text", "parse_ts", "read_history",
]  # fmt: skip
