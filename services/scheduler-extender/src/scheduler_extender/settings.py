"""Settings (env prefix KOORD_EXTENDER_, optional YAML via KOORD_EXTENDER_CONFIG_FILE).

Field names follow Koordinator's LoadAwareSchedulingArgs in snake_case
(usageThresholds -> usage_thresholds), with its defaults.
"""

from __future__ import annotations

from koordcommon.service import ServiceSettings, settings_config
from pydantic import Field, field_validator

from .core import plugins
from .core.estimator import EstimatorArgs
from .core.framework import SCORE_MAPPINGS
from .core.plugins.loadaware import AGGREGATION_TYPES, AggregatedArgs, LoadAwareArgs, Thresholds
from .core.plugins.numa import NUMAResourceArgs
from .core.state import ExtenderConfig

SERVICE = "scheduler-extender"
PERCENTILES = ("p50", "p90", "p95", "p99", "max")


def _thresholds(d: dict[str, int]) -> Thresholds:
    return Thresholds(int(d.get("cpu", 0)), int(d.get("memory", 0)))


class Settings(ServiceSettings):
    model_config = settings_config("KOORD_EXTENDER_")

    http_port: int = Field(10262, ge=0, le=65535)
    url_prefix: str = Field("", description="path prefix of the verbs: <url_prefix>/filter ...")

    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = Field(180, gt=0)
    enable_schedule_when_node_metrics_expired: bool = False
    usage_thresholds: dict[str, int] = Field(default_factory=lambda: {"cpu": 65, "memory": 95})
    prod_usage_thresholds: dict[str, int] = Field(default_factory=dict)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    resource_weights: dict[str, int] = Field(default_factory=lambda: {"cpu": 1, "memory": 1})
    dominant_resource_weight: int = Field(0, ge=0, le=100)
    estimated_scaling_factors: dict[str, int] = Field(default_factory=lambda: {"cpu": 85, "memory": 70})
    estimated_seconds_after_pod_scheduled: int | None = None
    estimated_seconds_after_initialized: int | None = None
    allow_customize_estimation: bool = Field(
        False, description="pod annotations may override the estimation (scaling factors, estimation windows)"
    )
    aggregated_usage_thresholds: dict[str, int] = Field(default_factory=dict)
    usage_aggregation_type: str = ""
    usage_aggregated_duration_seconds: int = 0
    score_aggregation_type: str = ""
    score_aggregated_duration_seconds: int = 0

    # NodeNUMAResourceArgs (exclusive CPUs for LSE / LSR pods)
    default_cpu_bind_policy: str = Field("FullPCPUs", pattern="^(FullPCPUs|SpreadByPCPUs)$",
                                         description="bind policy of pods whose resource-spec names none")
    scoring_strategy: str = Field("LeastAllocated", pattern="^(LeastAllocated|MostAllocated)$",
                                  description="NodeNUMAResource: prefer emptier or fuller nodes")
    numa_scoring_strategy: str = Field("LeastAllocated", pattern="^(LeastAllocated|MostAllocated)$",
                                       description="NUMA allocate strategy of nodes without the label")

    use_profiles: bool = True
    profile_percentile: str = "p95"
    profile_window_seconds: int = 86400
    score_mapping: str = "range"
    score_min_span: int = Field(10, ge=1, le=100)
    assume_ttl_seconds: float = Field(30.0, ge=0)
    bind_verb: bool = Field(False, description="serve POST <url_prefix>/bind: kube-scheduler's bindVerb")
    fail_unknown_nodes: bool = True
    plugins: list[str] = Field(
        default_factory=lambda: list(plugins.DEFAULT_ORDER),
        description="filter/score plugins in the order they run (NodeKnown always first)",
    )
    plugin_weights: dict[str, int] = Field(
        default_factory=dict, description="score weight per plugin name, overriding the plugin's own"
    )

    @field_validator("usage_thresholds", "prod_usage_thresholds", "aggregated_usage_thresholds")
    @classmethod
    def _percent_map(cls, v: dict[str, int]) -> dict[str, int]:
        for k, x in v.items():
            if k not in ("cpu", "memory"):
                raise ValueError(f"threshold for {k!r}: only cpu and memory are supported")
            if not 0 <= x <= 100:
                raise ValueError(f"threshold {k}={x} must be within 0..100")
        return v

    @field_validator("resource_weights", "estimated_scaling_factors")
    @classmethod
    def _one_to_hundred(cls, v: dict[str, int]) -> dict[str, int]:
        for k, x in v.items():
            if k not in ("cpu", "memory"):
                raise ValueError(f"{k!r}: only cpu and memory are supported")
            if not 1 <= x <= 100:
                raise ValueError(f"{k}={x} must be within 1..100")
        return v

    @field_validator("usage_aggregation_type", "score_aggregation_type")
    @classmethod
    def _agg_type(cls, v: str) -> str:
        if v and v not in AGGREGATION_TYPES:
            raise ValueError(f"{v!r} is not one of {', '.join(AGGREGATION_TYPES)}")
        return v

    @field_validator("profile_percentile")
    @classmethod
    def _percentile(cls, v: str) -> str:
        if v not in PERCENTILES:
            raise ValueError(f"{v!r} is not one of {', '.join(PERCENTILES)}")
        return v

    @field_validator("plugins")
    @classmethod
    def _plugins(cls, v: list[str]) -> list[str]:
        unknown = [n for n in v if n not in plugins.FACTORIES]
        if unknown:
            raise ValueError(f"unknown plugin(s) {', '.join(unknown)}; known: {', '.join(plugins.FACTORIES)}")
        return v

    @field_validator("plugin_weights")
    @classmethod
    def _weights(cls, v: dict[str, int]) -> dict[str, int]:
        for name, w in v.items():
            if name not in plugins.FACTORIES:
                raise ValueError(f"weight for unknown plugin {name!r}; known: {', '.join(plugins.FACTORIES)}")
            if w < 0:
                raise ValueError(f"weight of {name} must not be negative")
        return v

    @field_validator("score_mapping")
    @classmethod
    def _mapping(cls, v: str) -> str:
        if v not in SCORE_MAPPINGS:
            raise ValueError(f"{v!r} is not one of {', '.join(SCORE_MAPPINGS)}")
        return v

    def extender_config(self) -> ExtenderConfig:
        factors = {"cpu": 85, "memory": 70, **self.estimated_scaling_factors}
        weights = self.resource_weights
        return ExtenderConfig(
            load=LoadAwareArgs(
                filter_expired_node_metrics=self.filter_expired_node_metrics,
                node_metric_expiration_s=self.node_metric_expiration_seconds,
                enable_schedule_when_node_metrics_expired=self.enable_schedule_when_node_metrics_expired,
                usage_thresholds=_thresholds(self.usage_thresholds),
                prod_usage_thresholds=_thresholds(self.prod_usage_thresholds),
                prod_usage_include_sys=self.prod_usage_include_sys,
                score_according_prod_usage=self.score_according_prod_usage,
                cpu_weight=weights.get("cpu", 0),
                memory_weight=weights.get("memory", 0),
                dominant_resource_weight=self.dominant_resource_weight,
                estimated_seconds_after_pod_scheduled=self.estimated_seconds_after_pod_scheduled,
                estimated_seconds_after_initialized=self.estimated_seconds_after_initialized,
                aggregated=AggregatedArgs(
                    usage_thresholds=_thresholds(self.aggregated_usage_thresholds),
                    usage_aggregation_type=self.usage_aggregation_type,
                    usage_aggregated_duration_s=self.usage_aggregated_duration_seconds,
                    score_aggregation_type=self.score_aggregation_type,
                    score_aggregated_duration_s=self.score_aggregated_duration_seconds,
                ),
            ),
            numa=NUMAResourceArgs(self.default_cpu_bind_policy, self.scoring_strategy, self.numa_scoring_strategy),
            estimator=EstimatorArgs(
                cpu_factor=factors["cpu"], memory_factor=factors["memory"], allow_customize=self.allow_customize_estimation
            ),
            use_profiles=self.use_profiles,
            score_mapping=self.score_mapping,
            score_min_span=self.score_min_span,
            assume_ttl_s=self.assume_ttl_seconds,
            fail_unknown_nodes=self.fail_unknown_nodes,
            plugins=tuple(self.plugins),
            plugin_weights=dict(self.plugin_weights),
        )
