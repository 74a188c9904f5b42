"""Cluster backends are found by name in the `koord.cluster_backends` entry-point group."""

from __future__ import annotations

import pytest
from koordcommon.cluster import backends
from koordcommon.cluster.kube import KubeCluster


def test_koordcommon_registers_the_kubernetes_backend_under_both_names():
    found = backends.installed_backends()
    assert found["kubernetes"].value == found["k8s"].value == "koordcommon.cluster.kube:KubeCluster"
    assert backends.backend_factory("k8s") is KubeCluster


def test_a_known_backend_that_is_not_installed_names_its_package(monkeypatch):
    only_kube = {k: v for k, v in backends.installed_backends().items() if k != "sim"}
    monkeypatch.setattr(backends, "installed_backends", lambda: only_kube)
    with pytest.raises(backends.BackendNotFound, match=r"'sim' is not installed: install the 'koordsim' package"):
        backends.open_cluster("sim")


def test_an_unknown_backend_lists_the_installed_ones():
    with pytest.raises(ValueError, match=r"unknown cluster backend 'nope' \(installed: .*kubernetes"):
        backends.open_cluster("nope")
