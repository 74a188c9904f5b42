"""Entry point: `koord-descheduler` / `python -m descheduler`."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import yaml
from pydantic import Field

from koordcommon import subjects
from koordcommon.service import Service, ServiceSettings, load_settings, settings_config
from koordcommon.wiring import start_bus, start_cluster

from .api import router
from .core.config import LowNodeLoadArgs
from .loop import Descheduler


class Settings(ServiceSettings):
    model_config = settings_config("KOORD_DESCHEDULER_")
    http_port: int = 8084
    interval_s: float = Field(60.0, gt=0, description="seconds between rounds")
    dry_run: bool = False
    args_file: str = Field("", description="YAML/JSON file with LowNodeLoadArgs (Koordinator field names)")
    extender_url: str = ""


def load_args(path: str) -> LowNodeLoadArgs:
    if not path:
        return LowNodeLoadArgs()
    return LowNodeLoadArgs.model_validate(yaml.safe_load(Path(path).read_text()) or {})


async def run(svc: Service) -> None:
    settings: Settings = svc.settings  # type: ignore[assignment]
    args = load_args(settings.args_file)
    bus = await start_bus(svc)
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM, subjects.EVENTS_STREAM)
    cluster = await start_cluster(svc, bus)
    desched = Descheduler(args, cluster, bus, dry_run=settings.dry_run or args.dryRun)
    svc.app.state.descheduler = desched
    follow = asyncio.create_task(desched.follow_metrics())
    try:
        while not svc.stopping.is_set():
            try:
                report = await desched.run_round()
                svc.app.state.last_report = report
            except Exception:
                svc.log.exception("descheduling round failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(svc.stopping.wait(), settings.interval_s)
    finally:
        follow.cancel()
        with contextlib.suppress(BaseException):
            await follow


def main() -> None:
    settings = load_settings(Settings)
    svc = Service("descheduler", settings)
    svc.app.include_router(router)
    svc.run(run)


if __name__ == "__main__":
    main()
