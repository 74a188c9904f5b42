"""Per workload-container state: VPA's AggregateContainerState plus per-pod memory windows.

CPU usage samples go into a decaying histogram weighted by max(request cores, 0.1); memory is
reduced to one peak per aggregation interval per pod container (stamped at the window end),
and OOM kills add an artificial bumped peak (model/container.go, aggregate_container_state.go).
Times are epoch seconds (float); CPU in cores, memory in bytes.
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field

from .histogram import CPU_SCHEME, MEMORY_SCHEME, MIN_SAMPLE_WEIGHT, DecayingHistogram
from .profile import UsageProfile

MIB = 1024 * 1024


@dataclass(frozen=True)
class AggregationConfig:
    cpu_half_life_s: float = 24 * 3600.0
    memory_half_life_s: float = 24 * 3600.0
    memory_aggregation_interval_s: float = 24 * 3600.0
    memory_aggregation_interval_count: int = 8
    oom_bump_up_ratio: float = 1.2
    oom_min_bump_up_bytes: float = 100 * MIB

    @property
    def memory_window_s(self) -> float:
        """An aggregate with no sample for this long is expired (VPA: 8 x 24 h)."""
        return self.memory_aggregation_interval_s * self.memory_aggregation_interval_count


def pod_key(uid: str) -> bytes:
    """8-byte digest of a pod uid: enough to tell a workload's pods apart, compact to checkpoint."""
    return hashlib.blake2b(uid.encode(), digest_size=8).digest()


@dataclass(slots=True)
class PodContainerState:
    """VPA's ContainerState: what one pod's container contributed, for dedupe and memory peaks."""

    last_cpu_ts: float = -math.inf
    last_memory_ts: float = -math.inf
    window_end: float = -math.inf  # end of the current memory aggregation window
    memory_peak: float = 0.0  # peak in the current window, as added to the histogram
    oom_peak: float = 0.0  # memory needed after the last OOM in this window (already in the histogram)
    last_oom_ts: float = -math.inf  # an OOM reported again (every sample repeats it) counts once


class OOMDiscarded(ValueError):
    pass


@dataclass
class AggregateState:
    config: AggregationConfig = field(default_factory=AggregationConfig)
    cpu: DecayingHistogram = None  # type: ignore[assignment]
    memory: DecayingHistogram = None  # type: ignore[assignment]
    first_sample_ts: float | None = None
    last_sample_ts: float | None = None
    total_samples: int = 0
    pods: dict[bytes, PodContainerState] = field(default_factory=dict)
    profile: UsageProfile = field(default_factory=UsageProfile)
    cpu_request_cores: float = 0.0
    memory_request_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.cpu is None:
            self.cpu = DecayingHistogram(CPU_SCHEME, self.config.cpu_half_life_s)
        if self.memory is None:
            self.memory = DecayingHistogram(MEMORY_SCHEME, self.config.memory_half_life_s)

    def _pod(self, key: bytes) -> PodContainerState:
        st = self.pods.get(key)
        if st is None:
            st = self.pods[key] = PodContainerState()
        return st

    # ------------------------------------------------------------------ samples

    def add_cpu_sample(self, pod: bytes, t: float, usage_cores: float, request_cores: float) -> bool:
        """False when discarded: negative usage, or not after this pod's last CPU sample
        (out of order or a redelivery already counted)."""
        st = self._pod(pod)
        if usage_cores < 0 or t <= st.last_cpu_ts:
            return False
        # VPA: raising the request makes history decay faster relative to new samples.
        self.cpu.add_sample(usage_cores, max(request_cores, MIN_SAMPLE_WEIGHT), t)
        st.last_cpu_ts = t
        self.cpu_request_cores = request_cores
        if self.first_sample_ts is None or t < self.first_sample_ts:
            self.first_sample_ts = t
        if self.last_sample_ts is None or t > self.last_sample_ts:
            self.last_sample_ts = t
        self.total_samples += 1
        self.profile.add(t, usage_cores, None)
        return True

    def add_memory_sample(self, pod: bytes, t: float, usage_bytes: float, request_bytes: float = 0.0) -> bool:
        st = self._pod(pod)
        if usage_bytes < 0 or t <= st.last_memory_ts:
            return False
        self.memory_request_bytes = request_bytes
        self.profile.add(t, None, usage_bytes)
        self._add_memory(st, t, usage_bytes, oom=False)
        return True

    def _add_memory(self, st: PodContainerState, t: float, usage: float, oom: bool) -> None:
        """VPA addMemorySample: one peak per window per pod container, stamped at the window end."""
        st.last_memory_ts = max(st.last_memory_ts, t)
        interval = self.config.memory_aggregation_interval_s
        if st.window_end == -math.inf:
            st.window_end = t
        add_new_peak = False
        if t < st.window_end:
            old_max = max(st.memory_peak, st.oom_peak)
            if old_max != 0 and usage > old_max:
                self.memory.subtract_sample(old_max, 1.0, st.window_end)
                add_new_peak = True
        else:
            st.window_end += math.floor((t - st.window_end) / interval) * interval + interval
            st.memory_peak = 0.0
            st.oom_peak = 0.0
            add_new_peak = True
        if add_new_peak:
            self.memory.add_sample(usage, 1.0, st.window_end)
            if oom:
                st.oom_peak = usage
            else:
                st.memory_peak = usage

    def record_oom(self, pod: bytes, t: float, requested_memory_bytes: float) -> float:
        """Add VPA's OOM bump: max(used + min bump, used x ratio) with used = max(request, peak).

        The OOM peak itself is left out of `used`, so repeated OOMs at the same request do not
        run away. Returns the memory the container needed; raises OOMDiscarded for an OOM older
        than the current aggregation window.
        """
        st = self._pod(pod)
        if st.window_end != -math.inf and t < st.window_end - self.config.memory_aggregation_interval_s:
            raise OOMDiscarded("OOM older than the current memory aggregation window")
        if t <= st.last_oom_ts:
            raise OOMDiscarded("OOM already recorded")
        st.last_oom_ts = t
        used = max(requested_memory_bytes, st.memory_peak)
        needed = max(used + self.config.oom_min_bump_up_bytes, float(int(used * self.config.oom_bump_up_ratio)))
        self._add_memory(st, t, needed, oom=True)
        return needed

    # ------------------------------------------------------------------ lifecycle

    def is_expired(self, now: float) -> bool:
        return self.last_sample_ts is not None and now - self.last_sample_ts >= self.config.memory_window_s

    def prune_pods(self, now: float) -> None:
        """Forget pods silent for longer than one memory aggregation interval."""
        horizon = now - self.config.memory_aggregation_interval_s
        for key in [k for k, st in self.pods.items() if max(st.last_cpu_ts, st.last_memory_ts) < horizon]:
            del self.pods[key]

    # ------------------------------------------------------------------ checkpoint

    _HEAD = struct.Struct("<BddIffH")  # version, first ts, last ts, samples, cpu req, mem req, pods
    _POD = struct.Struct("<8sdddddd")  # key, last cpu/mem/oom ts, window end, peak, oom peak
    VERSION = 1

    def save(self) -> bytes:
        nan = math.nan
        head = self._HEAD.pack(
            self.VERSION,
            nan if self.first_sample_ts is None else self.first_sample_ts,
            nan if self.last_sample_ts is None else self.last_sample_ts,
            self.total_samples,
            self.cpu_request_cores,
            self.memory_request_bytes,
            len(self.pods),
        )
        pods = b"".join(
            self._POD.pack(
                k, _fin(s.last_cpu_ts), _fin(s.last_memory_ts), _fin(s.last_oom_ts), _fin(s.window_end), s.memory_peak, s.oom_peak
            )
            for k, s in self.pods.items()
        )
        return head + pods + self.cpu.save() + self.memory.save() + self.profile.save()

    @classmethod
    def load(cls, data: bytes, config: AggregationConfig | None = None) -> AggregateState:
        config = config or AggregationConfig()
        version, first, last, samples, cpu_req, mem_req, npods = cls._HEAD.unpack_from(data, 0)
        if version != cls.VERSION:
            raise ValueError(f"unsupported checkpoint version {version}")
        off = cls._HEAD.size
        pods: dict[bytes, PodContainerState] = {}
        for _ in range(npods):
            k, lc, lm, lo, we, peak, oom = cls._POD.unpack_from(data, off)
            off += cls._POD.size
            pods[k] = PodContainerState(_inf(lc), _inf(lm), _inf(we), peak, oom, _inf(lo))
        cpu, n = DecayingHistogram.load(data[off:], CPU_SCHEME, config.cpu_half_life_s)
        off += n
        mem, n = DecayingHistogram.load(data[off:], MEMORY_SCHEME, config.memory_half_life_s)
        off += n
        profile = UsageProfile.load(data[off:])
        return cls(
            config=config,
            cpu=cpu,
            memory=mem,
            first_sample_ts=None if math.isnan(first) else first,
            last_sample_ts=None if math.isnan(last) else last,
            total_samples=samples,
            pods=pods,
            profile=profile,
            cpu_request_cores=cpu_req,
            memory_request_bytes=mem_req,
        )


def _fin(x: float) -> float:
    return math.nan if x == -math.inf else x


def _inf(x: float) -> float:
    return -math.inf if math.isnan(x) else x
