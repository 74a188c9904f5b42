"""ClusterColocationProfile matching and mutation (pure core), and the JSON Patch it produces."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
from slo_controller.core.patching import json_patch, strategic_merge
from slo_controller.core.profile import (
    ColocationProfile,
    ProfileError,
    mutate_pod,
    parse_profiles,
    skipped_by_probability,
)

P = "koordinator.sh/"


def profile(name="p", **spec) -> dict:
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": name}, "spec": spec}


def pod(labels=None, containers=None, **spec) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "x", "labels": labels or {}},
        "spec": {"containers": containers or [
            {"name": "main", "image": "busybox",
             "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}}}
        ], **spec},
    }


def run(pod_obj, *profiles, ns_labels=None, draw=0, prefix=P):
    parsed, errors = parse_profiles(list(profiles))
    assert errors == []
    result = mutate_pod(pod_obj, ns_labels or {}, parsed, prefix=prefix, rand_intn=lambda n: draw)
    # whatever the patch is, it must apply cleanly to the original and give the result
    assert jsonpatch.apply_patch(pod_obj, result.patch) == result.pod
    return result


def test_order_within_a_profile_and_across_profiles():
    r = run(
        pod({"app": "a", "tier": "web"}),
        profile("b", labels={"x": "from-b"}, koordinatorPriority=7),
        profile("a", labels={"x": "from-a", "new": "1"}, labelKeysMapping={"app": "app-copy", "missing": "empty"},
                labelSuffixes={"tier": "-v2", "absent": "-v9"}, annotations={"k": "v"},
                annotationKeysMapping={"k": "k2"}, schedulerName="koord-scheduler"),
    )
    labels = r.pod["metadata"]["labels"]
    assert r.applied == ["a", "b"]  # lexicographic order: b overwrites a
    assert labels == {"app": "a", "tier": "web-v2", "x": "from-b", "new": "1", "app-copy": "a", "empty": "",
                      "koordinator.sh/priority": "7"}
    assert r.pod["metadata"]["annotations"] == {"k": "v", "k2": "v"}
    assert r.pod["spec"]["schedulerName"] == "koord-scheduler"


@pytest.mark.parametrize(
    "percent, draw, skipped",
    [(100, 99, False), (0, 0, True), (50, 49, False), (50, 50, False), (50, 51, True), (50, 70, True)],
)
def test_probability_quirk(percent, draw, skipped):
    # a draw equal to the percent still applies (rand.Intn(100) > p skips)
    assert skipped_by_probability(percent, draw) is skipped


def test_percent_string_and_rewrite_even_when_skipped():
    base = pod({"koordinator.sh/qosClass": "BE"}, priority=5100)  # already batch
    r = run(base, profile("p", probability="50%", labels={"seen": "yes"}), draw=70)
    assert r.applied == [] and "seen" not in r.pod["metadata"]["labels"]
    # skipped by probability, but the pod is batch: resources still rewritten
    assert r.pod["spec"]["containers"][0]["resources"]["requests"] == {P + "batch-cpu": "2k", P + "batch-memory": "4Gi"}


def test_mid_pod_gets_mid_resources_and_free_is_untouched():
    mid = run(pod(), profile("m", qosClass="LS", priorityClassName="koord-mid"))
    assert mid.pod["spec"]["priority"] == 7000
    assert mid.pod["spec"]["containers"][0]["resources"]["limits"] == {P + "mid-cpu": "4k", P + "mid-memory": "4Gi"}
    assert "node.koordinator.sh/extended-resource-spec" not in mid.pod["metadata"].get("annotations", {})
    free = run(pod(), profile("f", qosClass="BE", priorityClassName="koord-free"))
    assert free.pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}


def test_prod_pod_is_not_rewritten():
    r = run(pod(), profile("p", qosClass="LS", priorityClassName="koord-prod"))
    assert r.pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert r.pod["spec"]["priority"] == 9000


def test_skip_update_resources_annotation():
    obj = profile("s", qosClass="BE", priorityClassName="koord-batch")
    obj["metadata"]["annotations"] = {"config.koordinator.sh/skip-update-resources": ""}
    r = run(pod(), obj)
    assert r.pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert r.pod["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"


def test_init_containers_overhead_and_limits_only():
    containers = [{"name": "main", "resources": {"limits": {"cpu": "1500m", "memory": "1G"}}}]
    p = pod(containers=containers, initContainers=[{"name": "init", "resources": {"requests": {"cpu": "100m"}}}],
            overhead={"cpu": "250m", "memory": "120Mi"})
    r = run(p, profile("b", qosClass="BE", priorityClassName="koord-batch"))
    res = r.pod["spec"]["containers"][0]["resources"]
    # a container with limits only gets requests = limits
    assert res == {"limits": {P + "batch-cpu": "1500", P + "batch-memory": "1G"},
                   "requests": {P + "batch-cpu": "1500", P + "batch-memory": "1G"}}
    assert r.pod["spec"]["initContainers"][0]["resources"] == {"requests": {P + "batch-cpu": "100"}}
    assert r.pod["spec"]["overhead"] == {P + "batch-cpu": "250", P + "batch-memory": "120Mi"}


def test_selectors():
    prof = profile("sel", namespaceSelector={"matchExpressions": [{"key": "team", "operator": "In",
                                                                   "values": ["data", "ml"]}]},
                   selector={"matchLabels": {"job": "spark"}}, labels={"hit": "1"})
    assert run(pod({"job": "spark"}), prof, ns_labels={"team": "ml"}).applied == ["sel"]
    assert run(pod({"job": "spark"}), prof, ns_labels={"team": "web"}).patch == []
    assert run(pod({"job": "flink"}), prof, ns_labels={"team": "ml"}).patch == []
    # no selectors at all: every pod
    assert run(pod(), profile("all", labels={"hit": "1"})).applied == ["all"]


def test_strategic_merge_patch_merges_containers_by_name():
    p = pod(containers=[{"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}]},
                        {"name": "b", "image": "y"}])
    patch = {"metadata": {"labels": {"drop": None}},
             "spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "new"},
                                     {"name": "a", "env": [{"name": "B", "value": "2"}]}],
                      "tolerations": [{"key": "batch", "operator": "Exists"}]}}
    p["metadata"]["labels"] = {"drop": "me", "keep": "me"}
    merged = strategic_merge(p, patch)
    assert merged["metadata"]["labels"] == {"keep": "me"}
    assert [(c["name"], c["image"]) for c in merged["spec"]["containers"]] == [("a", "x"), ("b", "z"), ("c", "new")]
    assert merged["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert merged["spec"]["tolerations"] == [{"key": "batch", "operator": "Exists"}]
    assert strategic_merge(p, {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}})["spec"]["containers"] == [
        p["spec"]["containers"][0]]


def test_json_patch_escapes_and_adds_missing_maps():
    old = {"metadata": {"name": "x"}, "spec": {"a": [1, 2]}}
    new = {"metadata": {"name": "x", "labels": {"koordinator.sh/qosClass": "BE", "a~b": "1"}}, "spec": {"a": [1, 3, 4]}}
    ops = json_patch(old, new)
    assert ops == [
        {"op": "add", "path": "/metadata/labels", "value": {"koordinator.sh/qosClass": "BE", "a~b": "1"}},
        {"op": "replace", "path": "/spec/a", "value": [1, 3, 4]},
    ]
    labelled = copy.deepcopy(new)
    labelled["metadata"]["labels"]["x/y~z"] = "2"
    assert json_patch(new, labelled) == [{"op": "add", "path": "/metadata/labels/x~1y~0z", "value": "2"}]
    assert jsonpatch.apply_patch(new, json_patch(new, labelled)) == labelled


def test_controller_managed_label_is_reported_not_supported_and_the_profile_still_admits():
    managed = profile("managed", qosClass="BE")
    managed["metadata"]["labels"] = {"config.koordinator.sh/controller-managed": "true"}
    plain = profile("plain", qosClass="LS")
    plain["metadata"]["labels"] = {"config.koordinator.sh/controller-managed": "false"}
    profiles, errors = parse_profiles([managed, plain])
    assert [p.name for p in profiles] == ["managed", "plain"]
    assert errors == [("ClusterColocationProfile managed: label config.koordinator.sh/controller-managed is not "
                       "supported: the profile applies to pods when they are admitted, not to pods already created")]


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"qosClass": "GOLD"}, "spec.qosClass must be one of SYSTEM, LSE, LSR, LS, BE"),
        ({"probability": "half"}, "spec.probability: 'half' is not an integer or a percent"),
        ({"probability": 150}, "spec.probability: must be within 0..100"),
        ({"koordinatorPriority": "high"}, "spec.koordinatorPriority must be an integer"),
        ({"selector": {"matchLabels": {"a": 1}}}, "spec.selector.matchLabels.a: must be a string"),
        ({"patch": ["x"]}, "spec.patch must be an object"),
        # a field the spec does not have refuses the profile, named, never dropped
        ({"qosClas": "BE"}, "unknown field spec.qosClas (did you mean qosClass?)"),
        ({"qosClass": "BE", "nodeAffinity": {}}, "unknown field spec.nodeAffinity"),
    ],
)
def test_invalid_profiles_are_reported(spec, message):
    profiles, errors = parse_profiles([profile("bad", **spec), profile("good")])
    assert [p.name for p in profiles] == ["good"]
    assert message in errors[0] and "ClusterColocationProfile bad" in errors[0]
    with pytest.raises(ProfileError):
        ColocationProfile.from_object(profile("bad", **spec))
