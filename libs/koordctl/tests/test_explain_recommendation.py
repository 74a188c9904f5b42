"""`koordctl explain recommendation`: each method's explanation spelt out as the sum it is, on
hand-made answers of the recommender's shape."""

from __future__ import annotations

import pytest
from koordctl.explain_cmd import split_workload
from koordctl.explain_recommendation import container_lines, explanation_lines, span

GIB = 1024**3
MINIMUMS = {"cpu_milli": 25, "memory_bytes": 250 * 2**20}


def target(cpu_milli: int, memory_bytes: int) -> dict:
    return {"cpu_milli": cpu_milli, "memory_bytes": memory_bytes}


VPA = {"target_cpu_percentile": 0.9, "cpu_at_percentile": 1.2079, "target_memory_percentile": 0.9,
       "memory_at_percentile": 3 * GIB, "safety_margin": 0.15, "cpu_half_life_s": 86400.0,
       "memory_half_life_s": 86400.0, "minimums": MINIMUMS}  # fmt: skip


def window(statistic: str, value, limit, **more) -> dict:
    return {"statistic": statistic, "margin": more.pop("margin", 0.0), "fall_half_life_s": 3600.0,
            "statistic_value": value, "limit": limit, **more}  # fmt: skip


def model(half_life_s: float, margin: float, limit, cost) -> dict:
    return {"half_life_s": half_life_s, "margin": margin, "limit": limit, "decayed_cost": cost}


WEIGHTS = {"w_over": 0.5, "w_under": 0.05, "w_limit_change": 0.002, "w_model_change": 0.002, "cost_decay": 0.75}


@pytest.mark.parametrize(
    ("explanation", "tgt", "expected"),
    [
        # VPA: percentile + margin, truncated; the target shown is the recommender's
        (VPA, target(1388, 3704409292), [
            ("  cpu: p90 of the CPU usage histogram (weights halve every 24 h) = 1.208 cores; + safety margin 15 %: "
            "target 1.388 cores"),
            ("  memory: p90 of the daily memory peaks histogram (weights halve every 24 h) = 3Gi; + safety margin "
            "15 %: target 3.45Gi"),
            "  minimums: no target below this container's share of the per-pod minimums, 0.025 cores and 0.244Gi",
        ]),
        # a figure below the per-pod minimum: the target is the minimum, and the line says so
        ({**VPA, "cpu_at_percentile": 0.02}, target(25, 3704409292), [
            ("  cpu: p90 of the CPU usage histogram (weights halve every 24 h) = 0.02 cores; + safety margin 15 %: "
            "target 0.025 cores (the method's 0.023 cores is below the minimum: target 0.025 cores)"),
            ("  memory: p90 of the daily memory peaks histogram (weights halve every 24 h) = 3Gi; + safety margin "
            "15 %: target 3.45Gi"),
            "  minimums: no target below this container's share of the per-pod minimums, 0.025 cores and 0.244Gi",
        ]),
        # the moving window: S_max + margin + rise headroom; and a percentile whose limit is
        # still falling slowly from an earlier, higher one
        ({"cpu": window("max", 4.0, 7.174119, margin=0.05, max_windows=12, window_s=300.0, rise_headroom=1.0,
                        largest_rise=2.974119),
          "memory": window("percentile", 2 * GIB, 2.5 * GIB, half_life_s=172800.0, percentile=0.98, margin=0.1)},
         target(7174, int(2.5 * GIB)), [
            ("  cpu: the highest peak of the last 12 windows of 5 min = 4 cores; + margin 5 % + 1 x the largest rise "
            "between windows (2.974 cores) = limit 7.174 cores"),
            ("  memory: p98 of the usage histogram (weights halve every 2 d) = 2Gi; + margin 10 % = limit 2.5Gi "
            "(held above 2.2Gi while a drop takes effect, halving every 1 h)"),
        ]),
        # the decayed average; a window with no closed window yet gives nothing but the minimum
        ({"cpu": window("avg", 0.5, 0.5, half_life_s=43200.0),
          "memory": window("percentile", None, None, half_life_s=172800.0, percentile=0.98), "minimums": MINIMUMS},
         target(500, 250 * 2**20), [
            "  cpu: the decayed average (weights halve every 12 h) = 0.5 cores; + margin 0 % = limit 0.5 cores",
            "  memory: p98 of the usage histogram (weights halve every 2 d) = none yet; + margin 0 % = limit none yet",
            "  minimums: no target below this container's share of the per-pod minimums, 0.025 cores and 0.244Gi",
        ]),
        # the ensemble: the model with the least decayed cost, the runner-up, every model
        ({"cpu": {"chosen_model": 1, "limit": 1.1, "weights": WEIGHTS, "underrun": "in units of 1",
                  "models": [model(1800.0, 0.0, 1.0, 0.02), model(1800.0, 0.1, 1.1, 0.01), model(7200.0, 0.0, 0.9, 0.03)]},
          "memory": {"chosen_model": None, "limit": None, "weights": WEIGHTS, "underrun": "in units of 1073741824",
                     "models": [model(1800.0, 0.0, None, 0.0)]}},
         target(1100, 250 * 2**20), [
            "  cpu: model 2 of 3 (half-life 30 min, margin 10 %): limit 1.1 cores, decayed cost 0.01; next: model 1, 0.02",
            ("    chosen by the least decayed cost (x 0.75 per decision) of overrun x 0.5 + underrun x 0.05 "
            "(in units of 1 cores), plus 0.002 to move the limit and 0.002 to switch model"),
            ("    models (half-life/margin, limit, decayed cost):  1: 30 min/0 % 1 cores (0.02); *2: 30 min/10 % "
            "1.1 cores (0.01);  3: 2 h/0 % 0.9 cores (0.03)"),
            "  memory: no model has chosen a limit yet (no samples scored)",
        ]),
        # a shape this koordctl does not know: its figures one by one
        ({"alpha": 1, "nested": {"b": 2}}, None, ["  alpha: 1", "  nested:", "    b: 2"]),
        ({}, None, ["  no explanation given (a recommender older than this koordctl, or no samples yet)"]),
    ],
)
def test_each_method_as_the_sum_it_is(explanation, tgt, expected):
    assert explanation_lines(explanation, tgt) == expected


def test_a_container_set_to_a_method_without_samples_shows_vpa_and_says_so():
    c = {"container": "app", "samples": 400, "provisional": False,
         "recommendation": {"target": target(1388, 3 * GIB), "lower_bound": target(1000, 2 * GIB),
                            "upper_bound": target(2000, 4 * GIB), "confidence": 1.0},
         "current_requests": target(2000, 4 * GIB),
         "method": {"used": "vpa", "configured": "autopilot-ml", "explanation": {}}}  # fmt: skip
    assert container_lines(c)[:4] == [
        "container app: method vpa (set: autopilot-ml, no samples of its own yet)",
        "  target 1.388 cores, 3Gi; requests now 2 cores, 4Gi; bounds 1 cores, 2Gi to 2 cores, 4Gi",
        "  400 samples, confidence 1.0",
        "  autopilot-ml has no samples of its own yet: the target is vpa's",
    ]


@pytest.mark.parametrize(
    ("given", "namespace", "expected"),
    [
        ("shop/Deployment/web", "default", ("shop", "Deployment", "web")),
        ("Deployment/web", "shop", ("shop", "Deployment", "web")),
        ("web", "shop", None),
        ("a/b/c/d", "shop", None),
        ("shop//web", "shop", None),
    ],
)
def test_workload_names(given, namespace, expected):
    if expected is None:
        with pytest.raises(ValueError, match="give namespace/kind/name"):
            split_workload(given, namespace)
    else:
        assert split_workload(given, namespace) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(90, "90 s"), (300, "5 min"), (1800, "30 min"), (43200, "12 h"), (86400, "24 h"), (172800, "2 d"),
     (5400, "90 min"), (None, "?")],
)
def test_spans(seconds, text):
    assert span(seconds) == text
