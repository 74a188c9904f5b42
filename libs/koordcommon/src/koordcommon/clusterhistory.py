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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
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


def _table_rows(table: str, path: Path, problems: _Problems) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, parsed row) of every valid row; a bad value is added to `problems` and its row skipped."""
    parquet = path.suffix == ".parquet"
    unit = "row" if parquet else "line"
    rows = _parquet_rows(path) if parquet else _csv_rows(path)
    known = COLUMNS[table]
    try:
        _, header = next(rows)
    except StopIteration:
        raise HistoryError([f"{path.name}: empty (the first line names the columns: {','.join(known)})"]) from None
    header = [h.strip() for h in header]
    bad = [f"{path.name}: unknown column {h!r} (the columns of {table} are {', '.join(known)})"
           for h in header if h not in known]  # fmt: skip
    bad += [f"{path.name}: column {h!r} appears twice" for h in sorted({h for h in header if header.count(h) > 1})]
    bad += [f"{path.name}: column {c!r} is missing" for c in known if c not in header and c not in OPTIONAL[table]]
    if bad:
        raise HistoryError(bad)
    parsers = [(h, PARSERS[h]) for h in header]
    absent = {c: PARSERS[c]("") for c in known if c not in header}
    width = len(header)
    for line, fields in rows:
        where = f"{path.name} {unit} {line}"
        if len(fields) != width:
            if not parquet and not any(f.strip() for f in fields):
                continue  # a blank line
            problems.add(f"{where}: {len(fields)} fields, the header has {width}")
            continue
        out = dict(absent)
        ok = True
        for (column, parse), text in zip(parsers, fields):
            try:
                out[column] = parse(text.strip())
            except _Bad as exc:
                problems.add(f"{where}, column {column}: {exc}")
                ok = False
        if ok:
            yield where, out


def _read_nodes(path: Path, problems: _Problems) -> dict[str, HistoryNode]:
    nodes: dict[str, HistoryNode] = {}
    for where, r in _table_rows(NODES, path, problems):
        name = r["node"]
        if name in nodes:
            problems.add(f"{where}, column node: {name!r} is already on {nodes[name].where}")
            continue
        cap = Resources(r["capacity_cpu_milli"], r["capacity_memory_bytes"])
        alloc = Resources(r["allocatable_cpu_milli"], r["allocatable_memory_bytes"])
        for res, unit in (("cpu_milli", "milli-cores"), ("memory_bytes", "bytes")):
            c, a = getattr(cap, res), getattr(alloc, res)
            if c == 0:
                problems.add(f"{where}, column capacity_{res}: a node has some capacity (0 {unit} given)")
            elif a > c:
                problems.add(f"{where}, column allocatable_{res}: {a} {unit} is more than the capacity {c}")
        nodes[name] = HistoryNode(name, cap, alloc, dict(r["labels"]), where)
    return nodes


def _read_node_usage(path: Path, nodes: dict[str, HistoryNode], problems: _Problems) -> dict[str, Series]:
    usage: dict[str, Series] = {}
    seen: dict[tuple[str, int], str] = {}
    for where, r in _table_rows(NODE_USAGE, path, problems):
        node, ts = r["node"], r["ts"]
        if node not in nodes:
            problems.add(f"{where}, column node: {node!r} is not in {NODES}")
            continue
        first = seen.setdefault((node, ts), where)
        if first is not where:
            problems.add(f"{where}, column ts: node {node!r} already has a sample at {ts} ({first})")
            continue
        s = usage.setdefault(node, Series())
        s.ts.append(ts)
        s.cpu.append(r["cpu_milli"])
        s.mem.append(r["memory_bytes"])
    return {n: _sorted(s) for n, s in usage.items()}


_POD_STATIC = ("node", "owner_kind", "owner_name", "priority_class", "priority", "qos",
               "requests_cpu_milli", "requests_memory_bytes", "limits_cpu_milli", "limits_memory_bytes")  # fmt: skip


def _read_pod_usage(path: Path, nodes: dict[str, HistoryNode], problems: _Problems) -> tuple[list[HistoryPod], list[Series]]:
    index: dict[tuple[str, str, str], int] = {}
    statics: list[tuple] = []
    pods: list[HistoryPod] = []
    series: list[Series] = []
    seen: list[set[int]] = []
    for where, r in _table_rows(POD_USAGE, path, problems):
        if r["node"] not in nodes:
            problems.add(f"{where}, column node: {r['node']!r} is not in {NODES}")
            continue
        key = (r["namespace"], r["name"], r["uid"])
        static = tuple(r[c] for c in _POD_STATIC)
        i = index.get(key)
        if i is None:
            labels = {LABEL_PRIORITY_CLASS: r["priority_class"]} if r["priority_class"] else None
            cls = raw_priority_class(labels, r["priority"])
            error = combination_error(cls, parse_qos_class(r["qos"])) if cls is not PriorityClass.NONE else None
            if error is not None:
                problems.add(f"{where}, column qos: {error}")
                continue
            i = index[key] = len(pods)
            statics.append(static)
            pods.append(HistoryPod(
                namespace=r["namespace"], name=r["name"], uid=r["uid"], node=r["node"],
                owner_kind=r["owner_kind"], owner_name=r["owner_name"], priority_class=r["priority_class"],
                priority=r["priority"], qos=r["qos"],
                requests=Resources(r["requests_cpu_milli"], r["requests_memory_bytes"]),
                limits=Resources(r["limits_cpu_milli"], r["limits_memory_bytes"]), where=where,
            ))  # fmt: skip
            series.append(Series())
            seen.append(set())
        elif static != statics[i]:
            column = next(c for c, a, b in zip(_POD_STATIC, static, statics[i]) if a != b)
            what = "pod" if not r["uid"] else f"pod (uid {r['uid']})"
            hint = " (a pod runs on one node: give each of its incarnations its uid)" if column == "node" else ""
            problems.add(f"{where}, column {column}: {what} {key[0]}/{key[1]} has {r[column]!r} here but "
                         f"{statics[i][_POD_STATIC.index(column)]!r} on {pods[i].where}{hint}")  # fmt: skip
            continue
        if r["ts"] in seen[i]:
            problems.add(f"{where}, column ts: pod {key[0]}/{key[1]} already has a sample at {r['ts']}")
            continue
        seen[i].add(r["ts"])
        s = series[i]
        s.ts.append(r["ts"])
        s.cpu.append(r["cpu_milli"])
        s.mem.append(r["memory_bytes"])
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
