"""The active recommender method: cluster-wide setting, per-workload annotation, checkpoints."""

from __future__ import annotations

import dataclasses

import pytest
from koordcommon.records import PodRecord
from koordcommon.schemas import Owner, PodUsage
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from recommender.cluster import METHOD_ANNOTATION, MethodResolver
from recommender.core.engine import RecommenderState, UsageSample
from recommender.core.methods import AutopilotWindow, Sample
from recommender.core.workload import ContainerKey, WorkloadKey
from recommender.main import Settings

T0 = 1_700_006_400.0
WL = WorkloadKey("ns", "Deployment", "api")
KEY = ContainerKey(WL, "app")


def feed(state: RecommenderState, n: int = 400) -> None:
    for i in range(n):
        # 1 core, and 4 cores one sample in ten
        state.add(UsageSample(KEY, "pod-1", T0 + 60 * i, 4.0 if i % 10 == 9 else 1.0, 2e9, 1.0, 2e9))


def target(state: RecommenderState):
    return state.recommend(WL).containers[0].estimate


def test_the_default_method_and_a_workload_of_its_own():
    vpa = RecommenderState()
    feed(vpa)
    window = RecommenderState(method="autopilot-window")
    feed(window)
    # what the moving window gives on the same samples, through the method on its own
    mw = AutopilotWindow()
    st = mw.new_state()
    for i in range(400):
        mw.add(st, Sample(T0 + 60 * i, 4.0 if i % 10 == 9 else 1.0, 2e9, 1.0, 2e9))
    rec = mw.recommend(st, window.now)
    assert target(window).target.cpu_milli == int(rec.request.cpu_cores * 1000) != target(vpa).target.cpu_milli
    assert target(window).upper_bound.cpu_milli == int(rec.limit.cpu_cores * 1000)
    # the annotation moves one workload to another method; None takes it back to the default
    vpa_target = target(vpa)
    vpa.set_method(WL, "autopilot-window")
    assert vpa.method_of(WL) == "autopilot-window" and KEY not in vpa.method_states
    feed(vpa)  # the same samples again are redeliveries: VPA's dedupe drops them, the method too
    assert KEY not in vpa.method_states
    assert target(vpa) == vpa_target  # a method without samples of its own yet: VPA's stands
    vpa.set_method(WL, None)
    assert vpa.method_of(WL) == "vpa"
    with pytest.raises(ValueError, match="unknown recommender method"):
        vpa.set_method(WL, "crane")
    with pytest.raises(ValueError, match="unknown recommender method"):
        RecommenderState(method="crane")


def test_the_result_says_which_method_gave_the_target_and_why():
    state = RecommenderState()
    feed(state)
    assert state.recommend(WL).containers[0].explanation == {}  # only when asked for: publishing needs none
    c = state.recommend(WL, explain=True).containers[0]
    assert (c.method, c.configured_method) == ("vpa", "vpa")
    assert c.explanation["target_cpu_percentile"] == 0.9 and c.explanation["safety_margin"] == 0.15
    # the target is the histogram's p90 plus 15 %, each step truncated as VPA's estimator does
    cpu_milli = int(c.explanation["cpu_at_percentile"] * 1000)
    assert c.estimate.target.cpu_milli == cpu_milli + int(cpu_milli * 0.15)
    memory = c.explanation["memory_at_percentile"]
    assert c.estimate.target.memory_bytes == memory + int(memory * 0.15)
    # set to the window: VPA's target stands until the window has samples of its own, and says so
    state.set_method(WL, "autopilot-window")
    c = state.recommend(WL, explain=True).containers[0]
    assert (c.method, c.configured_method) == ("vpa", "autopilot-window")
    state.add(UsageSample(KEY, "pod-1", T0 + 60 * 400, 1.0, 2e9, 1.0, 2e9))
    c = state.recommend(WL, explain=True).containers[0]
    assert (c.method, c.configured_method) == ("autopilot-window", "autopilot-window")
    cpu, memory = c.explanation["cpu"], c.explanation["memory"]
    assert (cpu["statistic"], cpu["percentile"], memory["percentile"]) == ("percentile", 0.95, 0.98)
    # the explained limit is the target (in cores; the target in milli-cores, truncated)
    assert int(cpu["limit"] * 1000) == c.estimate.target.cpu_milli
    # memory takes one peak per closed 5-minute window: none yet, so the limit is 0 and the
    # target is the container's share of the per-pod minimum, which the explanation names
    assert memory["limit"] == 0.0 and c.estimate.target.memory_bytes == 250 * 2**20
    assert c.explanation["minimums"] == {"cpu_milli": 25, "memory_bytes": 250 * 2**20}
    for i in range(1, 12):  # a window closes
        state.add(UsageSample(KEY, "pod-1", T0 + 60 * (400 + i), 1.0, 2e9, 1.0, 2e9))
    c = state.recommend(WL, explain=True).containers[0]
    assert int(c.explanation["memory"]["limit"]) == c.estimate.target.memory_bytes > 2e9


def test_a_method_state_survives_the_checkpoint():
    state = RecommenderState()
    state.set_method(WL, "autopilot-ml")
    feed(state)
    before = target(state)
    data = state.snapshot()[KEY]
    assert data[0] == 2  # the envelope: aggregate and method state
    again = RecommenderState()
    again.restore(KEY, data)
    assert again.method_of(WL) == "autopilot-ml"
    assert target(again) == before
    plain = RecommenderState()
    feed(plain)
    assert plain.snapshot()[KEY][0] == 1  # VPA alone: the aggregate as before


def test_the_setting_names_the_methods():
    from recommender.main import build_state

    assert Settings().method == "vpa"
    assert Settings(method="autopilot-ml").method == "autopilot-ml"
    # the window's preset is a method of its own: a workload (or the cluster) names it
    state = build_state(Settings(method="autopilot-window-rise", window_memory={"percentile": 0.9}))
    assert set(state.methods) == {"autopilot-window", "autopilot-window-rise", "autopilot-ml", "autopilot-ml-units"}
    rise = state.methods["autopilot-window-rise"].memory.s
    assert (rise.statistic, rise.max_windows, rise.margin, rise.rise_headroom) == ("max", 12, 0.05, 1.0)
    assert rise.percentile == 0.98  # the window settings tune autopilot-window, not the preset
    assert state.methods["autopilot-window"].memory.s.percentile == 0.9
    state.set_method(WL, "autopilot-window")
    assert state.method_of(WL) == "autopilot-window"
    # the names come from the methods themselves (core.methods.METHODS): one list to keep
    with pytest.raises(ValueError, match="did you mean autopilot-ml.*one of vpa, autopilot-window, "
                       "autopilot-window-rise, autopilot-ml"):
        Settings(method="autopilot")
    with pytest.raises(ValueError, match="unknown recommender method 'crane'"):
        Settings(method="crane")


async def test_the_annotation_is_read_from_the_workload_pod():
    cluster = SimCluster(SimSpec(nodes=1, online_pods_per_node=2))
    await cluster.start()
    pods = await cluster.list_pods()
    annotated = dataclasses.replace(pods[0], name="annotated", uid="", annotations={METHOD_ANNOTATION: "autopilot-ml"})
    odd = dataclasses.replace(pods[0], name="odd", uid="", annotations={METHOD_ANNOTATION: "crane"})
    for p in (annotated, odd):
        await cluster.create_pod(p)
    resolve = MethodResolver(cluster, ("vpa", "autopilot-window", "autopilot-ml"))

    def usage(p: PodRecord) -> PodUsage:
        return PodUsage(uid=p.uid, namespace=p.namespace, name=p.name, owner=Owner(kind="ReplicaSet", name="x"))

    assert await resolve(WorkloadKey("a", "Deployment", "a"), usage(annotated)) == "autopilot-ml"
    assert await resolve(WorkloadKey("b", "Deployment", "b"), usage(odd)) is None  # unknown: the default
    assert await resolve(WorkloadKey("c", "Deployment", "c"), usage(pods[1])) is None
    # answered from the cache afterwards, even for a pod the cluster no longer has
    assert await resolve(WorkloadKey("a", "Deployment", "a"), usage(dataclasses.replace(annotated, name="gone"))) == "autopilot-ml"
    assert await MethodResolver(None, ())(WorkloadKey("a", "Deployment", "a"), usage(annotated)) is None


# --------------------------------------------------------------------------- each method's knobs


@pytest.mark.parametrize(
    "settings, method, resource, field, expected",
    [
        ({}, "autopilot-window", "memory", "percentile", 0.98),  # the documented defaults
        ({}, "autopilot-ml", "cpu", "w_under", 0.07),
        ({"window_memory": {"statistic": "max", "max_windows": 288, "margin": 0.1}}, "autopilot-window", "memory",
         "max_windows", 288),
        ({"window_cpu": {"percentile": 0.9}}, "autopilot-window", "cpu", "percentile", 0.9),
        ({"ml_memory": {"w_under": 0.05}}, "autopilot-ml", "memory", "w_under", 0.05),
        ({"ml_cpu": {"half_lives_s": [1800, 7200]}}, "autopilot-ml", "cpu", "half_lives_s", (1800, 7200)),
    ],
)
def test_a_method_knob_in_the_settings_reaches_the_method(settings, method, resource, field, expected):
    from recommender.main import build_state

    state = build_state(Settings(**settings))
    model = getattr(state.methods[method], resource)
    assert getattr(model.s, field) == expected
    # memory keeps one peak per window whatever the settings say
    assert model.s.peaks_only is (resource == "memory")


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"ml_memory": {"w_undr": 0.1}}, "ml_memory: unknown field 'w_undr' (did you mean w_under?)"),
        ({"window_cpu": {"percentile": 2}}, "window_cpu: percentile must be in (0, 1]"),
        ({"window_memory": {"statistic": "median"}}, "window_memory: statistic must be one of percentile, max, avg"),
        ({"window_cpu": {"peaks_only": True}}, "window_cpu: unknown field 'peaks_only'"),
        ({"ml_cpu": {"half_lives_s": []}}, "ml_cpu: the ensemble needs 1..64 models"),
        ({"ml_cpu": {"cost_decay": 1.0}}, "ml_cpu: cost_decay must be in [0, 1)"),
    ],
)
def test_a_method_knob_out_of_range_or_unknown_is_refused_naming_it(settings, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        Settings(**settings)
    assert message in str(err.value)


def test_method_knobs_from_the_environment(monkeypatch):
    from koordcommon.service import load_settings
    from recommender.main import build_state

    monkeypatch.setenv("KOORD_RECOMMENDER_WINDOW_MEMORY", '{"statistic": "max", "max_windows": 12}')
    monkeypatch.setenv("KOORD_RECOMMENDER_ML_CPU", '{"w_under": 0.02}')
    state = build_state(load_settings(Settings))
    assert state.methods["autopilot-window"].memory.s.statistic == "max"
    assert state.methods["autopilot-window"].memory.s.max_windows == 12
    assert state.methods["autopilot-ml"].cpu.s.w_under == 0.02


def test_a_checkpoint_written_under_other_method_knobs_restarts_only_that_method():
    from recommender.main import build_state

    before = build_state(Settings(method="autopilot-ml"))
    feed(before)
    window = build_state(Settings(method="autopilot-window", window_memory={"statistic": "max", "max_windows": 48}))
    feed(window)
    vpa_only = RecommenderState()
    feed(vpa_only)
    vpa_target = target(vpa_only)
    # the ensemble re-shaped (two half-lives, not four): its state cannot be read back
    after = build_state(Settings(method="autopilot-ml", ml_cpu={"half_lives_s": [1800, 7200]}))
    after.restore(KEY, before.checkpoint(KEY))
    assert KEY not in after.method_states  # the method starts afresh for this container
    assert after.method_of(WL) == "autopilot-ml"
    assert after.containers[KEY].save() == before.containers[KEY].save()  # VPA's aggregate kept
    assert target(after).target == vpa_target.target  # no samples of the method's own yet: VPA's stands
    # the moving window read back with a shorter window keeps only the newest peaks
    shorter = build_state(Settings(method="autopilot-window", window_memory={"statistic": "max", "max_windows": 3}))
    shorter.restore(KEY, window.checkpoint(KEY))
    kept, full = shorter.method_states[KEY][1].memory.peaks, window.method_states[KEY][1].memory.peaks
    assert kept.count == 3 and full.count > 3
    assert list(kept.expanded(3)) == list(full.expanded(48))[-3:]
