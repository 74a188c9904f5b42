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
from .core.config import LowNodeLoadArgs
from .loop import Descheduler


class Settings(ServiceSettings):
    model_config = settings_config("KOORD_DESCHEDULER_")
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


def load_args(path: str) -> LowNodeLoadArgs:
    if not path:
        return LowNodeLoadArgs()
    return LowNodeLoadArgs.model_validate(yaml.safe_load(Path(path).read_text()) or {})


async def run(svc: Service) -> None:
    settings: Settings = svc.settings  # type: ignore[assignment]
    args = load_args(settings.args_file)
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
        _repeat(svc, settings.interval_s, descheduling_round, "descheduling round"),
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
