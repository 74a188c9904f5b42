"""Regenerate the trace sample bundled with koordsim from the full trace set.

    .venv/bin/python libs/koordsim/tools/make_trace_sample.py --full "$KOORD_TRACE_DIR"

The sample keeps the full set's layout (one folder per dataset) and its rows as they are:
whole rows are selected, never edited. What it takes (see data/traces-sample/PROVENANCE.md):

* Alibaba 2018: machine_usage rows of every machine that reports over all 8 days (from the first
  3 hours to the last), all of them, in the file's order; machine_meta whole.
* Alibaba 2017: batch_task's header and its first jobs, whole jobs, up to BATCH_TASKS tasks (the
  table is grouped by job, so the first jobs span the whole day of submissions).
* Bitbrains: the VM files whose number is a multiple of 20 (20 ... 480), byte for byte.
* Alibaba GenAI: pod_memory_util rows of the first GENAI_PODS pods in container_ip order, in
  the file's order, with its header, in a tar.gz of the same name.
* Alibaba GPU 2023: the node and pod lists as they are.

Text files are gzip-compressed (level 9, no name, mtime 0) and the tar has fixed metadata, so
running the tool again on the same full set writes the same bytes. SHA256SUMS lists the files.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import os
import shutil
import sys
import tarfile
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "koordsim" / "data" / "traces-sample"
ALIBABA_2018 = "alibaba-v2018-gohsyi"
ALIBABA_2017 = "alibaba-v2017-priyadarshinidas"
GENAI = "alibaba-genai-v2026"
GPU_2023 = "alibaba-gpu-v2023"
BITBRAINS = "bitbrains-rnd-2013-7/rnd/2013-7"
TRACE_END_S = 691_200  # 8 days
EDGE_S = 3 * 3600  # a machine "reports over all 8 days" when it starts and ends within 3 h of the ends
BATCH_TASKS = 20_000
BITBRAINS_EVERY = 20
GENAI_PODS = 24
# Notes kept beside the data, not produced by this tool.
KEEP = {"PROVENANCE.md"}


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def full_days_machines(rows: list[bytes]) -> list[bytes]:
    span: dict[bytes, list[int]] = {}
    for r in rows:
        mid, ts = r.split(b",", 2)[:2]
        lo_hi = span.setdefault(mid, [int(ts), int(ts)])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], int(ts)), max(lo_hi[1], int(ts))
    keep = {m for m, (lo, hi) in span.items() if lo <= EDGE_S and hi >= TRACE_END_S - EDGE_S}
    return [r for r in rows if r.split(b",", 1)[0] in keep]


def _job(line: bytes) -> bytes:
    return line.split(b",")[2].strip()


def first_jobs(lines: list[bytes], tasks: int) -> list[bytes]:
    header, body = lines[0], lines[1:]
    n = min(tasks, len(body))
    while n < len(body) and _job(body[n]) == _job(body[n - 1]):
        n += 1  # finish the job the cut falls in
    return [header, *body[:n]]


def genai_subset(path: Path, pods: int) -> bytes:
    with tarfile.open(path, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.isfile() and m.name.endswith(".csv"))
        raw = tar.extractfile(member).read()
    lines = raw.splitlines(keepends=True)
    header = next(csv.reader([lines[0].decode()]))
    ip = header.index("container_ip")
    keys = [next(csv.reader([line.decode()]))[ip] for line in lines[1:]]
    chosen = set(sorted(set(keys))[:pods])
    data = lines[0] + b"".join(line for line, k in zip(lines[1:], keys) if k in chosen)
    info = tarfile.TarInfo(member.name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(data), 0, 0o644, 0, 0, "", ""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    return gz(buf.getvalue())


def build(full: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    usage = (full / ALIBABA_2018 / "machine_usage.csv").read_bytes().splitlines(keepends=True)
    files[f"{ALIBABA_2018}/machine_usage.csv.gz"] = gz(b"".join(full_days_machines(usage)))
    files[f"{ALIBABA_2018}/machine_meta.csv.gz"] = gz((full / ALIBABA_2018 / "machine_meta.csv").read_bytes())
    batch = (full / ALIBABA_2017 / "batch_task.csv").read_bytes().splitlines(keepends=True)
    files[f"{ALIBABA_2017}/batch_task.csv.gz"] = gz(b"".join(first_jobs(batch, BATCH_TASKS)))
    files[f"{GENAI}/pod_memory_util_anon.tar.gz"] = genai_subset(full / GENAI / "pod_memory_util_anon.tar.gz", GENAI_PODS)
    for name in ("openb_node_list_all_node.csv", "openb_pod_list_default.csv"):
        files[f"{GPU_2023}/{name}"] = (full / GPU_2023 / name).read_bytes()
    for vm in range(BITBRAINS_EVERY, 500, BITBRAINS_EVERY):
        files[f"{BITBRAINS}/{vm}.csv.gz"] = (full / BITBRAINS / f"{vm}.csv.gz").read_bytes()
    return files


def write(files: dict[str, bytes], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for child in out.iterdir():  # the tool owns everything but the notes
        if child.name in KEEP:
            continue
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    for rel, data in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in sorted(files.items()))
    (out / "SHA256SUMS").write_text(sums)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", default=os.environ.get("KOORD_TRACE_DIR"), help="the full trace set (KOORD_TRACE_DIR)")
    ap.add_argument("--out", default=str(SAMPLE), help="where the sample goes")
    args = ap.parse_args(argv)
    if not args.full or not Path(args.full).is_dir():
        print("the full trace set is needed: pass --full or set KOORD_TRACE_DIR", file=sys.stderr)
        return 2
    files = build(Path(args.full))
    write(files, Path(args.out))
    total = sum(len(d) for d in files.values())
    print(f"{len(files)} files, {total / 1e6:.2f} MB in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
