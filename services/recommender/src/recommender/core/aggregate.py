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
from array import array
from dataclasses import dataclass
from typing import Any

from .histogram import CPU_SCHEME, MEMORY_SCHEME, MIN_SAMPLE_WEIGHT, DecayingHistogram
from .profile import CPU, MEMORY, UsageProfile

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
    """VPA's ContainerState: what one pod's container contributed, for dedupe and memory peaks.

    AggregateState keeps these packed; this is the readable copy `AggregateState.pods` gives.
    """

    last_cpu_ts: float = -math.inf
    last_memory_ts: float = -math.inf
    window_end: float = -math.inf  # end of the current memory aggregation window
    memory_peak: float = 0.0  # peak in the current window, as added to the histogram
    oom_peak: float = 0.0  # memory needed after the last OOM in this window (already in the histogram)
    last_oom_ts: float = -math.inf  # an OOM reported again (every sample repeats it) counts once


# AggregateState._v: the container's numbers, then per pod its PodContainerState fields.
_FIRST, _LAST, _SAMPLES, _CPU_REQ, _MEM_REQ = range(5)  # first and last sample time: +/-inf before one
_PODS_AT = 5  # index of the first pod's first field
_NEW_STATE = array("d", [math.inf, -math.inf, 0.0, 0.0, 0.0])
_CPU_TS, _MEM_TS, _WINDOW_END, _PEAK, _OOM_PEAK, _OOM_TS = range(6)  # from a pod's first field
_FIELDS = 6
_NEW_POD = array("d", [-math.inf, -math.inf, -math.inf, 0.0, 0.0, -math.inf])
_KEY = 8  # pod_key digest size
_DEFAULT_CONFIG = AggregationConfig()


class OOMDiscarded(ValueError):
    pass


class _Number:
    """An AggregateState attribute kept in its float64 buffer `_v`; `unset` stands for None."""

    def __init__(self, index: int, unset: float | None = None, kind: type = float) -> None:
        self.index, self.unset, self.kind = index, unset, kind

    def __get__(self, st: AggregateState | None, owner: type) -> Any:
        if st is None:
            return self
        x = st._v[self.index]
        return None if x == self.unset else self.kind(x)

    def __set__(self, st: AggregateState, value: float | None) -> None:
        st._v[self.index] = self.unset if value is None else value


class AggregateState:
    """One workload container.

    Its numbers and its pods are two flat buffers rather than attributes and a dict of objects
    (a few hundred bytes less per container): `_keys` holds the 8-byte pod keys back to back,
    `_v` the sample times, count and requests, then _FIELDS float64 values per pod in the
    order of `_keys`; pods stay in first-seen order.
    """

    __slots__ = ("_keys", "_v", "config", "cpu", "memory", "profile")

    def __init__(self, config: AggregationConfig | None = None) -> None:
        self.config = config or _DEFAULT_CONFIG
        self.cpu = DecayingHistogram(CPU_SCHEME, self.config.cpu_half_life_s)
        self.memory = DecayingHistogram(MEMORY_SCHEME, self.config.memory_half_life_s)
        self.profile = UsageProfile()
        self._keys = b""
        self._v = array("d", _NEW_STATE)

    first_sample_ts = _Number(_FIRST, unset=math.inf)
    last_sample_ts = _Number(_LAST, unset=-math.inf)
    total_samples = _Number(_SAMPLES, kind=int)
    cpu_request_cores = _Number(_CPU_REQ)  # of the latest CPU sample
    memory_request_bytes = _Number(_MEM_REQ)  # of the latest memory sample

    # ------------------------------------------------------------------ pods

    def _pod(self, key: bytes) -> int:
        """Index in _v of the pod's first field; a new pod is appended."""
        if len(key) != _KEY:
            raise ValueError(f"pod key must be {_KEY} bytes (see pod_key)")
        keys = self._keys
        i = keys.find(key)
        while i > 0 and i % _KEY:  # a match straddling two keys
            i = keys.find(key, i + 1)
        if i >= 0:
            return _PODS_AT + i // _KEY * _FIELDS
        # rebuilt rather than grown in place, which would over-allocate
        self._keys = keys + key
        self._v = self._v + _NEW_POD
        return _PODS_AT + len(keys) // _KEY * _FIELDS

    def _pod_fields(self) -> range:
        """Index in _v of each pod's first field."""
        return range(_PODS_AT, len(self._v), _FIELDS)

    @property
    def pods(self) -> dict[bytes, PodContainerState]:
        """A copy of the per-pod state, by pod key."""
        v = self._v
        return {
            self._keys[i : i + _KEY]: PodContainerState(*v[j : j + _FIELDS])
            for i, j in zip(range(0, len(self._keys), _KEY), self._pod_fields())
        }

    def pod_count(self) -> int:
        return len(self._keys) // _KEY

    def pods_seen_since(self, t: float) -> int:
        """Pods with a CPU or memory sample at or after t."""
        v = self._v
        return sum(1 for j in self._pod_fields() if max(v[j + _CPU_TS], v[j + _MEM_TS]) >= t)

    # ------------------------------------------------------------------ samples

    def add_cpu_sample(self, pod: bytes, t: float, usage_cores: float, request_cores: float) -> bool:
        """False when discarded: negative usage, or not after this pod's last CPU sample
        (out of order or a redelivery already counted)."""
        j = self._pod(pod)
        v = self._v
        if usage_cores < 0 or t <= v[j + _CPU_TS]:
            return False
        # VPA: raising the request makes history decay faster relative to new samples. The
        # max(request, minimum weight) is spelled out: it runs for every sample.
        weight = MIN_SAMPLE_WEIGHT if MIN_SAMPLE_WEIGHT > request_cores else request_cores  # noqa: FURB136
        self.cpu.add_sample(usage_cores, weight, t)
        v[j + _CPU_TS] = t
        v[_CPU_REQ] = request_cores
        if t < v[_FIRST]:  # noqa: PLR1730 (per sample: a comparison costs a fifth of min())
            v[_FIRST] = t
        if t > v[_LAST]:  # noqa: PLR1730
            v[_LAST] = t
        v[_SAMPLES] += 1
        self.profile.add_sample(CPU, t, usage_cores)
        return True

    def add_memory_sample(self, pod: bytes, t: float, usage_bytes: float, request_bytes: float = 0.0) -> bool:
        j = self._pod(pod)
        if usage_bytes < 0 or t <= self._v[j + _MEM_TS]:
            return False
        self._v[_MEM_REQ] = request_bytes
        self.profile.add_sample(MEMORY, t, usage_bytes)
        self._add_memory(j, t, usage_bytes, oom=False)
        return True

    def _add_memory(self, j: int, t: float, usage: float, oom: bool) -> None:
        """VPA addMemorySample: one peak per window per pod container, stamped at the window end."""
        v = self._v
        if t > v[j + _MEM_TS]:  # noqa: PLR1730 (per sample: cheaper than max())
            v[j + _MEM_TS] = t
        interval = self.config.memory_aggregation_interval_s
        window_end = v[j + _WINDOW_END]
        if window_end == -math.inf:
            window_end = t
        add_new_peak = False
        if t < window_end:
            old_max = max(v[j + _PEAK], v[j + _OOM_PEAK])
            if old_max != 0 and usage > old_max:
                self.memory.subtract_sample(old_max, 1.0, window_end)
                add_new_peak = True
        else:
            window_end += math.floor((t - window_end) / interval) * interval + interval
            v[j + _PEAK] = 0.0
            v[j + _OOM_PEAK] = 0.0
            add_new_peak = True
        v[j + _WINDOW_END] = window_end
        if add_new_peak:
            self.memory.add_sample(usage, 1.0, window_end)
            v[j + (_OOM_PEAK if oom else _PEAK)] = usage

    def record_oom(self, pod: bytes, t: float, requested_memory_bytes: float) -> float:
        """Add VPA's OOM bump: max(used + min bump, used x ratio) with used = max(request, peak).

        The OOM peak itself is left out of `used`, so repeated OOMs at the same request do not
        run away. Returns the memory the container needed; raises OOMDiscarded for an OOM older
        than the current aggregation window.
        """
        j = self._pod(pod)
        v = self._v
        window_end = v[j + _WINDOW_END]
        if window_end != -math.inf and t < window_end - self.config.memory_aggregation_interval_s:
            raise OOMDiscarded("OOM older than the current memory aggregation window")
        if t <= v[j + _OOM_TS]:
            raise OOMDiscarded("OOM already recorded")
        v[j + _OOM_TS] = t
        used = max(requested_memory_bytes, v[j + _PEAK])
        needed = max(used + self.config.oom_min_bump_up_bytes, float(int(used * self.config.oom_bump_up_ratio)))
        self._add_memory(j, t, needed, oom=True)
        return needed

    # ------------------------------------------------------------------ lifecycle

    def is_expired(self, now: float) -> bool:
        return self.last_sample_ts is not None and now - self.last_sample_ts >= self.config.memory_window_s

    def prune_pods(self, now: float) -> None:
        """Forget pods silent for longer than one memory aggregation interval."""
        horizon = now - self.config.memory_aggregation_interval_s
        v = self._v
        keep = [i for i, j in enumerate(self._pod_fields()) if max(v[j + _CPU_TS], v[j + _MEM_TS]) >= horizon]
        if len(keep) < self.pod_count():
            self._keys = b"".join(self._keys[i * _KEY : (i + 1) * _KEY] for i in keep)
            fields = [x for i in keep for x in v[_PODS_AT + i * _FIELDS : _PODS_AT + (i + 1) * _FIELDS]]
            self._v = array("d", v[:_PODS_AT].tolist() + fields)

    # ------------------------------------------------------------------ checkpoint

    _HEADER = struct.Struct("<BddIffH")  # version, first ts, last ts, samples, cpu req, mem req, pods
    _POD = struct.Struct("<8sdddddd")  # key, last cpu/mem/oom ts, window end, peak, oom peak
    VERSION = 1

    def save(self) -> bytes:
        nan = math.nan
        first, last = self.first_sample_ts, self.last_sample_ts
        head = self._HEADER.pack(
            self.VERSION,
            nan if first is None else first,
            nan if last is None else last,
            self.total_samples,
            self.cpu_request_cores,
            self.memory_request_bytes,
            self.pod_count(),
        )
        v = self._v
        pods = b"".join(
            self._POD.pack(
                self._keys[i * _KEY : (i + 1) * _KEY],
                *(_fin(v[j + f]) for f in (_CPU_TS, _MEM_TS, _OOM_TS, _WINDOW_END)),
                v[j + _PEAK],
                v[j + _OOM_PEAK],
            )
            for i, j in enumerate(self._pod_fields())
        )
        return head + pods + self.cpu.save() + self.memory.save() + self.profile.save()

    @classmethod
    def load(cls, data: bytes, config: AggregationConfig | None = None) -> AggregateState:
        st = cls(config)
        version, first, last, samples, cpu_req, mem_req, npods = cls._HEADER.unpack_from(data, 0)
        if version != cls.VERSION:
            raise ValueError(f"unsupported checkpoint version {version}")
        off = cls._HEADER.size
        keys, fields = [], []
        for _ in range(npods):
            k, lc, lm, lo, we, peak, oom = cls._POD.unpack_from(data, off)
            off += cls._POD.size
            if k in keys:
                raise ValueError("checkpoint holds a pod twice")
            keys.append(k)
            fields += [_inf(lc), _inf(lm), _inf(we), peak, oom, _inf(lo)]
        head = [math.inf if math.isnan(first) else first, -math.inf if math.isnan(last) else last]
        st._keys, st._v = b"".join(keys), array("d", head + [samples, cpu_req, mem_req] + fields)
        st.cpu, n = DecayingHistogram.load(data[off:], CPU_SCHEME, st.config.cpu_half_life_s)
        off += n
        st.memory, n = DecayingHistogram.load(data[off:], MEMORY_SCHEME, st.config.memory_half_life_s)
        off += n
        st.profile = UsageProfile.load(data[off:])
        return st


def _fin(x: float) -> float:
    return math.nan if x == -math.inf else x


def _inf(x: float) -> float:
    return -math.inf if math.isnan(x) else x
