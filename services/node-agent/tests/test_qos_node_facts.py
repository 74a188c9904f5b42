"""What QoS learns of a node besides its pods (node object, kubelet checkpoint, NodeSLO host
applications), and which NodeSLO settings the agent says it does not honour."""

import json
from pathlib import Path

import pytest
from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, NodeRecord, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import HostApplicationSpec, NodeSLOSpec
from node_agent.collect.cgroups import CgroupLayout
from node_agent.core.pods import PodInfo
from node_agent.qos.nodeinfo import (
    host_app_dir,
    host_apps,
    kubelet_pinned_cpus,
    node_facts,
    parse_cpu_manager_state,
)
from node_agent.qos.support import not_supported

CGROUPFS = CgroupLayout(Path("/sys/fs/cgroup"), "v1", "cgroupfs")
SYSTEMD = CgroupLayout(Path("/sys/fs/cgroup"), "v2", "systemd")


@pytest.mark.parametrize(
    "annotations,allocatable,expected",
    [
        ({}, {"cpu": 16000}, ({}, set(), set(), 0)),
        # batch/mid allocatable under either prefix
        ({}, {"kubernetes.io/batch-cpu": 7000, "koordinator.sh/batch-memory": 8 << 30, "kubernetes.io/mid-cpu": 0},
         ({"batch-cpu": 7000, "batch-memory": 8 << 30, "mid-cpu": 0}, set(), set(), 0)),
        # a SYSTEM-QoS cpuset is exclusive unless it says otherwise
        ({"node.koordinator.sh/system-qos-resource": '{"cpuset": "0-1"}'}, {}, ({}, {0, 1}, set(), 0)),
        ({"node.koordinator.sh/system-qos-resource": '{"cpuset": "0-1", "cpusetExclusive": false}'}, {},
         ({}, set(), set(), 0)),
        # the reservation: its CPUs (and as many cores of cpu), or its cpu quantity
        ({"node.koordinator.sh/reservation": '{"reservedCPUs": "2,6"}'}, {}, ({}, set(), {2, 6}, 2000)),
        ({"node.koordinator.sh/reservation": '{"resources": {"cpu": "1500m"}}'}, {}, ({}, set(), set(), 1500)),
        ({"node.koordinator.sh/reservation": "not json"}, {}, ({}, set(), set(), 0)),
    ],
)
def test_node_facts(annotations, allocatable, expected):
    f = node_facts(NodeRecord(name="n1", annotations=annotations, allocatable=allocatable))
    assert (f.tier_allocatable, set(f.system_qos_cpus), set(f.reserved_cpus), f.reserved_cpu_milli) == expected


# The kubelet's checkpoint as Kubernetes documents it (cpumanager state_checkpoint.go, version 2)
CHECKPOINT = json.dumps({
    "policyName": "static",
    "defaultCpuSet": "0,5-15",
    "entries": {
        "guaranteed-uid": {"app": "1-2", "sidecar": "3"},
        "ls-uid": {"main": "4"},  # labelled LS: Koordinator manages it
        "lsr-bound-uid": {"main": "6-7"},  # koord-scheduler bound cpuset: Koordinator manages it
    },
    "checksum": 2964359457,
})


def pod(uid, labels=None, annotations=None):
    return PodInfo.from_record(PodRecord(namespace="ns", name=uid, uid=uid, labels=labels or {},
                                         annotations=annotations or {},
                                         containers=[ContainerSpec("main", {"cpu": 1000}, {"cpu": 1000})]))


def test_kubelet_static_policy_pinned_cpus():
    state = parse_cpu_manager_state(CHECKPOINT)
    pods = [pod("guaranteed-uid"), pod("ls-uid", {"koordinator.sh/qosClass": "LS"}),
            pod("lsr-bound-uid", {"koordinator.sh/qosClass": "LSR"},
                {"scheduling.koordinator.sh/resource-status": '{"cpuset": "6-7"}'})]
    assert state.policy == "static"
    assert kubelet_pinned_cpus(state, pods) == {1, 2, 3}
    # policy none pins nothing; no file or a broken one: nothing known
    none = parse_cpu_manager_state('{"policyName": "none", "defaultCpuSet": "", "checksum": 1353318690}')
    assert none.policy == "none" and kubelet_pinned_cpus(none, pods) == frozenset()
    assert parse_cpu_manager_state(None) is None and parse_cpu_manager_state("{") is None


def app(name, qos="", base=None, parent="", rel="", priority=""):
    spec = {"name": name, "qos": qos, "priority": priority}
    if base is not None:
        spec["cgroupPath"] = {"base": base, "parentDir": parent, "relativePath": rel}
    return HostApplicationSpec.model_validate(spec)


@pytest.mark.parametrize(
    "spec,cgroupfs,systemd",
    [
        # Koordinator's host application dir table
        (app("ls-app", "LS"), "host-latency-sensitive/ls-app", "host-latency-sensitive/ls-app"),
        (app("be-app", "BE"), "host-best-effort/be-app", "host-best-effort/be-app"),
        (app("plain"), "plain", "plain"),
        (app("test-app", "LS", "CgroupRoot", "host-ls-app", "test-app"), "host-ls-app/test-app", "host-ls-app/test-app"),
        (app("test-app", "LS", "Kubepods", "host-ls-app", "test-app"), "kubepods/host-ls-app/test-app",
         "kubepods.slice/host-ls-app/test-app"),
        (app("test-app", "LS", "KubepodsBurstable", "host-ls-app", "test-app"),
         "kubepods/burstable/host-ls-app/test-app", "kubepods.slice/kubepods-burstable.slice/host-ls-app/test-app"),
        (app("test-app", "BE", "KubepodsBesteffort", "host-be-app", "test-app"),
         "kubepods/besteffort/host-be-app/test-app", "kubepods.slice/kubepods-besteffort.slice/host-be-app/test-app"),
        # never outside its base
        (app("../etc"), None, None),
        (app("x", "LS", "CgroupRoot", "/abs", "x"), None, None),
        (app("x", "LS", "Elsewhere", "p", "x"), None, None),
    ],
)
def test_host_application_dir(spec, cgroupfs, systemd):
    assert host_app_dir(spec, CGROUPFS.qos_dir) == cgroupfs
    assert host_app_dir(spec, SYSTEMD.qos_dir) == systemd


def test_host_apps_carry_their_classes_and_usage():
    specs = [app("nginx", "LS", priority="koord-prod"), app("yarn", "BE", "KubepodsBesteffort", "hadoop", "nm",
                                                          priority="koord-batch"), app("")]
    got = host_apps(specs, CGROUPFS.qos_dir, {"nginx": (1500.0, 2e9)})
    assert [(h.name, h.qos, h.priority_class, h.rel, h.usage, h.counts_as_be) for h in got] == [
        ("nginx", QoSClass.LS, PriorityClass.PROD, "host-latency-sensitive/nginx", Resources(1500, 2000000000), False),
        ("yarn", QoSClass.BE, PriorityClass.BATCH, "kubepods/besteffort/hadoop/nm", None, True),
    ]
    assert CGROUPFS.qos_dir(KubeQoS.BEST_EFFORT) == "kubepods/besteffort"


# --------------------------------------------------------------------------- not supported


def spec_of(doc: dict) -> NodeSLOSpec:
    return NodeSLOSpec.model_validate(doc)


@pytest.mark.parametrize(
    "doc,expected",
    [
        ({}, []),
        # a whole Koordinator default NodeSLO: nothing refused
        ({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                          "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70},
          "resourceQOSStrategy": {"policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"},
                                  "beClass": {"resctrlQOS": {"enable": False, "catRangeEndPercent": 30}}},
          "cpuBurstStrategy": {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                               "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
          "systemStrategy": {"totalNetworkBandwidth": "0"}}, []),
        ({"resourceQOSStrategy": {"policies": {"cpuPolicy": "coreSched"}}},
         [("resourceQOSStrategy.policies.cpuPolicy coreSched (core scheduling, cpu.idle) is not supported: "
          "no CPU QoS is applied")]),
        ({"resourceQOSStrategy": {"beClass": {"resctrlQOS": {"enable": True}, "blkioQOS": {"enable": True}}}},
         ["resourceQOSStrategy.beClass.blkioQOS (block IO QoS) is not supported",
          "resourceQOSStrategy.beClass.resctrlQOS (LLC / memory bandwidth (resctrl) QoS) is not supported"]),
        ({"resourceQOSStrategy": {"lsClass": {"networkQOS": {"enable": True, "ingressLimit": "50M"}}}},
         ["resourceQOSStrategy.lsClass.networkQOS (network QoS) is not supported"]),
        ({"resourceQOSStrategy": {"cgroupRoot": {"blkioQOS": {"enable": True}}}},
         ["resourceQOSStrategy.cgroupRoot (root cgroup block IO / resctrl / network QoS) is not supported"]),
        ({"systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}},
         ["systemStrategy.minFreeKbytesFactor (a node-wide kernel setting) is not supported",
          "systemStrategy.watermarkScaleFactor (a node-wide kernel setting) is not supported"]),
        ({"resourceUsedThresholdWithBE": {"cpuEvictBESatisfactionLowerPercent": 70,
                                          "cpuEvictBESatisfactionUpperPercent": 80}},
         ["resourceUsedThresholdWithBE: BECPUEvict is off: cpuEvictBESatisfactionLowerPercent 70 outside (0, 60]"]),
        ({"resourceUsedThresholdWithBE": {"cpuEvictThresholdPercent": 70}},
         [("resourceUsedThresholdWithBE: CPUEvict is off: cpuEvictThresholdPercent is set but "
          "evictEnabledPriorityThreshold is not")]),
        ({"resourceUsedThresholdWithBE": {"cpuAllocatableEvictThresholdPercent": 110,
                                          "cpuAllocatableEvictLowerPercent": 100,
                                          "allocatableEvictPriorityThreshold": 9500}},
         [("resourceUsedThresholdWithBE: CPUAllocatableEvict is off: allocatableEvictPriorityThreshold 9500 above "
          "7999: prod pods are never evicted")]),
        ({"resourceUsedThresholdWithBE": {"memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 75}},
         [("resourceUsedThresholdWithBE: BEMemoryEvict is off: memoryEvictLowerPercent 75 not below "
          "memoryEvictThresholdPercent 70")]),
        ({"resourceUsedThresholdWithBE": {"cpuSuppressPolicy": "quota"}, "cpuBurstStrategy": {"policy": "always"}},
         ["resourceUsedThresholdWithBE.cpuSuppressPolicy 'quota' is not a known policy: cpuset is used",
          "cpuBurstStrategy.policy 'always' is not a known policy: treated as none"]),
        ({"hostApplications": [{"name": "nginx", "qos": "LS"}, {"qos": "LS"}, {"name": "x", "qos": "GOLD"},
                               {"name": "y", "cgroupPath": {"base": "Nowhere"}}]},
         ["hostApplications[1]: no name: not collected nor counted",
          "hostApplications[2].qos 'GOLD' is not a QoS class: counted as none",
          "hostApplications[3].cgroupPath.base 'Nowhere' is not a known base: not collected"]),
        ({"extensions": {"vendor": {"x": 1}}}, ["extensions (vendor) are not supported"]),
    ],
)
def test_not_supported_settings_are_named(doc, expected):
    assert not_supported(spec_of(doc)) == expected
