"""Hot reload from files: a ConfigMap file, a ConfigMap volume directory, the profile file."""

from __future__ import annotations

import json
import os

from slo_controller.config_source import FileWatcher, load_configmap_data, load_documents
from slo_controller.core.configmap import ConfigState
from slo_controller.profiles import ProfileStore


def _touch_later(path, text):
    path.write_text(text)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a distinct mtime, even on coarse clocks


async def test_configmap_file_reload_keeps_last_good(tmp_path):
    path = tmp_path / "cm.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: slo-controller-config}\n"
        "data:\n  colocation-config: '{\"enable\": true, \"cpuReclaimThresholdPercent\": 55}'\n"
    )
    state = ConfigState()
    seen = []

    async def apply(data):
        seen.append(state.apply(data))

    w = FileWatcher(path, apply, load_configmap_data, poll_s=0.01)
    assert await w.check() is True
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 55
    assert await w.check() is False  # unchanged file: nothing to do

    _touch_later(path, "data: [unclosed")
    assert await w.check() is False and "not valid YAML" in w.last_error
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 55

    _touch_later(path, json.dumps({"colocation-config": json.dumps({"enable": True, "degradeTimeMinutes": 0})}))
    assert await w.check() is True  # parsed, but the key is refused by validation
    assert "degradeTimeMinutes must be > 0" in seen[-1].errors["colocation-config"]
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 55

    _touch_later(path, json.dumps({"colocation-config": '{"enable": true, "cpuReclaimThresholdPercent": 75}'}))
    assert await w.check() is True
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 75

    path.unlink()
    assert await w.check() is False and "cannot read" in w.last_error


async def test_configmap_volume_directory(tmp_path):
    vol = tmp_path / "config"
    data1 = tmp_path / "..2026_1"
    data1.mkdir()
    (data1 / "colocation-config").write_text('{"enable": true, "memoryReclaimThresholdPercent": 50}')
    vol.mkdir()
    (vol / "..data").symlink_to(data1)
    (vol / "colocation-config").symlink_to(vol / "..data" / "colocation-config")
    state = ConfigState()
    w = FileWatcher(vol, lambda d: _apply(state, d), load_configmap_data)
    assert await w.check() is True
    assert state.current.colocation.cluster.memoryReclaimThresholdPercent == 50

    # the kubelet swaps ..data to a new timestamped directory
    data2 = tmp_path / "..2026_2"
    data2.mkdir()
    (data2 / "colocation-config").write_text('{"enable": true, "memoryReclaimThresholdPercent": 45}')
    (vol / "..data").unlink()
    (vol / "..data").symlink_to(data2)
    assert await w.check() is True
    assert state.current.colocation.cluster.memoryReclaimThresholdPercent == 45


async def _apply(state, data):
    state.apply(data)


def test_profile_file_forms(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text("""
apiVersion: v1
kind: List
items:
- apiVersion: scheduling.k8s.io/v1
  kind: PriorityClass
  metadata: {name: team-batch}
  value: 5300
  preemptionPolicy: Never
- apiVersion: v1
  kind: Namespace
  metadata: {name: ml, labels: {colocation: "on"}}
---
profiles:
- metadata: {name: ml-batch}
  spec: {namespaceSelector: {matchLabels: {colocation: "on"}}, priorityClassName: team-batch, qosClass: BE}
- metadata: {name: broken}
  spec: {qosClass: PLATINUM}
namespaces:
  analytics: {colocation: "on"}
---
kind: Secret
""")
    store = ProfileStore()
    errors = store.load_documents(load_documents(path))
    assert [p.name for p in store.profiles()] == ["ml-batch"]
    assert any("ClusterColocationProfile broken" in e for e in errors)
    assert any("kind 'Secret'" in e for e in errors)
    assert store.priority_classes()["team-batch"].value == 5300
    assert store.priority_classes()["team-batch"].preemption_policy == "Never"
    assert "koord-batch" in store.priority_classes()  # the shipped classes stay known
    assert store.namespace_labels("ml") == {"colocation": "on", "kubernetes.io/metadata.name": "ml"}
    assert store.namespace_labels("analytics")["colocation"] == "on"
    assert store.namespace_labels("other") == {"kubernetes.io/metadata.name": "other"}

    # a cluster profile of the same name replaces the file's
    store.set_cluster_profiles([{"metadata": {"name": "ml-batch"}, "spec": {"qosClass": "LS"}},
                                {"metadata": {"name": "a-first"}, "spec": {}}])
    assert [(p.name, p.qos_class) for p in store.profiles()] == [("a-first", None), ("ml-batch", "LS")]
