"""slo-controller settings: env prefix KOORD_SLO_ (plus NATS_URL), optional YAML file."""

from __future__ import annotations

from koordcommon.service import ServiceSettings, settings_config
from pydantic import Field, field_validator


class SLOSettings(ServiceSettings):
    model_config = settings_config("KOORD_SLO_")

    http_port: int = Field(8082, ge=0, le=65535)
    # The slo-controller-config ConfigMap as a YAML/JSON file (the ConfigMap object or its data
    # map); empty = Koordinator's shipped config (colocation on, defaults elsewhere).
    config_map_file: str = ""
    config_poll_s: float = Field(5.0, gt=0)
    resync_s: float = Field(30.0, gt=0, description="recompute every node this often (degrade detection)")
    degrade_seconds: float | None = Field(
        None, gt=0, description="overrides degradeTimeMinutes (tests and fast simulations)"
    )
    resource_prefix: str = Field("", description="published batch/mid prefix; empty = KOORD_RESOURCE_PREFIX or koordinator.sh/")
    publish_nodeslo: bool = True
    metrics_catchup_s: float = Field(5.0, ge=0, description="wait this long for stored NodeMetrics before planning")
    # Replicas as one JetStream consumer group (NATS 2.10+): group_members replicas, this one
    # number group_member (0-based; a StatefulSet's pod index). Each node's NodeMetrics reach one
    # replica, in order (the server partitions the stream by node into group_partitions), and that
    # replica plans the node. 1: one replica plans every node.
    group_members: int = Field(1, ge=1, le=1024)
    group_member: int = Field(0, ge=0)
    group_partitions: int = Field(12, ge=1, le=1024, description="partitions of the group (at least its members)")
    # admission webhook
    webhook_enabled: bool = True
    profiles_file: str = Field("", description="YAML with ClusterColocationProfile/PriorityClass/Namespace objects")
    profiles_from_cluster: bool = True
    profiles_refresh_s: float = Field(30.0, gt=0)
    webhook_host: str = "0.0.0.0"
    webhook_port: int = Field(9443, ge=0, le=65535)
    tls_cert_file: str = Field("", description="serving certificate (PEM); with tls_key_file enables HTTPS")
    tls_key_file: str = ""

    def group(self) -> tuple[int, int] | None:
        """(member, members) of the consumer group, None for a single replica."""
        if self.group_members == 1:
            return None
        if not self.group_member < self.group_members <= self.group_partitions:
            raise ValueError(f"group_member {self.group_member} of group_members {self.group_members}: "
                             f"the member must be below the members, the members at most group_partitions "
                             f"({self.group_partitions})")  # fmt: skip
        return self.group_member, self.group_members

    @field_validator("resource_prefix")
    @classmethod
    def _prefix_ends_with_slash(cls, v: str) -> str:
        v = v.strip()
        return v if not v or v.endswith("/") else v + "/"
