import errno

import pytest
from koordcommon.cpus import parse_cpuset
from node_agent.collect.cgroups import CgroupLayout
from node_agent.qos.executor import WRITES, Executor
from node_agent.qos.files import CgroupFiles, MemoryCgroupFiles, shares_to_weight, weight_to_shares
from node_agent.qos.model import MAX_INT64, CgroupWrite

BE = "kubepods/besteffort"
POD = "kubepods/besteffort/pod1234"


def seed(tree):
    """Files as the kernel presents them for an unlimited BE dir and pod."""
    for rel in (BE, POD):
        if tree.version == "v2":
            tree.write(rel, "cpu", "cpu.max", "max 100000\n")
            tree.write(rel, "cpu", "cpu.weight", "100\n")
            tree.write(rel, "cpu", "cpu.max.burst", "0\n")
            tree.write(rel, "cpu", "cpuset.cpus", "\n")
            tree.write(rel, "memory", "memory.max", "max\n")
            tree.write(rel, "memory", "memory.high", "max\n")
            tree.write(rel, "memory", "memory.min", "0\n")
        else:
            tree.write(rel, "cpu", "cpu.cfs_quota_us", "-1\n")
            tree.write(rel, "cpu", "cpu.cfs_period_us", "100000\n")
            tree.write(rel, "cpu", "cpu.shares", "1024\n")
            tree.write(rel, "cpuset", "cpuset.cpus", "0-15\n")
            tree.write(rel, "memory", "memory.limit_in_bytes", "9223372036854771712\n")


def file_of(tree, rel, v1name, v2name):
    sub = v1name.split(".")[0]
    return (tree.root / rel / v2name) if tree.version == "v2" else (tree.root / sub / rel / v1name)


@pytest.mark.parametrize(
    "resource,value,v1_text,v2_name,v2_text",
    [
        ("cpu.cfs_quota_us", 340000, "340000", "cpu.max", "340000 100000"),
        ("cpu.cfs_quota_us", -1, None, "cpu.max", None),  # already unlimited: no write
        ("cpu.shares", 2048, "2048", "cpu.weight", "79"),  # 1 + 2046 x 9999 / 262142
        ("memory.limit_in_bytes", 3 << 30, "3221225472", "memory.max", "3221225472"),
        ("cpuset.cpus", "0-1,8-9", "0-1,8-9", "cpuset.cpus", "0-1,8-9"),
    ],
)
def test_writes_map_to_each_version_and_are_idempotent(fake_tree, resource, value, v1_text, v2_name, v2_text):
    seed(fake_tree)
    ex = Executor(CgroupFiles(CgroupLayout(fake_tree.root, fake_tree.version, "cgroupfs")), "n1")
    w = CgroupWrite(BE, resource, value, "cpu_suppress", "qos")
    expected = v1_text if fake_tree.version == "v1" else v2_text
    events = ex.write([w], now_ms=123)
    path = file_of(fake_tree, BE, resource, v2_name)
    if expected is None:
        assert events == []
    else:
        assert path.read_text().strip() == expected
        (e,) = events
        assert (e.kind, e.node, e.action, e.ts, e.target["path"], e.details["new"]) == (
            "qos", "n1", "cpu_suppress", 123, BE, expected)
    assert ex.write([w]) == []  # the second time nothing changes


def test_unlimited_reads_back_as_minus_one(fake_tree):
    seed(fake_tree)
    files = CgroupFiles(CgroupLayout(fake_tree.root, fake_tree.version, "cgroupfs"))
    assert files.read(BE, "cpu.cfs_quota_us") == "-1"
    assert files.read(BE, "memory.limit_in_bytes") == "-1"
    ex = Executor(files, "n1")
    assert ex.write([CgroupWrite(BE, "memory.limit_in_bytes", -1, "batch_resources")]) == []


def test_unsupported_files_are_reported_once(fake_tree):
    seed(fake_tree)
    ex = Executor(CgroupFiles(CgroupLayout(fake_tree.root, fake_tree.version, "cgroupfs")), "n1")
    w = [CgroupWrite(BE, "cpu.bvt_warp_ns", 2, "group_identity", "qos"),
         CgroupWrite(POD, "cpu.bvt_warp_ns", 2, "group_identity")]
    events = ex.write(w)
    assert [(e.action, e.reason) for e in events] == [("unsupported", "cpu.bvt_warp_ns")]
    assert ex.write(w) == []
    assert not file_of(fake_tree, BE, "cpu.bvt_warp_ns", "cpu.bvt_warp_ns").exists()


@pytest.mark.parametrize("rel", ["../../etc", "kubepods/../../..", "/etc"])
def test_paths_leaving_the_root_are_refused(fake_tree, rel, tmp_path):
    seed(fake_tree)
    outside = tmp_path / "etc"
    ex = Executor(CgroupFiles(CgroupLayout(fake_tree.root, fake_tree.version, "cgroupfs")), "n1")
    assert ex.write([CgroupWrite(rel, "cpu.shares", 2, "x")]) == []
    assert not outside.exists() or not any(outside.iterdir())


def test_dry_run_reports_without_writing(fake_tree):
    seed(fake_tree)
    ex = Executor(CgroupFiles(CgroupLayout(fake_tree.root, fake_tree.version, "cgroupfs")), "n1", dry_run=True)
    (e,) = ex.write([CgroupWrite(BE, "cpu.cfs_quota_us", 2000, "cpu_suppress", "qos")])
    assert e.dry_run and e.details["new"] == "2000"
    assert CgroupFiles(ex.files.layout).read(BE, "cpu.cfs_quota_us") == "-1"


def test_memory_high_unlimited_on_v2(make_tree):
    tree = make_tree("v2")
    seed(tree)
    ex = Executor(CgroupFiles(CgroupLayout(tree.root, "v2", "cgroupfs")), "n1")
    assert ex.write([CgroupWrite(POD, "memory.high", MAX_INT64, "memory_qos")]) == []
    ex.write([CgroupWrite(POD, "memory.high", 1932734464, "memory_qos")])
    assert (tree.root / POD / "memory.high").read_text().strip() == "1932734464"


@pytest.mark.parametrize("shares,weight", [(2, 1), (1024, 39), (262144, 10000)])
def test_shares_weight(shares, weight):
    assert shares_to_weight(shares) == weight
    assert abs(weight_to_shares(weight) - shares) < 30


class SubsetCpusets(MemoryCgroupFiles):
    """Simulated cgroups with the kernel's cpuset rule: a child's CPUs stay within its parent's
    (EINVAL otherwise), `refuse_always` dirs refuse every cpuset write."""

    def __init__(self, refuse_always=()):
        super().__init__({"cpuset.cpus": "0-3"})
        self.refuse_always = set(refuse_always)
        self.tries: list[str] = []

    def write(self, rel, resource, value):
        self.tries.append(rel)
        if resource == "cpuset.cpus":
            parent = rel.rsplit("/", 1)[0]
            wider = rel == POD and not set(parse_cpuset(str(value))) <= set(parse_cpuset(self.read(parent, resource)))
            if rel in self.refuse_always or wider:
                raise OSError(errno.EINVAL, "Invalid argument")
        return super().write(rel, resource, value)


def _count(strategy, outcome):
    return WRITES.labels(strategy, outcome)._value.get()


@pytest.mark.parametrize(
    "refuse_always, tries, pod_cpus, written, errors",
    [
        # the pod (child) first: the kernel refuses it while the BE dir is narrower; after the
        # rest of the round (the BE dir widened) it is tried once more and taken
        ((), [POD, BE, POD], "0-7", 2, 0),
        # a dir the kernel always refuses: tried twice, counted as an error, no event, unchanged
        ((POD,), [POD, BE, POD], "0-3", 1, 1),
    ],
)
def test_a_write_the_kernel_refuses_is_tried_again_after_the_rest(refuse_always, tries, pod_cpus, written, errors):
    files = SubsetCpusets(refuse_always)
    ex = Executor(files, "n1")
    before = (_count("cpu_suppress", "written"), _count("cpu_suppress", "error"))
    events = ex.write([CgroupWrite(POD, "cpuset.cpus", "0-7", "cpu_suppress", "pod"),
                       CgroupWrite(BE, "cpuset.cpus", "0-7", "cpu_suppress", "qos")])
    assert files.tries == tries
    assert files.read(POD, "cpuset.cpus") == pod_cpus and files.read(BE, "cpuset.cpus") == "0-7"
    assert [e.target["path"] for e in events] == ([BE, POD] if written == 2 else [BE])
    after = (_count("cpu_suppress", "written"), _count("cpu_suppress", "error"))
    assert (after[0] - before[0], after[1] - before[1]) == (written, errors)
