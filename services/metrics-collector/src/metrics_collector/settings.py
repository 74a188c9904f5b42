"""Settings of the collector: env prefix KOORD_COLLECTOR_, optional YAML (KOORD_COLLECTOR_CONFIG_FILE)."""

from __future__ import annotations

from koordcommon.service import ServiceSettings, settings_config
from pydantic import Field

from .core.retention import RetentionPolicy
from .core.series import HOUR_MS

SERVICE = "metrics-collector"


class Settings(ServiceSettings):
    model_config = settings_config("KOORD_COLLECTOR_")

    http_port: int = Field(8081, ge=0, le=65535)
    # A batch is written (and acknowledged) when this many messages arrived or the flush
    # interval passed, whichever comes first; one node sample is 1 + pods + containers rows.
    batch_size: int = Field(500, ge=1, le=10_000)
    flush_interval_s: float = Field(1.0, gt=0, le=60)
    # Pull subscriptions per stream in one process: while one batch waits for its commit the
    # next is fetched and decoded, so CPU and database work overlap.
    consumers_per_stream: int = Field(2, ge=1, le=16)
    # A batch delivered to a collector that died unacknowledged goes to another after this.
    ack_wait_s: float = Field(30, gt=0)
    # While the database fails, the batch in hand is retried with backoff up to this delay
    # and nothing new is pulled.
    write_retry_max_delay_s: float = Field(5.0, gt=0)
    raw_retention_hours: float = Field(24, gt=0)
    minute_retention_days: float = Field(7, gt=0)
    hour_retention_days: float = Field(90, gt=0)
    events_retention_days: float = Field(30, gt=0)
    rollup_lag_s: float = Field(300, ge=0)
    # PostgreSQL: the raw sample tables are partitioned by time, one partition this long, created
    # this many ahead; retention drops a partition once all its rows are past raw retention.
    raw_partition_hours: int = Field(1, ge=1, le=24)
    partitions_ahead: int = Field(3, ge=1, le=48)
    retention_interval_s: float = Field(60, gt=0)
    api_max_page: int = Field(1000, ge=1)
    # the dashboard: the recommender whose recommendations it shows, and how often the page reloads
    recommender_url: str = ""
    dashboard_refresh_s: float = Field(15.0, ge=2, le=3600)

    def retention(self) -> RetentionPolicy:
        return RetentionPolicy(
            raw_ms=int(self.raw_retention_hours * HOUR_MS),
            minute_ms=int(self.minute_retention_days * 24 * HOUR_MS),
            hour_ms=int(self.hour_retention_days * 24 * HOUR_MS),
            events_ms=int(self.events_retention_days * 24 * HOUR_MS),
            lag_ms=int(self.rollup_lag_s * 1000),
        )
