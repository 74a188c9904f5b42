"""Node agent settings: env prefix KOORD_AGENT_ (plus NATS_URL), optional YAML file."""

from __future__ import annotations

import re

from koordcommon.service import ServiceSettings, settings_config
from pydantic import Field, field_validator

_SHARD = re.compile(r"^(\d+)/(\d+)$")


class AgentSettings(ServiceSettings):
    model_config = settings_config("KOORD_AGENT_")

    http_port: int = Field(8086, ge=0, le=65535)
    mode: str = Field("sim", pattern="^(real|sim)$")
    node_name: str = Field("", description="real mode: this node (default: hostname / NODE_NAME)")
    # sim mode: which simulated nodes this process drives ("all" or a shard "i/n")
    nodes: str = "all"
    shard: str = ""
    collect_interval_s: float = Field(1.0, ge=1.0)  # koordlet disables collection below 1 s
    report_interval_s: float = Field(10.0, gt=0)
    nodemetric_interval_s: float = Field(60.0, gt=0)
    aggregate_window_s: int = Field(300, ge=60)
    aggregate_durations_s: list[int] = Field(default_factory=lambda: [300, 600, 1800])
    node_history_s: int = Field(1800, ge=60)
    pod_history_s: int = Field(1800, ge=10)
    sim_pod_history_s: int = Field(300, ge=10, description="per-pod history in sim mode (memory: many nodes)")
    pod_refresh_s: float = Field(5.0, gt=0, description="how often the pod list is re-read")
    max_catch_up_s: float = Field(120.0, gt=0, description="sim mode: a lag beyond this is skipped, not replayed")
    # real mode
    cgroup_root: str = "/sys/fs/cgroup"
    proc_root: str = "/proc"
    cgroup_driver: str = Field("auto", pattern="^(auto|cgroupfs|systemd)$")
    cgroup_version: str = Field("auto", pattern="^(auto|v1|v2)$")
    # the kubelet CPU manager's checkpoint: under its static policy the CPUs it pinned are never BE's
    kubelet_cpu_manager_state: str = "/var/lib/kubelet/cpu_manager_state"
    # node QoS manager (strategies are still off unless the NodeSLO enables them)
    qos_enabled: bool = True
    qos_dry_run: bool = False
    evict_rate_per_s: float = Field(1.0, gt=0)
    # CPU orchestration: the node's CPU topology and pools on the bus (the extender allocates from them)
    publish_topology: bool = True
    # real mode: the CRI proxy kubelet points at (its --container-runtime-endpoint); "" = no proxy.
    # The runtime hooks run on its calls before they reach the runtime at cri_runtime_endpoint.
    cri_proxy_socket: str = ""
    cri_runtime_endpoint: str = "/run/containerd/containerd.sock"
    runtime_hook_timeout_s: float = Field(1.0, gt=0, description="a hook slower than this is skipped (Ignore)")

    @field_validator("shard")
    @classmethod
    def _check_shard(cls, v: str) -> str:
        if not v:
            return v
        m = _SHARD.match(v)
        if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
            raise ValueError(f"shard {v!r} must be 'i/n' with 0 <= i < n")
        return v

    def shard_of(self) -> tuple[int, int]:
        spec = self.shard or (self.nodes if _SHARD.match(self.nodes) else "")
        if not spec:
            return 0, 1
        i, n = _SHARD.match(spec).groups()
        return int(i), int(n)
