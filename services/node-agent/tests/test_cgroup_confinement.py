"""The node agent's cgroup writes stay below the cgroup root, whatever a pod says.

Pod uids, container ids and container names come from the API server (and so from whoever may
create pods); a hostile one must not steer a cgroup write outside the root. Each table below is
tried against the path builders, then a whole real-mode round (collection, QoS planning, the
executor's writes) runs on a fake cgroup tree whose neighbour directory holds a sentinel and
files a write could land in: every attempt is refused (CgroupPathError), counted
(`koord_agent_cgroup_refused_total{what}`), logged once per value, and the neighbour is left
byte for byte as it was, while the honest BE pod on the same node gets its writes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from koordcommon.records import ContainerSpec, NodeRecord, PodRecord
from koordcommon.schemas import NodeSLO, NodeSLOSpec
from node_agent.collect import cgroups
from node_agent.collect.cgroups import CgroupLayout, CgroupPathError
from node_agent.qos.files import CgroupFiles, shares_to_weight
from node_agent.qos.manager import QoSManager
from node_agent.real_mode import RealAgent
from node_agent.settings import AgentSettings
from prometheus_client import REGISTRY

S = 1_000_000_000
GI = 1 << 30
BATCH = {"koordinator.sh/batch-cpu": 2000, "koordinator.sh/batch-memory": 2 * GI}

HOSTILE_UIDS = [
    "../../outside",        # climbs out
    "..",
    ".",
    "a/b",                  # a second path component
    "/abs/olute",           # an absolute path
    "x\x00y",               # NUL: C strings end there
    "uid\n",                # a trailing newline (a `$` anchored pattern lets it through)
    "-rf",                  # not a name
    "",
    "a" * 300,              # over the 253 characters of a Kubernetes name
]
HOSTILE_CONTAINER_IDS = [
    "containerd://../../outside",
    "containerd://..",
    "docker://a/b",
    "containerd:///abs/olute",
    "/abs/olute",           # no runtime: taken as containerd, its id is a path
    "cri-o://x\x00y",
    "containerd://abc\n",
    "containerd://",
]
# Container names never become paths (a container's dir is named by its runtime id): a pod with
# these names and honest ids is written below its own dir and nowhere else.
HOSTILE_NAMES = ["../../outside", "/etc/passwd", "x\x00y"]


def refused(what: str) -> float:
    return REGISTRY.get_sample_value("koord_agent_cgroup_refused_total", {"what": what}) or 0.0


@pytest.fixture(autouse=True)
def fresh_log_memory():
    cgroups._LOGGED.clear()  # each test sees its own first refusals logged
    yield


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("uid", HOSTILE_UIDS)
def test_a_hostile_pod_uid_is_refused_and_counted(tmp_path, driver, uid):
    layout = CgroupLayout(tmp_path, "v2", driver)
    before = refused("pod uid")
    for qos in ("Guaranteed", "Burstable", "BestEffort"):
        with pytest.raises(CgroupPathError):
            layout.pod_dir(uid, qos)
    assert refused("pod uid") == before + 3


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("cid", HOSTILE_CONTAINER_IDS)
def test_a_hostile_container_id_is_refused_and_counted(tmp_path, driver, cid):
    layout = CgroupLayout(tmp_path, "v2", driver)
    pod = layout.pod_dir("11111111-1111-1111-1111-111111111111", "BestEffort")
    before = refused("container id")
    with pytest.raises(CgroupPathError):
        layout.container_dir(pod, cid)
    assert refused("container id") == before + 1


@pytest.mark.parametrize("rel,name", [
    ("kubepods/../..", "cpu.max"),
    ("/etc", "cpu.max"),
    ("kubepods/x\x00y", "cpu.max"),
    ("kubepods", "../cpu.max"),
    ("kubepods", "/etc/passwd"),
    ("kubepods", "cpu.max\x00"),
    ("kubepods", ".hidden"),
])  # fmt: skip
def test_dirs_and_file_names_that_leave_the_root_are_refused(tmp_path, rel, name):
    layout = CgroupLayout(tmp_path, "v2", "cgroupfs")
    before = refused("dir") + refused("file")
    with pytest.raises(CgroupPathError):
        layout.file_path(rel, name)
    assert refused("dir") + refused("file") == before + 1


def test_a_file_swapped_for_a_symlink_after_its_check_is_not_followed(tmp_path):
    """The path is checked once and remembered; a write opens it without following a symlink, so
    a file replaced by one later (a race with whoever can write the tree) is refused, not followed."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "kubepods").mkdir(parents=True)
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("untouched\n")
    (root / "kubepods" / "cpu.weight").write_text("100\n")
    files = CgroupFiles(CgroupLayout(root, "v2", "cgroupfs"))
    assert files.write("kubepods", "cpu.shares", 2048) is not None  # checked, remembered, written
    (root / "kubepods" / "cpu.weight").unlink()
    (root / "kubepods" / "cpu.weight").symlink_to(victim)
    before = refused("file")
    with pytest.raises(CgroupPathError):
        files.write("kubepods", "cpu.shares", 4096)
    assert victim.read_text() == "untouched\n" and refused("file") == before + 1


class FakeCluster:
    def __init__(self, node, pods):
        self.node, self.pods = node, pods

    async def get_node(self, name):
        return self.node

    async def list_pods(self, node_name=None, namespace=None):
        return self.pods

    async def evict_pod(self, *args, **kwargs):  # pragma: no cover - no eviction is planned here
        raise AssertionError("no eviction expected")


def be_pod(uid: str, name: str, container_ids: dict[str, str] | None = None) -> PodRecord:
    ids = container_ids if container_ids is not None else {"main": f"containerd://{uid[:8]}"}
    return PodRecord(namespace="b", name=name, uid=uid, node_name="n1", phase="Running",
                     labels={"koordinator.sh/qosClass": "BE"},
                     containers=[ContainerSpec(c, dict(BATCH), dict(BATCH)) for c in ids],
                     container_ids=ids)  # fmt: skip


def snapshot(top: Path) -> dict[str, bytes | str]:
    """Every entry below `top`: a file's bytes, a symlink's target, a dir's mark."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            key = str(p.relative_to(top))
            out[key] = f"-> {os.readlink(p)}" if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes())
    return out


CPU_FILES = {"v1": {"cpu": ("cpu.shares", "1024\n"), "cpu ": ("cpu.cfs_quota_us", "-1\n"),
                    "memory": ("memory.limit_in_bytes", "9223372036854771712\n")},
             "v2": {"cpu": ("cpu.weight", "100\n"), "cpu ": ("cpu.max", "max 100000\n"),
                    "memory": ("memory.max", "max\n")}}  # fmt: skip


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
async def test_a_whole_round_with_hostile_pods_writes_nothing_outside_the_root(fake_tree, tmp_path, driver, caplog):
    tree = fake_tree
    outside = tmp_path / "outside"  # the neighbour of the cgroup root (tmp_path/cgroup)
    outside.mkdir()
    (outside / "sentinel").write_text("do not touch\n")
    for sub, (name, text) in CPU_FILES[tree.version].items():  # files an escaped write could land in
        (outside / name).write_text(text)
        (outside / "pod" / sub.strip()).mkdir(parents=True, exist_ok=True)
        (outside / "pod" / sub.strip() / name).write_text(text)

    honest = be_pod("22222222-2222-2222-2222-222222222222", "honest")
    hostile = [be_pod(uid, f"uid-{i}") for i, uid in enumerate(HOSTILE_UIDS)]
    bad_ids = be_pod("33333333-3333-3333-3333-333333333333", "bad-ids",
                     {f"c{i}": cid for i, cid in enumerate(HOSTILE_CONTAINER_IDS)})
    bad_names = be_pod("44444444-4444-4444-4444-444444444444", "bad-names",
                       {name: f"containerd://{i:04d}beef" for i, name in enumerate(HOSTILE_NAMES)})
    linked_dir = be_pod("55555555-5555-5555-5555-555555555555", "linked-dir")
    linked_file = be_pod("66666666-6666-6666-6666-666666666666", "linked-file")
    pods = [honest, *hostile, bad_ids, bad_names, linked_dir, linked_file]

    tree.dir("kubepods.slice" if driver == "systemd" else "kubepods", "cpu")
    node = NodeRecord(name="n1", capacity={"cpu": 16000, "memory": 64 * GI}, allocatable={"cpu": 16000, "memory": 64 * GI})
    settings = AgentSettings(mode="real", node_name="n1", cgroup_root=str(tree.root), proc_root=str(tree.proc))
    cluster = FakeCluster(node, pods)
    agent = RealAgent(settings, publish=None, cluster=cluster)
    await agent.refresh()
    layout = agent.layout
    assert layout.driver == driver

    def dirs_of(pod: PodRecord) -> list[str]:
        rel = layout.pod_dir(pod.uid, "BestEffort")
        return [rel, *(layout.container_dir(rel, cid) for cid in pod.container_ids.values())]

    def subsystems():
        return ["cpu", "cpuacct", "cpuset", "memory"] if tree.version == "v1" else [""]

    def make(rel: str) -> None:  # the dirs the kubelet made, with the files the strategies write
        tree.set_cgroup(rel, cpu_ns=0, active_anon=GI // 4)
        for sub, (name, text) in CPU_FILES[tree.version].items():
            tree.write(rel, sub.strip(), name, text)
        tree.write(rel, "cpuset", "cpuset.cpus", "0-15\n")

    for rel in [layout.qos_dir("BestEffort"), *dirs_of(honest), *dirs_of(bad_names), *dirs_of(linked_file)]:
        make(rel)
    make(layout.pod_dir(bad_ids.uid, "BestEffort"))
    # linked-dir: its pod dir is a symlink to the neighbour (per subsystem on v1)
    pod_rel = dirs_of(linked_dir)[0]
    for sub in subsystems():
        link = tree.root / sub / pod_rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(outside / "pod" / (sub or "cpu"))
    # linked-file: a real dir whose CPU weight file is a symlink to the neighbour's
    name = CPU_FILES[tree.version]["cpu"][0]
    for rel in dirs_of(linked_file)[:1]:
        f = tree.root / ("cpu" if tree.version == "v1" else "") / rel / name
        f.unlink()
        f.symlink_to(outside / name)

    manager = QoSManager(agent, None, settings, cluster, simulated=False)
    agent.on_round.append(manager.on_round)
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(
        update={"enable": True, "cpuSuppressPolicy": "cfsQuota"})
    manager.set_slo(NodeSLO(node="n1", spec=spec))
    agent.collector.proc.ticks_per_s = 100
    neighbour = snapshot(outside)
    counts = {w: refused(w) for w in ("pod uid", "container id", "dir", "file")}
    caplog.set_level(logging.ERROR, logger="node_agent.collect.cgroups")

    for n in range(3):  # a baseline and two rounds: the same pods refused again, logged once
        tree.set_proc(user=1000 + n * 300, nice=0, system=100, idle=5000 + n * 1200, iowait=0, irq=0, softirq=0,
                      mem_total_kb=64 * 1024 * 1024, mem_avail_kb=50 * 1024 * 1024)
        r = agent.collect(n * 1000, n * S)
        await manager.on_round(n * 1000, {"n1": r})

    assert snapshot(outside) == neighbour, "a write reached outside the cgroup root"
    # the honest pods were written (each container batch-cpu 2000 -> shares 2048, the pod the sum),
    # so the check above can fail
    for pod in (honest, bad_names):
        pod_dir, *container_dirs = dirs_of(pod)
        for rel, shares in [(pod_dir, 2048 * len(container_dirs)), *((c, 2048) for c in container_dirs)]:
            f = tree.root / ("cpu" if tree.version == "v1" else "") / rel / name
            want = shares if tree.version == "v1" else shares_to_weight(shares)
            assert f.read_text().strip() == str(want), (pod.name, rel)
    # every hostile value refused in every round, each counted
    grown = {w: refused(w) - counts[w] for w in counts}
    assert grown["pod uid"] >= 3 * len(HOSTILE_UIDS), grown
    assert grown["container id"] >= 3 * len(HOSTILE_CONTAINER_IDS), grown
    assert grown["file"] >= 2, grown  # files below the symlinked pod dir, the symlinked file
    # ... and logged once per value
    logged = [(rec.__dict__["what"], rec.__dict__["value"]) for rec in caplog.records
              if rec.getMessage() == "cgroup path refused"]  # fmt: skip
    for value in [*HOSTILE_UIDS, *HOSTILE_CONTAINER_IDS, dirs_of(linked_dir)[0], dirs_of(linked_file)[0]]:
        assert any(repr(value)[1:-1][:200] in v for _, v in logged), value
    assert len(logged) == len(set(logged)), "a refused value was logged again"
    # the collector did not read through the symlinked pod dir either
    assert linked_dir.uid not in r.pods
