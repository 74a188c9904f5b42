"""Entry point: `koord-descheduler` / `python -m descheduler`."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import yaml
from koordcommon import subjects
from koordcommon.service import Service, ServiceSettings, run_service, run_until_stopped, settings_config
from koordcommon.wiring import start_bus, start_cluster
from pydantic import Field

from .api import router
from .core.config import LoadedConfig, parse_config
from .loop import Descheduler

PREFIX = "KOORD_DESCHEDULER_"


class Settings(ServiceSettings):
    """The service's settings. A key of the YAML file or a KOORD_DESCHEDULER_* variable that
    names no setting is an error naming it (KOORD_DESCHEDULER_CONFIG_FILE names the file)."""

    model_config = settings_config(PREFIX)
    http_port: int = 8084
    interval_s: float = Field(60.0, gt=0, description="seconds between rounds")
    dry_run: bool = False
    args_file: str = Field("", description="YAML/JSON file with LowNodeLoadArgs (Koordinator field names)")
    extender_url: str = Field("", description="sim backend: the scheduler extender (urlPrefix) reservations go through")
    extender_weight: int = Field(1, ge=1, description="sim backend: the extender's weight in reservation placement")
    schedule_reservations: bool = Field(
        True,
        description="sim backend: the simulated cluster places ReservationFirst reservations (it has no "
        "koord-scheduler); ignored with kubernetes, where koord-scheduler places them",
    )
    job_poll_s: float = Field(1.0, gt=0, description="seconds between steps of migrations in flight")


def cluster_options(settings: Settings) -> dict:
    """The backend's options: the simulated cluster stands in for koord-scheduler and places the
    Reservations this descheduler creates, through the extender as kube-scheduler sends pods."""
    if settings.cluster_backend != "sim" or not settings.schedule_reservations:
        return {}
    return {"schedule_reservations": True, "extender_url": settings.extender_url,
            "extender_weight": settings.extender_weight}


def load_config(path: str) -> LoadedConfig:
    """The args file: LowNodeLoadArgs or a DeschedulerConfiguration (see core.config)."""
    if not path:
        return parse_config({})
    try:
        return parse_config(yaml.safe_load(Path(path).read_text()))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def round_interval(settings: Settings, loaded: LoadedConfig) -> float:
    """interval_s, or the configuration's deschedulingInterval; both set and different is an error."""
    if loaded.interval_s is None:
        return settings.interval_s
    if "interval_s" in settings.model_fields_set and settings.interval_s != loaded.interval_s:
        raise ValueError(f"interval_s ({settings.interval_s:g}) and the args file's deschedulingInterval "
                         f"({loaded.interval_s:g} s) disagree: set one")
    return loaded.interval_s


async def run(svc: Service) -> None:
    settings: Settings = svc.settings  # type: ignore[assignment]
    loaded = load_config(settings.args_file)
    for warning in loaded.warnings:
        svc.log.warning(warning)
    interval_s = round_interval(settings, loaded)
    args = loaded.args
    args.run_every(interval_s)
    bus = await start_bus(svc)
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM, subjects.EVENTS_STREAM)
    cluster = await start_cluster(svc, bus, **cluster_options(settings))
    desched = Descheduler(args, cluster, bus, dry_run=settings.dry_run or args.dryRun)
    svc.app.state.descheduler = desched
    if not desched.dry_run:
        await desched.clean_orphans()
    svc.mark_started()

    async def descheduling_round() -> None:
        svc.app.state.last_report = await desched.run_round()

    await run_until_stopped(
        svc.stopping,
        desched.follow_metrics(),
        _repeat(svc, interval_s, descheduling_round, "descheduling round"),
        _repeat(svc, settings.job_poll_s, desched.advance, "advancing migrations"),
    )


async def _repeat(svc: Service, every_s: float, step, what: str) -> None:
    """`step()`, then a pause of `every_s` seconds, until the service stops; a failed step is
    logged and the loop goes on."""
    while not svc.stopping.is_set():
        try:
            await step()
        except Exception:
            svc.log.exception(f"{what} failed")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(svc.stopping.wait(), every_s)


def main() -> None:
    run_service("descheduler", Settings, run, [router])


if __name__ == "__main__":
    main()
