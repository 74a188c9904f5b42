"""The one interface every recommender method sits behind: samples in, request and limit out,
state checkpointable.

A method is a stateless object holding its settings; everything it learns lives in a state
object the caller owns (one per workload container), so one method instance serves every
container, and the state can be saved to bytes and loaded back with the same recommendations.

Methods that treat CPU and memory alike apart from their settings are built from two
`ResourceModel`s (one per resource) by `PerResource`.

`explain` says what the last recommendation was made of (the settings and the figures behind
it), read off the state without changing it: what the service's API shows beside the target.
"""

from __future__ import annotations

import math
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

S = TypeVar("S")

NO_POD = b"\0" * 8  # the pod key of a source that reports one series per container


@dataclass(frozen=True, slots=True)
class Sample:
    """One usage sample of a workload container: CPU in cores, memory in bytes (None: not
    reported); `pod` is the 8-byte key of the pod it came from (`aggregate.pod_key`)."""

    t: float
    cpu_cores: float | None = None
    memory_bytes: float | None = None
    cpu_request_cores: float = 0.0
    memory_request_bytes: float = 0.0
    pod: bytes = NO_POD


@dataclass(frozen=True, slots=True)
class Amounts:
    cpu_cores: float
    memory_bytes: float


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What the container should request and the limit it should run under."""

    request: Amounts
    limit: Amounts


class Recommender(ABC, Generic[S]):
    name: ClassVar[str]

    @abstractmethod
    def new_state(self) -> S: ...

    @abstractmethod
    def add(self, state: S, sample: Sample) -> None: ...

    @abstractmethod
    def recommend(self, state: S, t: float) -> Recommendation:
        """The recommendation at time t from the samples added so far (windows that ended by t
        are closed first, so a state may change)."""

    @abstractmethod
    def save(self, state: S) -> bytes: ...

    @abstractmethod
    def load(self, data: bytes) -> S: ...

    @abstractmethod
    def explain(self, state: S) -> dict[str, Any]:
        """The settings and figures behind the last recommendation (JSON values)."""


class ResourceModel(ABC, Generic[S]):
    """One resource's half of a method: values in, (request, limit) out."""

    @abstractmethod
    def new_state(self) -> S: ...

    @abstractmethod
    def add(self, state: S, t: float, value: float) -> None: ...

    @abstractmethod
    def value(self, state: S, t: float) -> tuple[float, float]:
        """(request, limit) at time t."""

    @abstractmethod
    def save(self, state: S) -> bytes: ...

    @abstractmethod
    def load(self, data: bytes) -> tuple[S, int]:
        """The state and the number of bytes it took."""

    @abstractmethod
    def explain(self, state: S) -> dict[str, Any]:
        """The settings and figures behind the last value (in the resource's units: cores, bytes)."""


@dataclass(slots=True)
class PairState:
    cpu: Any
    memory: Any


class PerResource(Recommender[PairState]):
    """A method made of one ResourceModel for CPU and one for memory."""

    _LEN = struct.Struct("<I")

    def __init__(self, cpu: ResourceModel, memory: ResourceModel) -> None:
        self.cpu = cpu
        self.memory = memory

    def new_state(self) -> PairState:
        return PairState(self.cpu.new_state(), self.memory.new_state())

    def add(self, state: PairState, sample: Sample) -> None:
        if sample.cpu_cores is not None and sample.cpu_cores >= 0:
            self.cpu.add(state.cpu, sample.t, sample.cpu_cores)
        if sample.memory_bytes is not None and sample.memory_bytes >= 0:
            self.memory.add(state.memory, sample.t, sample.memory_bytes)

    def recommend(self, state: PairState, t: float) -> Recommendation:
        c_req, c_lim = self.cpu.value(state.cpu, t)
        m_req, m_lim = self.memory.value(state.memory, t)
        return Recommendation(Amounts(c_req, m_req), Amounts(c_lim, m_lim))

    def save(self, state: PairState) -> bytes:
        cpu = self.cpu.save(state.cpu)
        return self._LEN.pack(len(cpu)) + cpu + self.memory.save(state.memory)

    def load(self, data: bytes) -> PairState:
        (n,) = self._LEN.unpack_from(data, 0)
        off = self._LEN.size
        cpu, used = self.cpu.load(data[off : off + n])
        if used != n:
            raise ValueError("checkpoint: the CPU state does not end where its length says")
        memory, _ = self.memory.load(data[off + n :])
        return PairState(cpu, memory)

    def explain(self, state: PairState) -> dict[str, Any]:
        return {"cpu": self.cpu.explain(state.cpu), "memory": self.memory.explain(state.memory)}


def finite(x: float, digits: int = 6) -> float | None:
    """A figure for an explanation: rounded, None where it is not a number (no limit yet)."""
    return round(float(x), digits) if math.isfinite(x) else None
