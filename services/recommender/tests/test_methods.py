"""Each recommender method against hand-computed vectors.

VPA's CPU buckets (first 0.01 core, ratio 1.05) start at 0.2 x (1.05^k - 1) cores, so:
1.0 core is bucket 36 = [0.958363, 1.016281), midpoint 0.987322;
3.0 cores is bucket 56 = [2.873482, 3.027157), midpoint 2.950320;
4.0 cores is bucket 62 = [3.918760, 4.124699), midpoint 4.021730.
A percentile reports its bucket's end, as VPA does.
"""

from __future__ import annotations

import random
from array import array

import pytest
from recommender.core.aggregate import AggregateState
from recommender.core.estimator import EstimatorConfig, estimate
from recommender.core.histogram import CPU_SCHEME
from recommender.core.methods import METHODS, VPA, AutopilotMLUnits, AutopilotWindowRise, Sample
from recommender.core.methods.autopilot_ml import EnsembleModel, MLSettings
from recommender.core.methods.autopilot_window import MovingWindow, WindowSettings
from recommender.core.methods.window import SlidingMax

END_1, END_3, END_4 = 1.0162813885540927, 3.027156617060445, 4.124698514136827
HOUR = 3600.0
T0 = 1_700_006_400.0  # a multiple of 300 s: windows start on it


def window_model(**kw) -> MovingWindow:
    return MovingWindow(WindowSettings(**kw), CPU_SCHEME)


# --------------------------------------------------------------------------- moving window


@pytest.mark.parametrize(
    ("samples", "percentile", "load_adjusted", "expected"),
    [
        # equal weights: p50 of {1, 3} is the first bucket reaching half the weight: 1.0's
        ([(0.0, 1.0), (0.0, 3.0)], 0.5, False, END_1),
        # the 3-core sample two half-lives younger weighs 4 against 1: p50 moves up to it ...
        ([(0.0, 1.0), (2 * 12 * HOUR, 3.0)], 0.5, False, END_3),
        # ... but p20 (1 of 5) still falls in the 1-core bucket
        ([(0.0, 1.0), (2 * 12 * HOUR, 3.0)], 0.2, False, END_1),
        # nine samples at 1 and one at 3: p90 of time is the 1-core bucket; p90 of load is 3 cores
        # (weights 9 x 0.987322 = 8.886 and 2.950, and 0.9 x 11.836 = 10.653 > 8.886)
        ([(0.0, 1.0)] * 9 + [(0.0, 3.0)], 0.9, False, END_1),
        ([(0.0, 1.0)] * 9 + [(0.0, 3.0)], 0.9, True, END_3),
    ],
)
def test_window_percentile_decays_by_half_life_and_weights_by_load(samples, percentile, load_adjusted, expected):
    m = window_model(percentile=percentile, load_adjusted=load_adjusted, half_life_s=12 * HOUR)
    st = m.new_state()
    for dt, v in samples:
        m.add(st, T0 + dt, v)
    assert m.statistic(st) == pytest.approx(expected, rel=1e-12)


def test_window_average_weighs_by_decay():
    # 1 core then 3 cores one half-life later: weights 1 and 2 on the bucket midpoints
    m = window_model(statistic="avg", half_life_s=HOUR)
    st = m.new_state()
    m.add(st, T0, 1.0)
    m.add(st, T0 + HOUR, 3.0)
    assert m.statistic(st) == pytest.approx((0.9873223078742333 + 2 * 2.9503195547494823) / 3, rel=1e-12)


def test_window_max_over_the_last_windows_rises_at_once_and_falls_by_half_life():
    m = window_model(statistic="max", max_windows=2, fall_half_life_s=HOUR)
    st = m.new_state()
    for i, v in enumerate((2.0, 5.0, 1.0)):  # three 5-minute windows
        m.add(st, T0 + 300 * i, v)
    assert m.value(st, T0 + 900) == (5.0, 5.0)  # windows [5, 1]: the 2 fell out
    m.add(st, T0 + 900, 1.0)
    m.add(st, T0 + 1200, 1.0)
    assert m.statistic(st) == 1.0  # the last two windows hold 1 and 1 (the open one 1)
    # the raw value fell to 1, the limit falls from 5 by half an hour's decay only
    lim, _ = m.value(st, T0 + 900 + HOUR / 2)
    assert lim == pytest.approx(5.0 * 2**-0.5)
    m.add(st, T0 + 4000, 7.0)
    assert m.value(st, T0 + 4000)[0] == 7.0  # a rise takes effect at once


@pytest.mark.parametrize(("settings", "values", "expected"), [
    # S_max over 2 windows + 20 %: windows 2, 5, 1 -> the peak of [5, 1] is 5, the limit 6
    ({"statistic": "max", "max_windows": 2, "margin": 0.2}, (2.0, 5.0, 1.0),
     {"statistic": "max", "margin": 0.2, "fall_half_life_s": 3600.0, "max_windows": 2, "window_s": 300.0,
      "statistic_value": 5.0, "limit": 6.0}),
    # the rise headroom: window peaks 1, 3 (a rise of 2), 3 -> S_max 3 + 1 x 2
    ({"statistic": "max", "max_windows": 12, "rise_headroom": 1.0, "half_life_s": 1e12}, (1.0, 3.0, 3.0),
     {"statistic": "max", "margin": 0.0, "fall_half_life_s": 3600.0, "max_windows": 12, "window_s": 300.0,
      "statistic_value": 3.0, "rise_headroom": 1.0, "largest_rise": 2.0, "limit": 5.0}),
])
def test_window_explains_its_statistic_and_limit(settings, values, expected):
    m = window_model(**settings)
    st = m.new_state()
    assert m.explain(st)["limit"] is None  # nothing recommended yet
    for i, v in enumerate(values):
        m.add(st, T0 + 300 * i, v)
    m.value(st, T0 + 300 * len(values))
    assert m.explain(st) == pytest.approx(expected)


@pytest.mark.parametrize("pushed, size, peaks, kept, expanded", [
    # 5 3 4 1 2 over 3: 4 evicts 3, then 5 ages out; 2 evicts 1; the last three are 4 1 2
    ([5, 3, 4, 1, 2], 3, [5, 5, 5, 4, 4], [4, 2], [4, 2, 2]),
    (list(range(1, 11)), 5, list(range(1, 11)), [10], [10] * 5),  # rising: only the newest can be the peak
    (list(range(10, 0, -1)), 5, [10, 10, 10, 10, 10, 9, 8, 7, 6, 5], [5, 4, 3, 2, 1], [5, 4, 3, 2, 1]),  # falling: all
    ([2, 2, 2], 2, [2, 2, 2], [2], [2, 2]),  # a tie keeps the newest, which leaves last
])
def test_sliding_max_keeps_only_the_values_that_can_still_be_the_peak(pushed, size, peaks, kept, expanded):
    sm = SlidingMax()
    seen = []
    for v in pushed:
        sm.push(float(v), size)
        seen.append(sm.peak())
    assert seen == peaks and list(sm.values) == kept and list(sm.expanded(size)) == expanded
    assert SlidingMax.of(sm.expanded(size), size).peak() == sm.peak()


def test_sliding_max_is_the_max_of_the_last_values_and_reads_back_an_old_checkpoint():
    rng = random.Random(7)
    values = [rng.random() for _ in range(2000)]
    sm = SlidingMax()
    for i, v in enumerate(values):
        sm.push(v, 288)
        assert sm.peak() == max(values[max(0, i - 287) : i + 1])
    assert len(sm.values) < 30  # of 288: the values newer and larger than all after them
    # a checkpoint stores the 288 values (an older one, the peaks themselves): the same peak after
    # any number of further pushes, and a shorter setting keeps the newest
    for stored in (sm.expanded(288), array("d", values[-288:])):
        again, ref = SlidingMax.of(stored, 288), SlidingMax.of(values[-288:], 288)
        for v in values[:500]:
            again.push(v, 288)
            ref.push(v, 288)
            assert again.peak() == ref.peak()
    assert SlidingMax.of(array("d", [1.0, 7.0, 3.0, 2.0]), 3).peak() == 7.0
    assert SlidingMax.of(array("d", [9.0, 7.0, 3.0, 2.0]), 3).peak() == 7.0


def test_window_memory_takes_one_peak_per_window():
    m = window_model(statistic="percentile", percentile=0.5, peaks_only=True, load_adjusted=False, fall_half_life_s=0)
    st = m.new_state()
    for dt, v in ((0, 1.0), (60, 3.0), (120, 1.0), (300, 1.0), (360, 1.0)):
        m.add(st, T0 + dt, v)
    # window 1 peaked at 3, window 2 at 1: p50 of {3, 1} is the 1-core bucket; read after
    # both windows closed
    assert m.value(st, T0 + 600) == pytest.approx((END_1, END_1), rel=1e-12)


NO_DECAY = 1e15  # a half-life no reading comes near (2^(-300 s / it) is 1 within 1e-12)


@pytest.mark.parametrize(("peaks", "half_life_s", "headroom", "expected"), [
    # window peaks 1, 3, 2 (rises +2, -1): S_max over 2 windows is 3, plus 1 x the rise of 2
    ([1.0, 3.0, 2.0], NO_DECAY, 1.0, 3.0 + 2.0),
    ([1.0, 3.0, 2.0], NO_DECAY, 0.5, 3.0 + 1.0),
    ([1.0, 3.0, 2.0], NO_DECAY, 0.0, 3.0),  # off: S_max alone
    # steps of +1 then +0.5: the largest (1) counts, not the last
    ([1.0, 2.0, 2.5], NO_DECAY, 1.0, 2.5 + 1.0),
    # falling only: no rise, no headroom
    ([3.0, 2.0, 1.0], NO_DECAY, 1.0, 2.0),
    # the rise of 2 closed with window 2 (T0 + 600), read when window 3 closes (T0 + 900):
    # 300 s of a 300-s half-life later, it counts as 1
    ([1.0, 3.0, 2.0], 300.0, 1.0, 3.0 + 1.0),
    # a later, smaller rise replaces a decayed larger one once it is the larger: +2 at T0 + 600
    # (1.0 by T0 + 900) is beaten by the +1.5 closing at T0 + 1200 (2 by then is 0.5)
    ([1.0, 3.0, 1.5, 3.0], 300.0, 1.0, 3.0 + 1.5),
])
def test_window_rise_headroom_adds_the_largest_rise_between_window_peaks(peaks, half_life_s, headroom, expected):
    m = window_model(statistic="max", max_windows=2, peaks_only=True, fall_half_life_s=0, half_life_s=half_life_s,
                     rise_headroom=headroom)
    st = m.new_state()
    for i, v in enumerate(peaks):  # one sample per window: its peak
        m.add(st, T0 + 300 * i, v)
    limit, _ = m.value(st, T0 + 300 * len(peaks))  # read as the last window closes
    assert limit == pytest.approx(expected, rel=1e-12)


def test_window_rise_headroom_survives_a_checkpoint_and_reads_one_written_without_it():
    m = window_model(statistic="max", max_windows=12, peaks_only=True, rise_headroom=1.0, half_life_s=NO_DECAY)
    st = m.new_state()
    for i, v in enumerate((1.0, 4.0, 4.5, 4.0)):
        m.add(st, T0 + 300 * i, v)
    saved = m.save(st)
    again, used = m.load(saved)
    assert used == len(saved) and m.value(again, T0 + 1200) == m.value(st, T0 + 1200)
    assert m.value(st, T0 + 1200) == pytest.approx((4.5 + 3.0, 4.5 + 3.0), rel=1e-12)  # peak 4.5, rise 1 -> 4
    # a checkpoint from before the rise headroom (no trailing rise fields): no rise known yet
    old, used = m.load(saved[: -MovingWindow._RISE.size])
    assert used == len(saved) - MovingWindow._RISE.size and m.value(old, T0 + 1200) == (4.5, 4.5)  # S_max alone


@pytest.mark.parametrize(("changes", "memory"), [
    # the preset: S_max over 12 windows + 5 %, one rise of headroom; each resource keeps its half-life
    ({}, {"statistic": "max", "max_windows": 12, "margin": 0.05, "rise_headroom": 1.0, "half_life_s": 48 * HOUR,
          "peaks_only": True}),
    ({"rise_headroom": 0.5}, {"rise_headroom": 0.5, "margin": 0.05}),  # the evaluation's knob
])
def test_the_rise_preset_is_the_window_under_its_settings(changes, memory):
    m = AutopilotWindowRise(**changes)
    assert {k: getattr(m.memory.s, k) for k in memory} == memory
    assert m.cpu.s.half_life_s == 12 * HOUR and not m.cpu.s.peaks_only
    assert m.cpu.s.rise_headroom == m.memory.s.rise_headroom


# --------------------------------------------------------------------------- ML ensemble


def test_ensemble_model_costs_and_choice_on_three_models():
    """One history (no decay to speak of), three models: margins 0, 50 %, 100 %; w_o 1, w_u 0.1.

    History: 90 samples at 1 core, 10 at 3 cores. Candidate costs (o + 0.1 u):
      L = 1.016281: o = 0.1, u = 0.9 (1.016281 - 0.987322) / 1.016281 -> 0.102565
      L = 3.027157: o = 0,   u = (0.9 (3.027157 - 0.987322) + 0.1 (3.027157 - 2.950320)) / 3.027157
                    -> 0.060900 (the least): limits 3.027157, 4.540735, 6.054313; all costs 0,
                    so the ensemble takes model 0.
    Then two samples at 4 cores. Realised: model 0 over 2 of 2 -> 1.0; model 1 slack
    (4.540735 - 4) / 4.540735 x 0.1 = 0.011909; model 2 0.033931; decayed (d = 0.75): 0.25,
    0.002977, 0.008483. The history (102 samples) now prefers L = 4.124699 (0.069955) to
    3.027157 (2/102 + 0.059706 = 0.079314) by more than w_ΔL = 0.002: every model moves
    (+0.25 x 0.002 each). Ensemble scores: model 0: 0.2505 + 0.002 (limit change) = 0.2525;
    model 1: 0.003477 + 0.002 (model change) + 0.002 = 0.007477; model 2: 0.012983: model 1,
    4.124699 x 1.5.
    """
    s = MLSettings(half_lives_s=(1e12,), margins=(0.0, 0.5, 1.0), w_over=1.0, w_under=0.1,
                   w_limit_change=0.002, w_model_change=0.002, cost_decay=0.75)
    m = EnsembleModel(s, CPU_SCHEME)
    st = m.new_state()
    for i in range(100):
        m.add(st, T0 + i * 1e-3, 1.0 if i < 90 else 3.0)
    assert m.costs(st)[0][[0, 20]] == pytest.approx([0.10256456262068862, 0.06089987462521422], rel=1e-6)
    assert m.value(st, T0 + 1) == pytest.approx((END_3, END_3), rel=1e-9)
    assert st.limits == pytest.approx([END_3, 1.5 * END_3, 2 * END_3], rel=1e-9)
    assert st.model == 0
    m.add(st, T0 + 2, 4.0)
    m.add(st, T0 + 3, 4.0)
    lim, _ = m.value(st, T0 + 4)
    assert st.limits == pytest.approx([END_4, 1.5 * END_4, 2 * END_4], rel=1e-6)
    assert st.cost == pytest.approx([0.2505, 0.003477133296986764, 0.008982849972740074], rel=1e-5)
    assert st.model == 1
    assert lim == pytest.approx(1.5 * END_4, rel=1e-6)
    # what the API shows: every model's limit and decayed cost, the one chosen, the weights
    why = m.explain(st)
    assert why["chosen_model"] == 1 and why["limit"] == pytest.approx(1.5 * END_4, rel=1e-6)
    assert [(x["half_life_s"], x["margin"]) for x in why["models"]] == [(1e12, 0.0), (1e12, 0.5), (1e12, 1.0)]
    assert [x["limit"] for x in why["models"]] == pytest.approx([END_4, 1.5 * END_4, 2 * END_4], rel=1e-6)
    assert [x["decayed_cost"] for x in why["models"]] == pytest.approx([0.2505, 0.003477, 0.008983], abs=1e-6)
    assert why["weights"]["w_under"] == 0.1 and why["underrun"] == "share of the limit"
    assert m.explain(st) == why  # reading it changes nothing
    fresh = m.explain(m.new_state())
    assert fresh["chosen_model"] is None and fresh["limit"] is None and fresh["models"][0]["limit"] is None


def test_ensemble_model_keeps_its_limit_when_moving_saves_less_than_the_change_cost():
    s = MLSettings(half_lives_s=(1e12,), margins=(0.0,), w_over=1.0, w_under=0.1, w_limit_change=0.05)
    m = EnsembleModel(s, CPU_SCHEME)
    st = m.new_state()
    for i in range(100):
        m.add(st, T0 + i * 1e-3, 1.0 if i < 90 else 3.0)
    assert m.value(st, T0 + 1)[0] == pytest.approx(END_3)
    m.add(st, T0 + 2, 4.0)
    m.add(st, T0 + 3, 4.0)
    # moving to 4.124699 would save 0.079314 - 0.069955 = 0.0094 < 0.05: it stays
    assert m.value(st, T0 + 4)[0] == pytest.approx(END_3)


@pytest.mark.parametrize(("unit", "costs", "limit"), [
    # the history above (90 samples at 1 core, 10 at 3), one model, no margin; w_o 1, w_u 0.1
    # share of L: 0.102565 at 1.016281, 0.060900 at 3.027157 (as above): 3.027157
    (0.0, (0.10256456262068862, 0.06089987462521422), END_3),
    # in cores: L = 1.016281: 0.1 + 0.1 x 0.9 (1.016281 - 0.987322) = 0.102606;
    # L = 3.027157: 0.1 x (0.9 (3.027157 - 0.987322) + 0.1 (3.027157 - 2.950320)) = 0.184354:
    # the tight limit, every tenth sample over
    (1.0, (0.10260628, 0.18435351), END_1),
    # in units of 10 cores the slack costs a tenth as much: 0.100261 and 0.018435
    (10.0, (0.10026063, 0.01843535), END_3),
])
def test_underrun_in_resource_units_makes_a_large_slack_cost_more(unit, costs, limit):
    s = MLSettings(half_lives_s=(1e12,), margins=(0.0,), w_over=1.0, w_under=0.1, underrun_unit=unit)
    m = EnsembleModel(s, CPU_SCHEME)
    st = m.new_state()
    for i in range(100):
        m.add(st, T0 + i * 1e-3, 1.0 if i < 90 else 3.0)
    assert m.costs(st)[0][[0, 20]] == pytest.approx(costs, rel=1e-6)
    assert m.value(st, T0 + 1)[0] == pytest.approx(limit, rel=1e-9)
    # what the limit in force cost on the samples after it: 2 samples at 0.5 core
    m.add(st, T0 + 2, 0.5)
    m.add(st, T0 + 3, 0.5)
    slack = 2 * (limit - 0.5)
    assert st.under[0] == pytest.approx(slack / unit if unit else slack / limit, rel=1e-9)


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_underrun_unit_must_be_zero_or_a_positive_amount(value):
    with pytest.raises(ValueError, match="underrun_unit"):
        MLSettings(underrun_unit=value)


@pytest.mark.parametrize(("scale", "cpu", "memory"), [
    (1.0, (1.0, 0.05), (1024.0**3, 0.002)),  # the preset: cores and GiB
    (2.0, (1.0, 0.1), (1024.0**3, 0.004)),  # the evaluation's knob scales both weights
])
def test_the_units_preset_counts_cores_and_gib(scale, cpu, memory):
    m = AutopilotMLUnits(w_under_scale=scale)
    assert (m.cpu.s.underrun_unit, m.cpu.s.w_under) == pytest.approx(cpu)
    assert (m.memory.s.underrun_unit, m.memory.s.w_under) == pytest.approx(memory)
    assert m.memory.s.peaks_only and not m.cpu.s.peaks_only


# --------------------------------------------------------------------------- VPA and the interface


def test_vpa_method_is_the_estimator_target():
    vpa = VPA(estimator=EstimatorConfig(sample_interval_s=300))
    st = vpa.new_state()
    ref = AggregateState()
    for i in range(288):
        cpu = 1.5 if i == 200 else 1.0
        vpa.add(st, Sample(T0 + 300 * i, cpu, 2e9, 2.0))
        ref.add_cpu_sample(b"\0" * 8, T0 + 300 * i, cpu, 2.0)
        ref.add_memory_sample(b"\0" * 8, T0 + 300 * i, 2e9)
    rec = vpa.recommend(st, T0 + 86400)
    target = estimate(ref, EstimatorConfig(sample_interval_s=300)).target
    assert rec.request.cpu_cores == rec.limit.cpu_cores == 1.168 == target.cpu_milli / 1000
    assert rec.request.memory_bytes == target.memory_bytes


@pytest.mark.parametrize("method", [cls() for cls in METHODS.values()], ids=list(METHODS))
def test_a_reloaded_state_recommends_the_same(method):
    st = method.new_state()
    for i in range(2000):
        t = T0 + 30 * i
        method.add(st, Sample(t, 0.2 + (i % 97) / 100, 1e9 + (i % 13) * 5e7, 0.5))
        if i % 120 == 0:
            method.recommend(st, t)
    copy = method.load(method.save(st))
    for dt in (30.0, 3600.0):
        assert method.recommend(copy, T0 + 60000 + dt) == method.recommend(st, T0 + 60000 + dt)
    assert len(method.save(st)) <= 4096
