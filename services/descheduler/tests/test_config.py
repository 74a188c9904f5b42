"""Every configuration field a Koordinator user brings is honoured, warned about (it only tunes
the Go process) or rejected with why: LowNodeLoadArgs, MigrationControllerArgs, the
DeschedulerConfiguration and its profile, and the service's own settings."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml
from descheduler.core import migration as mig
from descheduler.core.config import LowNodeLoadArgs, MigrationLimits, parse_config
from descheduler.core.evictable import EvictorRules, non_evictable_reason
from descheduler.core.lownodeload import LimitCounter, PodState
from descheduler.main import Settings, load_config, round_interval
from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.resources import Resources
from koordcommon.selectors import parse_selector
from koordcommon.service import load_settings

# Koordinator's config/manager/descheduler-config.yaml (the ConfigMap's koord-descheduler-config)
SHIPPED = """
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
enableContentionProfiling: true
enableProfiling: true
healthzBindAddress: 0.0.0.0:10251
metricsBindAddress: 0.0.0.0:10251
leaderElection:
  resourceLock: leases
  resourceName: koord-descheduler
  resourceNamespace: koordinator-system
deschedulingInterval: 10s
dryRun: false
profiles:
- name: koord-descheduler
  plugins:
    deschedule:
      disabled:
        - name: "*"
    evict:
      disabled:
        - name: "*"
      enabled:
        - name: MigrationController
  pluginConfig:
  - name: MigrationController
    args:
      apiVersion: descheduler/v1alpha2
      kind: MigrationControllerArgs
      evictionPolicy: Eviction
      namespaces:
        exclude:
          - kube-system
          - koordinator-system
      evictQPS: "10"
      evictBurst: 1
  - name: LowNodeLoad
    args:
      apiVersion: descheduler/v1alpha2
      kind: LowNodeLoadArgs
      evictableNamespaces:
        exclude:
          - kube-system
          - koordinator-system
      useDeviationThresholds: false
      lowThresholds:
        cpu: 45
        memory: 55
      highThresholds:
        cpu: 75
        memory: 80
"""


def shipped(**changes) -> dict:
    data = yaml.safe_load(SHIPPED)
    profile = data["profiles"][0]
    if changes.pop("balance", False):
        profile["plugins"]["balance"] = {"enabled": [{"name": "LowNodeLoad"}]}
    for key, value in changes.pop("low", {}).items():
        profile["pluginConfig"][1]["args"][key] = value
    for key, value in changes.pop("mc", {}).items():
        profile["pluginConfig"][0]["args"][key] = value
    data.update(changes)
    return data


# ---------------------------------------------------------------- LowNodeLoadArgs


def test_top_level_fields_make_the_default_pool_and_the_pools_inherit_them():
    args = parse_config({
        "lowThresholds": {"cpu": 30, "memory": 40}, "highThresholds": {"cpu": 60, "memory": 70},
        "prodLowThresholds": {"cpu": 10}, "prodHighThresholds": {"cpu": 20},
        "resourceWeights": {"cpu": 3}, "nodeSelector": {"matchLabels": {"pool": "default"}},
        "anomalyCondition": {"consecutiveAbnormalities": 2, "timeout": "90s"},
        "useDeviationThresholds": True,
        "nodePools": [
            {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "highThresholds": {"cpu": 80, "memory": 90},
             "anomalyCondition": {"consecutiveNormalities": 7}},
        ],
    }).args
    default, gpu = args.nodePools
    assert default.name == "__default_node_pool__" and default.selects({"pool": "default"})
    assert default.useDeviationThresholds and default.lowThresholds == {"cpu": 30, "memory": 40}
    assert default.prodHighThresholds == {"cpu": 20, "memory": 0}  # deviation: missing is 0
    assert default.resourceWeights == {"cpu": 3, "memory": 1}
    assert (default.anomalyCondition.consecutiveAbnormalities, default.anomalyCondition.timeoutSeconds) == (2, 90)
    # a pool takes every field it leaves out, except nodeSelector and useDeviationThresholds
    assert gpu.selects({"pool": "gpu"}) and not gpu.selects({"pool": "default"}) and not gpu.useDeviationThresholds
    assert gpu.lowThresholds == {"cpu": 30, "memory": 40} and gpu.highThresholds == {"cpu": 80, "memory": 90}
    assert gpu.prodLowThresholds == {"cpu": 10, "memory": 100} and gpu.resourceWeights == {"cpu": 3, "memory": 1}
    cond = gpu.anomalyCondition  # its own field, the others from the top level
    assert (cond.consecutiveAbnormalities, cond.consecutiveNormalities, cond.timeoutSeconds) == (2, 7, 90)


@pytest.mark.parametrize(
    "data,pools",
    [
        ({}, [("__default_node_pool__", {"cpu": 45, "memory": 55}, {"cpu": 75, "memory": 80})]),  # the shipped ones
        # thresholds only in a pool: the default pool has none (memory 100 %), as Koordinator's
        ({"nodePools": [{"name": "p", "lowThresholds": {"cpu": 20}, "highThresholds": {"cpu": 50}}]},
         [("__default_node_pool__", {"memory": 100}, {"memory": 100}), ("p", {"cpu": 20, "memory": 100}, {"cpu": 50, "memory": 100})]),
        ({"lowThresholds": {"pods": 30}, "highThresholds": {"pods": 50}},
         [("__default_node_pool__", {"pods": 30, "memory": 100}, {"pods": 50, "memory": 100})]),
    ],
)
def test_thresholds_when_none_or_some_are_configured(data, pools):
    args = parse_config(data).args
    assert [(p.name, p.lowThresholds, p.highThresholds) for p in args.nodePools] == pools


@pytest.mark.parametrize(
    "data,error",
    [
        ({"useDeviationThreshold": True}, "unknown field 'useDeviationThreshold' (did you mean 'useDeviationThresholds'?)"),
        ({"nodePools": [{"lowThreshold": {"cpu": 1}}]}, "unknown field 'lowThreshold' (did you mean 'lowThresholds'?)"),
        ({"podSelector": []}, "did you mean 'podSelectors'"),
        ({"anomalyCondition": {"consecutiveAbnormality": 2}}, "did you mean 'consecutiveAbnormalities'"),
        ({"lowThresholds": {"ephemeral-storage": 20}}, "resource 'ephemeral-storage' is not supported"),
        ({"resourceWeights": {"nvidia.com/gpu": 1}}, "resource 'nvidia.com/gpu' is not supported"),
        ({"nodeSelector": {"pool": "big"}}, "a label selector takes matchLabels and matchExpressions, not 'pool'"),
        ({"podSelectors": [{"selector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}]}, "'Has' is not one of"),
        ({"evictableNamespaces": {"include": ["a"], "exclude": ["b"]}}, "set include or exclude, not both"),
        ({"evictableNamespaces": {"only": ["a"]}}, "unknown field 'only'"),
        ({"numberOfNodes": -1}, "greater than or equal to 0"),
        ({"nodeMetricExpirationSeconds": 0}, "greater than 0"),
        ({"anomalyCondition": {"timeout": "1 minute"}}, "invalid duration"),
        ({"kind": "LowNodeUtilizationArgs"}, "kind 'LowNodeUtilizationArgs' where LowNodeLoadArgs was expected"),
        ({"apiVersion": "descheduler/v1alpha1"}, "apiVersion 'descheduler/v1alpha1' is not supported"),
        ({"lowThresholds": {"cpu": 80}, "highThresholds": {"cpu": 70}}, "exceeds its high threshold"),
    ],
)
def test_fields_not_honoured_are_rejected_naming_them(data, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_config(data)


def test_durations_and_the_detector_cache():
    args = parse_config({"detectorCacheTimeout": "2m", "anomalyCondition": {"timeout": "1m30s"},
                         "migration": {"defaultJobTTL": "10m"}}).args
    assert args.detectorCacheTimeoutSeconds == 120 and args.nodePools[0].anomalyCondition.timeoutSeconds == 90
    assert args.migration.defaultJobTTLSeconds == 600


# ---------------------------------------------------------------- MigrationControllerArgs


@pytest.mark.parametrize(
    "mc,check",
    [
        ({"evictQPS": "2.5", "evictBurst": 3}, lambda a: (a.limits.evictQPS, a.limits.evictBurst) == (2.5, 3)),
        ({"maxMigratingPerNode": 0, "maxMigratingGlobally": -1}, lambda a: (a.limits.maxMigratingPerNode, a.limits.maxMigratingGlobally) == (None, None)),
        ({"maxMigratingPerWorkload": "20%", "maxUnavailablePerWorkload": 2},
         lambda a: (a.limits.maxMigratingPerWorkload, a.limits.maxUnavailablePerWorkload) == ("20%", 2)),
        ({"defaultJobMode": "EvictDirectly", "defaultJobTTL": "2m"},
         lambda a: (a.migration.defaultJobMode, a.migration.defaultJobTTLSeconds) == ("EvictDirectly", 120)),
        ({"dryRun": True, "evictLocalStoragePods": True}, lambda a: a.dryRun and a.evictLocalStoragePods),
        # the evictor's switches as a dumped configuration writes them (false): accepted
        ({"evictFailedBarePods": False, "evictAllBarePods": False, "evictSystemCriticalPods": False, "ignorePvcPods": False},
         lambda a: not a.migration.evictSystemCriticalPods),
        ({"skipEvictionGates": ["MaxMigratingPerNode", "ExpectedReplicas"], "skipCheckExpectedReplicas": True},
         lambda a: a.limits.skips("MaxMigratingPerNode") and a.limits.skipCheckExpectedReplicas),
        ({"objectLimiters": {"workload": {"duration": "5m", "maxMigrating": "10%", "burst": 2}}},
         lambda a: a.limits.objectLimiters["workload"].durationSeconds == 300),
        ({"schedulerNames": ["koord-scheduler"], "priorityThreshold": {"value": 9000}, "nodeFit": True,
          "labelSelector": {"matchLabels": {"app": "x"}}},
         lambda a: a.evictor_rules().scheduler_names == {"koord-scheduler"} and a.evictor_rules().priority_threshold == 9000
         and a.requests_must_fit),
    ],
)
def test_migration_controller_args_are_honoured(mc, check):
    args = parse_config(shipped(balance=True, mc=mc)).args
    assert check(args)


@pytest.mark.parametrize(
    "mc,error",
    [
        ({"evictionPolicy": "Delete"}, "evictionPolicy Delete is not supported"),
        ({"evictionPolicy": "SoftEviction"}, "evictionPolicy SoftEviction is not supported"),
        ({"evictAllBarePods": True}, "evictAllBarePods: true is not supported: a bare pod has no controller"),
        ({"evictFailedBarePods": True}, "evictFailedBarePods: true is not supported"),
        ({"skipEvictionGates": ["BarePods"]}, "BarePods is not supported"),
        ({"skipEvictionGates": ["Everything"]}, "unknown gate 'Everything'"),
        ({"priorityThreshold": {"name": "high-priority"}}, "priorityThreshold.name 'high-priority' is not supported"),
        ({"nodeSelector": "pool=gpu"}, "nodeSelector 'pool=gpu' is not supported here"),
        ({"defaultDeleteOptions": {"gracePeriodSeconds": 0}}, "defaultDeleteOptions is not supported"),
        ({"maxMigratingPerWorkload": "ten"}, "neither a count"),
        ({"objectLimiters": {"node": {"duration": "5m"}}}, "unknown object 'node'"),
        ({"kind": "LowNodeLoadArgs"}, "kind 'LowNodeLoadArgs' where MigrationControllerArgs was expected"),
        ({"maxMigratingPerPod": 1}, "unknown field 'maxMigratingPerPod'"),
    ],
)
def test_migration_controller_values_not_honoured_are_rejected(mc, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_config(shipped(balance=True, mc=mc))


# ---------------------------------------------------------------- DeschedulerConfiguration


def test_koordinators_shipped_configuration_is_read_and_says_what_it_ignores():
    loaded = parse_config(yaml.safe_load(SHIPPED))
    args = loaded.args
    assert loaded.interval_s == 10
    assert args.nodePools[0].lowThresholds == {"cpu": 45, "memory": 55}
    assert args.migration.namespaces.exclude == ["kube-system", "koordinator-system"]
    assert args.limits.evictQPS == 10.0 and args.limits.evictBurst == 1
    # The shipped profile does not enable LowNodeLoad in plugins.balance: nothing is balanced, and
    # the user is told, as are the Go process' settings that have no counterpart here.
    assert args.paused
    assert [w.split(" has no effect")[0] for w in loaded.warnings[:5]] == [
        "DeschedulerConfiguration.enableContentionProfiling", "DeschedulerConfiguration.enableProfiling",
        "DeschedulerConfiguration.healthzBindAddress", "DeschedulerConfiguration.metricsBindAddress",
        "DeschedulerConfiguration.leaderElection"]
    assert loaded.warnings[5] == "profiles[koord-descheduler]: LowNodeLoad is not enabled in plugins.balance, so no node is balanced"
    enabled = parse_config(shipped(balance=True)).args
    assert not enabled.paused


def test_configuration_level_settings_are_honoured():
    data = shipped(balance=True, dryRun=True, nodeSelector={"matchLabels": {"team": "a"}},
                   maxNoOfPodsToEvictPerNode=1, maxNoOfPodsToEvictPerNamespace=2, maxNoOfPodsToEvictTotal=3)
    data["profiles"][0]["nodeSelector"] = {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
    args = parse_config(data).args
    assert args.dryRun
    assert (args.limits.maxNoOfPodsToEvictPerNode, args.limits.maxNoOfPodsToEvictPerNamespace,
            args.limits.maxNoOfPodsToEvictTotal) == (1, 2, 3)
    assert args.in_scope({"team": "a", "zone": "z"})
    assert not args.in_scope({"team": "a"}) and not args.in_scope({"team": "b", "zone": "z"})


@pytest.mark.parametrize(
    "change,error",
    [
        (lambda d: d["profiles"].append({"name": "second"}), "one profile is supported"),
        (lambda d: d["profiles"][0]["plugins"].update(balance={"enabled": [{"name": "LowNodeUtilization"}]}),
         "plugins.balance: LowNodeUtilization not supported"),
        (lambda d: d["profiles"][0]["plugins"].update(deschedule={"enabled": [{"name": "PodLifeTime"}]}),
         "plugins.deschedule: PodLifeTime not supported"),
        (lambda d: d["profiles"][0]["plugins"]["evict"].update(enabled=[]),
         "plugins.evict: MigrationController must stay enabled"),
        (lambda d: d["profiles"][0]["pluginConfig"].append({"name": "LowNodeLoad", "args": {}}),
         "LowNodeLoad is configured twice"),
        (lambda d: d["profiles"][0]["pluginConfig"][1]["args"].update(limits={}), "args.limits: not a LowNodeLoadArgs field"),
        (lambda d: d.update(deschedulingIntervall="10s"), "did you mean 'deschedulingInterval'"),
        (lambda d: d["profiles"][0]["pluginConfig"][1]["args"].update(useDeviationThreshold=True),
         "did you mean 'useDeviationThresholds'"),
    ],
)
def test_profile_shapes_not_supported_are_rejected(change, error):
    data = shipped(balance=True)
    change(data)
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_config(data)


def test_args_of_a_plugin_not_enabled_are_ignored_with_a_warning():
    data = shipped(balance=True)
    data["profiles"][0]["pluginConfig"].append({"name": "RemovePodsViolatingNodeTaints", "args": {}})
    assert parse_config(data).warnings[-1].startswith("profiles[koord-descheduler].pluginConfig: the arguments of "
                                                      "RemovePodsViolatingNodeTaints are ignored")


# ---------------------------------------------------------------- the MigrationController's filter and limits


def record(**kw) -> PodRecord:
    base = {"namespace": "default", "name": "p", "uid": "u", "node_name": "n", "phase": "Running", "priority": 5000,
            "owners": [OwnerRef("ReplicaSet", "web-abc")], "containers": [ContainerSpec("c")], "labels": {"app": "web"}}
    base.update(kw)
    return PodRecord(**base)


@pytest.mark.parametrize(
    "pod,rules,reason",
    [
        (record(priority=2_000_000_000), EvictorRules(), "system-critical pod"),
        (record(priority=2_000_000_000), EvictorRules(evict_system_critical=True), None),
        (record(priority=9000), EvictorRules(priority_threshold=9000), "priority 9000 is not under priorityThreshold 9000"),
        (record(priority=8999), EvictorRules(priority_threshold=9000), None),
        (record(priority=None), EvictorRules(priority_threshold=9000), None),  # no priority: under any threshold
        (record(priority=9500), EvictorRules(priority_threshold=9000, evict_system_critical=True), None),
        (record(volume_kinds=["persistentVolumeClaim"]), EvictorRules(), None),
        (record(volume_kinds=["persistentVolumeClaim"]), EvictorRules(ignore_pvc=True),
         "pod with a PersistentVolumeClaim (ignorePvcPods)"),
        (record(namespace="kube-system"), EvictorRules(exclude_namespaces=frozenset({"kube-system"})),
         "namespace kube-system is not in the MigrationController's namespaces"),
        (record(), EvictorRules(include_namespaces=frozenset({"batch"})),
         "namespace default is not in the MigrationController's namespaces"),
        (record(), EvictorRules(label_selector=parse_selector({"matchLabels": {"app": "db"}})),
         "labels not matched by the MigrationController's labelSelector"),
        (record(), EvictorRules(scheduler_names=frozenset({"koord-scheduler"})), "scheduled by default-scheduler, not by schedulerNames"),
        (record(scheduler_name="koord-scheduler"), EvictorRules(scheduler_names=frozenset({"koord-scheduler"})), None),
        # the evict annotation lifts the MigrationController's filters, not the scheduler's
        (record(namespace="kube-system", annotations={"descheduler.alpha.kubernetes.io/evict": ""}),
         EvictorRules(exclude_namespaces=frozenset({"kube-system"}), priority_threshold=1), None),
    ],
)
def test_the_migration_controllers_filter(pod, rules, reason):
    assert non_evictable_reason(pod, rules) == reason


def test_skipped_gates_leave_their_filter_out():
    args = parse_config(shipped(balance=True, mc={
        "evictSystemCriticalPods": False, "ignorePvcPods": True, "priorityThreshold": {"value": 100},
        "skipEvictionGates": ["SystemCritical", "PVC", "PriorityThreshold", "Namespaces", "LocalStorage"]})).args
    rules = args.evictor_rules()
    assert rules.evict_system_critical and not rules.ignore_pvc and rules.priority_threshold is None
    assert rules.exclude_namespaces == frozenset() and rules.evict_local_storage
    # schedulerNames apply to ReservationFirst only
    direct = parse_config(shipped(balance=True, mc={"schedulerNames": ["koord-scheduler"], "defaultJobMode": "EvictDirectly"}))
    assert direct.args.evictor_rules().scheduler_names is None


def state(name: str, node: str = "hot", namespace: str = "default", workload: str = "default/Deployment/web") -> PodState:
    return PodState(namespace, name, name, node, workload, PriorityClass.BATCH, 5000, KubeQoS.BURSTABLE, QoSClass.BE,
                    Resources(100, 1), Resources(100, 1), 0)


@pytest.mark.parametrize(
    "limits,planned,reasons",
    [
        # maxNoOfPodsToEvictPerNode counts this round only: the migration in flight does not count
        ({"maxNoOfPodsToEvictPerNode": 2}, ["a", "b"], ["node hot reached maxNoOfPodsToEvictPerNode"]),
        ({"maxNoOfPodsToEvictTotal": 1}, ["a"], ["round reached maxNoOfPodsToEvictTotal"] * 2),
        ({"maxNoOfPodsToEvictPerNamespace": 0}, [], ["namespace default reached maxNoOfPodsToEvictPerNamespace"] * 3),
        # jobs in flight count against maxMigratingPerNode (2): one more fits ...
        ({"maxMigratingPerNode": 2}, ["a"], ["node hot reached maxMigratingPerNode"] * 2),
        # ... unless its gate is skipped
        ({"maxMigratingPerNode": 2, "skipEvictionGates": ["MaxMigratingPerNode"]}, ["a", "b", "c"], []),
    ],
)
def test_round_limits_and_skipped_gates(limits, planned, reasons):
    base = {"maxMigratingPerNode": 0, "maxMigratingPerWorkload": 10, "maxUnavailablePerWorkload": 10}
    args = LowNodeLoadArgs(limits=MigrationLimits(**{**base, **limits}))
    counter = LimitCounter()
    counter.add("hot", "default", "other", planned=False)  # a migration still in flight
    counter.start_round()
    done, refused = [], []
    for p in (state("a"), state("b"), state("c")):
        why = counter.refusal(args, p, workload_unavailable=0, replicas=20)
        if why:
            refused.append(why)
        else:
            counter.add(p.node, p.namespace, p.workload)
            done.append(p.name)
    assert (done, refused) == (planned, reasons)


def test_object_limiters_allow_max_migrating_per_duration():
    # workload limiter: 2 migrations per 300 s (maxMigrating 20 % of 10 replicas), burst 2
    limits = MigrationLimits(objectLimiters={"workload": {"duration": "5m", "maxMigrating": "20%", "burst": 2}})
    limiters = mig.ObjectLimiters(limits)
    args = LowNodeLoadArgs(limits=limits.model_copy(update={"maxMigratingPerNode": None, "maxMigratingPerWorkload": 10,
                                                             "maxUnavailablePerWorkload": 10}))
    key = "workload/default/Deployment/web"

    def allowed(now_s: float) -> int:
        counter = LimitCounter()
        counter.start_round(limiters.tokens(now_s))
        n = 0
        for p in (state("a"), state("b"), state("c")):
            if counter.refusal(args, p, 0, replicas=10) is None:
                counter.add(p.node, p.namespace, p.workload)
                n += 1
        return n

    assert allowed(0.0) == 3  # nothing evicted yet: no limiter
    limiters.track("default/Deployment/web", "default", 10, now_s=0.0)
    limiters.track("default/Deployment/web", "default", 10, now_s=1.0)
    assert limiters.tokens(1.0)[key] == pytest.approx(1 / 150)  # both tokens taken, refilling at 2 / 300 s
    assert allowed(1.0) == 0
    assert allowed(151.0) == 1  # one token back after 150 s
    assert allowed(301.0) == 2  # full again (burst 2)
    assert key not in limiters.tokens(302.0)  # not touched for its duration: forgotten


def test_detectors_idle_for_the_cache_timeout_are_forgotten():
    from descheduler.core.anomaly import Detector
    from descheduler.core.lownodeload import forget_idle_detectors

    args = LowNodeLoadArgs()
    dets = {"a": Detector(args.nodePools[0].anomalyCondition), "b": Detector(args.nodePools[0].anomalyCondition)}
    dets["a"].mark(False, 0.0)
    dets["b"].mark(False, 200.0)
    forget_idle_detectors(dets, 301.0, args.detectorCacheTimeoutSeconds)  # 300 s after a's last abnormal mark
    assert set(dets) == {"b"}


# ---------------------------------------------------------------- the service's settings and files


@pytest.mark.parametrize(
    "env,yaml_text,error",
    [
        ({"KOORD_DESCHEDULER_DRYRUN": "true"}, None, "KOORD_DESCHEDULER_DRYRUN (did you mean dry_run?)"),
        ({"KOORD_DESCHEDULER_INTERVAL": "5"}, None, "KOORD_DESCHEDULER_INTERVAL (did you mean interval_s?)"),
        ({}, "dryrun: true\n", "unknown setting: dryrun (did you mean dry_run?)"),
    ],
)
def test_settings_not_known_are_rejected_naming_them(monkeypatch, tmp_path, env, yaml_text, error):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if yaml_text is not None:
        f = tmp_path / "settings.yaml"
        f.write_text(yaml_text)
        monkeypatch.setenv("KOORD_DESCHEDULER_CONFIG_FILE", str(f))
    with pytest.raises(ValueError, match=re.escape(error)):
        load_settings(Settings)


def test_known_settings_load(monkeypatch, tmp_path):
    f = tmp_path / "settings.yaml"
    f.write_text("dry_run: true\ninterval_s: 5\nhttp_port: 9999\n")
    monkeypatch.setenv("KOORD_DESCHEDULER_CONFIG_FILE", str(f))
    monkeypatch.setenv("KOORD_DESCHEDULER_JOB_POLL_S", "0.5")
    s = load_settings(Settings)
    assert (s.dry_run, s.interval_s, s.job_poll_s, s.http_port) == (True, 5.0, 0.5, 9999)


@pytest.mark.parametrize(
    "settings,interval,expected",
    [
        ({}, None, 60.0),
        ({"interval_s": 5}, None, 5.0),
        ({}, 10.0, 10.0),  # the configuration's deschedulingInterval
        ({"interval_s": 10}, 10.0, 10.0),
        ({"interval_s": 5}, 10.0, "interval_s (5) and the args file's deschedulingInterval (10 s) disagree"),
    ],
)
def test_round_interval(settings, interval, expected):
    loaded = dataclasses.replace(parse_config({}), interval_s=interval)
    s = Settings(**settings)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(expected)):
            round_interval(s, loaded)
    else:
        assert round_interval(s, loaded) == expected


def test_a_deschedulerconfiguration_file_loads(tmp_path):
    f = tmp_path / "koord-descheduler-config.yaml"
    f.write_text(yaml.safe_dump(shipped(balance=True)))
    loaded = load_config(str(f))
    assert loaded.interval_s == 10 and not loaded.args.paused and len(loaded.warnings) == 5
    f.write_text(yaml.safe_dump(shipped(balance=True, low={"useDeviationThreshold": True})))
    with pytest.raises(ValueError, match=str(f)):
        load_config(str(f))
