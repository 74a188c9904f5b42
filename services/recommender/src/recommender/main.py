"""Entry point: `koord-recommender` / `python -m recommender`."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, TypeVar

from koordcommon.service import Service, ServiceSettings, run_service, settings_config
from koordcommon.suggest import closest
from koordcommon.wiring import start_bus, start_cluster
from pydantic import Field, field_validator, model_validator

from .api import router
from .core.aggregate import AggregationConfig
from .core.engine import RecommenderState
from .core.estimator import EstimatorConfig
from .core.methods import METHODS, configured_methods
from .runner import Intervals, Recommender
from .store import CheckpointStore

C = TypeVar("C")


class Settings(ServiceSettings):
    model_config = settings_config("KOORD_RECOMMENDER_")
    http_port: int = Field(8085, ge=0, le=65535)
    checkpoint_interval_s: float = Field(60.0, ge=0, description="0 = checkpoint every batch before its ack")
    publish_interval_s: float = Field(30.0, gt=0)
    change_threshold: float = Field(0.1, ge=0, description="publish when a target moves by more than this fraction")
    batch_size: int = Field(500, ge=1)
    cpu_half_life_s: float = Field(86400.0, gt=0)
    memory_half_life_s: float = Field(86400.0, gt=0)
    memory_aggregation_interval_s: float = Field(86400.0, gt=0)
    memory_aggregation_interval_count: int = Field(8, ge=1)
    safety_margin: float = Field(0.15, ge=0)
    pod_min_cpu_milli: int = Field(25, ge=0)
    pod_min_memory_bytes: int = Field(250 * 1024 * 1024, ge=0)
    oom_bump_up_ratio: float = Field(1.2, ge=1)
    oom_min_bump_up_bytes: int = Field(100 * 1024 * 1024, ge=0)
    # Seconds of history one sample stands for in the confidence formula (node-agent reports
    # every 10 s; VPA assumes 60).
    sample_interval_s: float = Field(10.0, gt=0)
    write_custom_objects: bool = True
    # The recommender method of every workload whose pods do not name one in the
    # analysis.koordinator.sh/recommender annotation (core/methods; README, evaluation).
    method: str = "vpa"  # a name in core.methods.METHODS
    # Each Autopilot method's knobs per resource, over its documented defaults (README): fields
    # of WindowSettings / MLSettings, e.g. {"percentile": 0.9, "half_life_s": 21600} or
    # {"w_under": 0.05, "half_lives_s": [1800, 7200]}. An unknown field is refused at start-up.
    window_cpu: dict[str, Any] = Field(default_factory=dict)
    window_memory: dict[str, Any] = Field(default_factory=dict)
    ml_cpu: dict[str, Any] = Field(default_factory=dict)
    ml_memory: dict[str, Any] = Field(default_factory=dict)

    @field_validator("method")
    @classmethod
    def _known_method(cls, name: str) -> str:
        if name not in METHODS:
            near = closest(name, list(METHODS))
            hint = f"did you mean {near}? " if near else ""
            raise ValueError(f"unknown recommender method {name!r}: {hint}one of {', '.join(METHODS)}")
        return name

    @model_validator(mode="after")
    def _methods_build(self) -> Settings:
        method_settings(self)  # refuses an unknown field or a value out of range, naming it
        return self


def method_settings(s: Settings) -> dict:
    return configured_methods(s.window_cpu, s.window_memory, s.ml_cpu, s.ml_memory)


def build_state(s: Settings) -> RecommenderState:
    return RecommenderState(
        core_config(AggregationConfig, s), core_config(EstimatorConfig, s), change_threshold=s.change_threshold,
        method=s.method, methods=method_settings(s),
    )  # fmt: skip


def core_config(config: type[C], s: Settings) -> C:
    """A core config dataclass with every field the settings carry under the same name
    (the others keep the core's defaults)."""
    return config(**{f.name: getattr(s, f.name) for f in dataclasses.fields(config) if f.name in Settings.model_fields})


async def run(svc: Service) -> None:
    settings: Settings = svc.settings  # type: ignore[assignment]
    ready = {"loaded": False}
    # Registered first: HTTP is already up, and with no check at all /readyz would say ready.
    # Not ready (and the API answers 503) until the checkpoints are loaded and the consumer runs.
    svc.health.add_check("checkpoints", lambda: ready["loaded"])
    store = await asyncio.to_thread(CheckpointStore, settings.database_url, str(svc.data_dir))
    svc.on_shutdown(lambda: asyncio.to_thread(store.close))
    svc.health.add_check("database", lambda: asyncio.to_thread(store.ping))
    bus = await start_bus(svc)
    cluster = await start_cluster(svc, bus)
    state = build_state(settings)
    rec = Recommender(
        state,
        store,
        bus,
        cluster,
        Intervals(checkpoint_s=settings.checkpoint_interval_s, publish_s=settings.publish_interval_s),
        write_custom_objects=settings.write_custom_objects,
    )
    await rec.start(batch=settings.batch_size)
    svc.app.state.recommender_state = state
    svc.app.state.recommender = rec
    ready["loaded"] = True
    svc.mark_started()
    await rec.run(svc.stopping)


def main() -> None:
    run_service("recommender", Settings, run, [router])


if __name__ == "__main__":
    main()
