"""Fake /proc and cgroup v1/v2 trees in a temp dir, written in the kernel's file formats."""

from __future__ import annotations

from pathlib import Path

import pytest

V2_CPU_STAT = """usage_usec {usage}
user_usec {user}
system_usec {system}
core_sched.force_idle_usec 0
nr_periods {periods}
nr_throttled {throttled}
throttled_usec {throttled_us}
nr_bursts 0
burst_usec 0
"""

V1_CPU_STAT = """nr_periods {periods}
nr_throttled {throttled}
throttled_time {throttled_ns}
"""

V2_MEMORY_STAT = """anon {anon}
file {file}
kernel 1056768
kernel_stack 16384
pagetables 49152
sec_pagetables 0
percpu 0
sock 0
vmalloc 0
shmem 0
zswap 0
zswapped 0
file_mapped 4096
file_dirty 0
file_writeback 0
swapcached 0
anon_thp 0
file_thp 0
shmem_thp 0
inactive_anon {inactive_anon}
active_anon {active_anon}
inactive_file {inactive_file}
active_file {active_file}
unevictable {unevictable}
slab_reclaimable 40960
slab_unreclaimable 90112
slab 131072
workingset_refault_anon 0
workingset_refault_file 0
pgfault 1234
pgmajfault 0
"""

V1_MEMORY_STAT = """cache {file}
rss {anon}
rss_huge 0
shmem 0
mapped_file 4096
dirty 0
writeback 0
swap 0
pgpgin 100
pgpgout 50
pgfault 1234
pgmajfault 0
inactive_anon {inactive_anon}
active_anon {active_anon}
inactive_file {inactive_file}
active_file {active_file}
unevictable {unevictable}
hierarchical_memory_limit 9223372036854771712
hierarchical_memsw_limit 9223372036854771712
total_cache {file}
total_rss {anon}
total_rss_huge 0
total_shmem 0
total_mapped_file 4096
total_dirty 0
total_writeback 0
total_swap 0
total_pgpgin 100
total_pgpgout 50
total_pgfault 1234
total_pgmajfault 0
total_inactive_anon {inactive_anon}
total_active_anon {active_anon}
total_inactive_file {inactive_file}
total_active_file {active_file}
total_unevictable {unevictable}
"""

PSI = """some avg10={some:.2f} avg60=0.50 avg300=0.10 total=123456
full avg10={full:.2f} avg60=0.20 avg300=0.05 total=23456
"""


class FakeTree:
    def __init__(self, base: Path, version: str) -> None:
        self.root = base / "cgroup"
        self.proc = base / "proc"
        self.version = version
        self.root.mkdir(parents=True)
        self.proc.mkdir()
        if version == "v2":
            (self.root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
        else:
            for sub in ("cpu", "cpuacct", "cpuset", "memory"):
                (self.root / sub).mkdir()

    def dir(self, rel: str, subsystem: str) -> Path:
        d = self.root / rel if self.version == "v2" else self.root / subsystem / rel
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write(self, rel: str, subsystem: str, name: str, text: str) -> Path:
        p = self.dir(rel, subsystem) / name
        p.write_text(text)
        return p

    def set_cgroup(self, rel, *, cpu_ns, anon=0, active_anon=0, inactive_anon=0, unevictable=0, file=0,
                   periods=0, throttled=0, throttled_ns=0, psi=None):
        mem = {"anon": anon, "file": file, "inactive_anon": inactive_anon, "active_anon": active_anon,
                   "inactive_file": file // 2, "active_file": file - file // 2, "unevictable": unevictable}
        if self.version == "v2":
            self.write(rel, "cpu", "cpu.stat", V2_CPU_STAT.format(
                usage=cpu_ns // 1000, user=cpu_ns // 2000, system=cpu_ns // 2000, periods=periods,
                throttled=throttled, throttled_us=throttled_ns // 1000))
            self.write(rel, "memory", "memory.stat", V2_MEMORY_STAT.format(**mem))
            if psi:
                self.write(rel, "cpu", "cpu.pressure", PSI.format(some=psi[0], full=psi[1]))
        else:
            self.write(rel, "cpuacct", "cpuacct.usage", f"{cpu_ns}\n")
            self.write(rel, "cpu", "cpu.stat", V1_CPU_STAT.format(
                periods=periods, throttled=throttled, throttled_ns=throttled_ns))
            self.write(rel, "memory", "memory.stat", V1_MEMORY_STAT.format(**mem))
            self.dir(rel, "cpuset")

    def set_proc(self, *, user, nice, system, idle, iowait, irq, softirq, steal=0, mem_total_kb, mem_avail_kb,
                 mem_free_kb=None):
        self.proc.joinpath("stat").write_text(
            f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\n"
            f"cpu0 {user // 2} {nice} {system // 2} {idle // 2} {iowait} {irq} {softirq} {steal} 0 0\n"
            f"cpu1 {user - user // 2} 0 {system - system // 2} {idle - idle // 2} 0 0 0 0 0 0\n"
            "intr 12345 0 0\nctxt 99999\nbtime 1700000000\nprocesses 1234\n"
        )
        free = mem_avail_kb // 2 if mem_free_kb is None else mem_free_kb
        self.proc.joinpath("meminfo").write_text(
            f"MemTotal:       {mem_total_kb} kB\nMemFree:        {free} kB\n"
            f"MemAvailable:   {mem_avail_kb} kB\nBuffers:            3952 kB\nCached:           247052 kB\n"
        )


@pytest.fixture(params=["v1", "v2"])
def fake_tree(tmp_path, request):
    return FakeTree(tmp_path, request.param)


@pytest.fixture
def make_tree(tmp_path):
    def make(version: str) -> FakeTree:
        return FakeTree(tmp_path / version, version)

    return make
