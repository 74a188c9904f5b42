import math

import pytest
from koordcommon.model import KubeQoS
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from node_agent.collect.cgroups import (
    CgroupLayout,
    CgroupPathError,
    CgroupReader,
    memory_usage_from_stat,
    parse_flat_keyed,
    parse_psi,
)
from node_agent.collect.node import RealCollector
from node_agent.collect.procfs import ProcReader, parse_cpu_ticks
from node_agent.core.messages import NodeHistory
from node_agent.core.pods import PodInfo

UID = "7712555c-ce62-454a-9e18-9ff0217b8941"
S = 1_000_000_000


@pytest.mark.parametrize(
    "driver,qos,expected",
    [
        ("cgroupfs", "Guaranteed", "kubepods/pod7712555c-ce62-454a-9e18-9ff0217b8941"),
        ("cgroupfs", "Burstable", "kubepods/burstable/pod7712555c-ce62-454a-9e18-9ff0217b8941"),
        ("cgroupfs", "BestEffort", "kubepods/besteffort/pod7712555c-ce62-454a-9e18-9ff0217b8941"),
        ("systemd", "Guaranteed", "kubepods.slice/kubepods-pod7712555c_ce62_454a_9e18_9ff0217b8941.slice"),
        (
            "systemd",
            "Burstable",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7712555c_ce62_454a_9e18_9ff0217b8941.slice",
        ),
        (
            "systemd",
            "BestEffort",
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7712555c_ce62_454a_9e18_9ff0217b8941.slice",
        ),
    ],
)
def test_pod_dirs_follow_koordlet_layout(tmp_path, driver, qos, expected):
    assert CgroupLayout(tmp_path, "v2", driver).pod_dir(UID, qos) == expected


@pytest.mark.parametrize(
    "driver,cid,expected",
    [
        ("cgroupfs", "docker://abc1", "P/abc1"),
        ("cgroupfs", "containerd://abc1", "P/abc1"),
        ("systemd", "docker://abc1", "P/docker-abc1.scope"),
        ("systemd", "containerd://abc1", "P/cri-containerd-abc1.scope"),
        ("systemd", "cri-o://abc1", "P/crio-abc1.scope"),
        ("systemd", "pouch://abc1", "P/pouch-abc1.scope"),
    ],
)
def test_container_dirs(tmp_path, driver, cid, expected):
    assert CgroupLayout(tmp_path, "v1", driver).container_dir("P", cid) == expected


@pytest.mark.parametrize("bad", ["../../etc", "a/b", "..", "", "x" * 300])
def test_ids_that_would_leave_the_root_are_refused(tmp_path, bad):
    layout = CgroupLayout(tmp_path, "v2", "cgroupfs")
    with pytest.raises(CgroupPathError):
        layout.pod_dir(bad, "Burstable")
    with pytest.raises(CgroupPathError):
        layout.file_path("kubepods/../../..", "cpu.max")


def test_symlink_out_of_the_root_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "kubepods").symlink_to(tmp_path / "outside")
    layout = CgroupLayout(tmp_path / "root", "v2", "cgroupfs")
    with pytest.raises(CgroupPathError):
        layout.file_path("kubepods/burstable", "cpu.max")


@pytest.mark.parametrize(
    "version,make,driver",
    [("v1", "kubepods", "cgroupfs"), ("v1", "kubepods.slice", "systemd"), ("v2", "kubepods", "cgroupfs"),
     ("v2", "kubepods.slice", "systemd"), ("v2", None, "systemd")],
)
def test_version_and_driver_detection(make_tree, version, make, driver):
    tree = make_tree(version)
    if make:
        tree.dir(make, "cpu")
    layout = CgroupLayout.detect(tree.root)
    assert (layout.version, layout.driver) == (version, driver)


def test_memory_stat_parsing_needs_every_key():
    stat = parse_flat_keyed("inactive_anon 1\nactive_anon 2\nunevictable 3\nfile 0\nanon 3\ninactive_file 0\n")
    with pytest.raises(ValueError, match="active_file"):
        memory_usage_from_stat(stat, "v2")
    stat["active_file"] = 99
    assert memory_usage_from_stat(stat, "v2") == 6


def test_psi_without_full_line():
    assert parse_psi("some avg10=1.50 avg60=0.00 avg300=0.00 total=10\n") == {
        "some_avg10": 1.5,
        "full_avg10": 0.0,
        "full_supported": 0.0,
    }
    with pytest.raises(ValueError):
        parse_psi("bogus avg10=1\n")


def test_proc_stat_fields():
    # user nice system idle iowait irq softirq steal: usage = 1 + 2 + 3 + 6 + 7
    assert parse_cpu_ticks("cpu  1 2 3 4 5 6 7 8 9 10\n") == 19
    with pytest.raises(ValueError):
        parse_cpu_ticks("cpu  1 2 3 4 5 6\n")


def _pods():
    burst = PodRecord(
        namespace="ns",
        name="web",
        uid=UID,
        containers=[ContainerSpec("app", {"cpu": 500}, {"cpu": 1000})],
        container_ids={"app": "containerd://abc123"},
        phase="Running",
    )
    be = PodRecord(namespace="ns", name="job", uid="be-1", containers=[ContainerSpec("main")], phase="Running")
    return [PodInfo.from_record(burst), PodInfo.from_record(be)]


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_two_reads_publish_exact_node_pod_and_container_usage(fake_tree, driver):
    tree = fake_tree
    layout = CgroupLayout(tree.root, tree.version, driver)
    web, job = _pods()
    assert web.kube_qos is KubeQoS.BURSTABLE and job.kube_qos is KubeQoS.BEST_EFFORT
    web_dir = layout.pod_dir(web.uid, web.kube_qos)
    job_dir = layout.pod_dir(job.uid, job.kube_qos)
    app_dir = layout.container_dir(web_dir, "containerd://abc123")
    MI = 1 << 20

    def read(cpu_web, cpu_app, cpu_job, mem_mi, proc):
        tree.set_cgroup(web_dir, cpu_ns=cpu_web, inactive_anon=mem_mi * MI, active_anon=2 * mem_mi * MI,
                        unevictable=MI, file=500 * MI, anon=3 * mem_mi * MI, periods=proc["p"], throttled=proc["t"],
                        psi=(1.25, 0.5))
        tree.set_cgroup(app_dir, cpu_ns=cpu_app, inactive_anon=mem_mi * MI, active_anon=mem_mi * MI, file=9 * MI)
        tree.set_cgroup(job_dir, cpu_ns=cpu_job, active_anon=100 * MI, file=700 * MI)
        tree.set_proc(user=proc["user"], nice=0, system=proc["sys"], idle=proc["idle"], iowait=proc["iowait"],
                      irq=proc["irq"], softirq=proc["soft"], steal=proc["steal"],
                      mem_total_kb=16_384_000, mem_avail_kb=proc["avail"])

    if tree.version == "v2":  # PSI support is judged once, on the kubepods dir
        tree.write(layout.kubepods_dir(), "cpu", "cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    proc_reader = ProcReader(tree.proc)
    proc_reader.ticks_per_s = 100
    collector = RealCollector(proc_reader, CgroupReader(layout))
    history = NodeHistory("n1")
    history.set_pods([web, job])

    read(2 * S, 1 * S, 7 * S, 10,
         {"user": 1000, "sys": 500, "idle": 10_000, "iowait": 50, "irq": 10, "soft": 5, "steal": 7, "avail": 12_288_000, "p": 100, "t": 10})
    r1 = collector.collect([web, job], 100 * S)
    assert math.isnan(r1.node[0]) and math.isnan(r1.pods[web.uid][0])  # first read is a baseline
    history.record(100_000, r1.node, r1.pods, r1.containers)

    # +1 s: web +500 ms of cpu, app +400 ms, job +250 ms; node +175 ticks of usage (iowait and steal ignored)
    read(2 * S + 500_000_000, 1 * S + 400_000_000, 7 * S + 250_000_000, 20,
         {"user": 1150, "sys": 520, "idle": 10_080, "iowait": 150, "irq": 12, "soft": 8, "steal": 57, "avail": 12_000_000, "p": 110, "t": 14})
    r2 = collector.collect([web, job], 101 * S)
    assert r2.node == (1750.0, (16_384_000 - 12_000_000) * 1024.0)
    assert r2.pods[web.uid] == (500.0, float((20 + 40 + 1) * MI))
    assert r2.pods[job.uid] == (250.0, float(100 * MI))
    assert r2.containers[(web.uid, "app")] == (400.0, float(40 * MI))
    assert r2.extensions["cpu_throttled_ratio"] == {web.uid: 0.4}
    if tree.version == "v2":
        assert r2.extensions["psi_avg10"][web.uid]["cpu"] == {"some_avg10": 1.25, "full_avg10": 0.5,
                                                             "full_supported": 1.0}
    history.record(101_000, r2.node, r2.pods, r2.containers)

    s = history.sample(101_000, 10)
    # cpu from the one rate; memory averaged over both reads
    mem1, mem2 = (16_384_000 - 12_288_000) * 1024, (16_384_000 - 12_000_000) * 1024
    assert s.node_usage == Resources(1750, (mem1 + mem2) // 2)
    web_s = next(p for p in s.pods if p.name == "web")
    assert web_s.usage == Resources(500, (31 * MI + 61 * MI) // 2)
    assert [(c.name, c.usage) for c in web_s.containers] == [("app", Resources(400, 30 * MI))]  # memory: (20 + 40) / 2
    # system: node - pods in round 2 (cpu); memory per round then averaged
    assert s.system_usage == Resources(1750 - 750, ((mem1 - 131 * MI) + (mem2 - 161 * MI)) // 2)


def test_counter_reset_and_vanished_cgroups(fake_tree):
    tree = fake_tree
    layout = CgroupLayout(tree.root, tree.version, "cgroupfs")
    web, job = _pods()
    tree.set_proc(user=1, nice=0, system=1, idle=1, iowait=0, irq=0, softirq=0, mem_total_kb=1000, mem_avail_kb=500)
    web_dir = layout.pod_dir(web.uid, web.kube_qos)
    tree.set_cgroup(web_dir, cpu_ns=5 * S, active_anon=1)
    c = RealCollector(ProcReader(tree.proc), CgroupReader(layout))
    c.collect([web, job], 0)  # job has no cgroup yet: skipped, not an error
    tree.set_cgroup(web_dir, cpu_ns=1 * S, active_anon=1)  # restarted: counter went back
    r = c.collect([web, job], S)
    assert math.isnan(r.pods[web.uid][0]) and job.uid not in r.pods
    tree.set_cgroup(web_dir, cpu_ns=2 * S, active_anon=1)
    assert c.collect([web, job], 2 * S).pods[web.uid][0] == 1000.0
    import shutil

    shutil.rmtree(tree.root / web_dir if tree.version == "v2" else tree.root / "cpuacct" / web_dir)
    r = c.collect([web, job], 3 * S)
    assert r.pods == {}
    assert ("pod", web.uid) not in c.rates._prev
    assert c.errors == 0


def test_bad_uid_is_skipped_and_counted(fake_tree):
    tree = fake_tree
    tree.set_proc(user=1, nice=0, system=1, idle=1, iowait=0, irq=0, softirq=0, mem_total_kb=1000, mem_avail_kb=500)
    bad = PodInfo(uid="../../../etc", namespace="x", name="evil", kube_qos=KubeQoS.BURSTABLE)
    c = RealCollector(ProcReader(tree.proc), CgroupReader(CgroupLayout(tree.root, tree.version, "cgroupfs")))
    assert c.collect([bad], 0).pods == {}
    assert c.errors == 1


def test_oom_kill_counter_growth_stamps_the_container(fake_tree):
    """memory.events (v2) / memory.oom_control (v1) oom_kill growing between rounds marks the
    container's last OOM kill in the published sample; the first reading is only a baseline."""
    tree = fake_tree
    layout = CgroupLayout(tree.root, tree.version, "cgroupfs")
    web, job = _pods()
    web_dir = layout.pod_dir(web.uid, web.kube_qos)
    app_dir = layout.container_dir(web_dir, "containerd://abc123")
    events = "memory.oom_control" if tree.version == "v1" else "memory.events"

    def kills(n: int) -> str:
        if tree.version == "v1":
            return f"oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"
        return f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {n}\noom_group_kill 0\n"

    tree.set_proc(user=1, nice=0, system=1, idle=1, iowait=0, irq=0, softirq=0, mem_total_kb=1000, mem_avail_kb=500)
    collector = RealCollector(ProcReader(tree.proc), CgroupReader(layout))
    history = NodeHistory("n1")
    history.set_pods([web, job])
    for t, n in ((1, 2), (2, 2), (3, 3), (4, 3)):  # 2 kills before we looked, one at t=3 s
        tree.set_cgroup(web_dir, cpu_ns=t * S, active_anon=1)
        tree.set_cgroup(app_dir, cpu_ns=t * S, active_anon=1)
        tree.write(app_dir, "memory", events, kills(n))
        r = collector.collect([web, job], t * S)
        assert r.oom_kills == {(web.uid, "app"): n}
        history.record(t * 1000, r.node, r.pods, r.containers)
        history.record_oom_kills(t * 1000, r.oom_kills)
        if t == 1:
            continue  # the first round is every counter's baseline: no rates, no sample yet
        app = next(c for p in history.sample(t * 1000, 10).pods if p.uid == web.uid for c in p.containers)
        assert app.last_oom_ms == (None if t < 3 else 3000)
    assert CgroupReader(layout).oom_kills(web_dir) is None  # no counter file: unknown, not zero
