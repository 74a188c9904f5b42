"""Resource vectors and resource names.

CPU is carried as integer milli-cores and memory as integer bytes everywhere inside the
system; conversion from and to Kubernetes quantity strings happens at the edges
(`koordcommon.quantity`).
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from pydantic_core import core_schema

CPU = "cpu"
MEMORY = "memory"

# Koordinator's batch/mid tiers. The seed names them under `koordinator.sh/`; current
# Koordinator releases use `kubernetes.io/`. Both are accepted on input; the published
# prefix is a setting so existing Koordinator users can switch.
KOORD_PREFIX = "koordinator.sh/"
KUBERNETES_PREFIX = "kubernetes.io/"
ACCEPTED_PREFIXES = (KOORD_PREFIX, KUBERNETES_PREFIX)
BATCH_CPU_SUFFIX = "batch-cpu"
BATCH_MEMORY_SUFFIX = "batch-memory"
MID_CPU_SUFFIX = "mid-cpu"
MID_MEMORY_SUFFIX = "mid-memory"
TIER_SUFFIXES = (BATCH_CPU_SUFFIX, BATCH_MEMORY_SUFFIX, MID_CPU_SUFFIX, MID_MEMORY_SUFFIX)


def published_prefix() -> str:
    """The prefix under which this installation publishes batch/mid resources."""
    prefix = os.environ.get("KOORD_RESOURCE_PREFIX", KOORD_PREFIX)
    return prefix if prefix.endswith("/") else prefix + "/"


def batch_cpu(prefix: str | None = None) -> str:
    return (prefix or published_prefix()) + BATCH_CPU_SUFFIX


def batch_memory(prefix: str | None = None) -> str:
    return (prefix or published_prefix()) + BATCH_MEMORY_SUFFIX


def mid_cpu(prefix: str | None = None) -> str:
    return (prefix or published_prefix()) + MID_CPU_SUFFIX


def mid_memory(prefix: str | None = None) -> str:
    return (prefix or published_prefix()) + MID_MEMORY_SUFFIX


def tier_suffix(name: str) -> str | None:
    """`batch-cpu` for `koordinator.sh/batch-cpu` or `kubernetes.io/batch-cpu`, else None."""
    for prefix in ACCEPTED_PREFIXES:
        if name.startswith(prefix):
            suffix = name[len(prefix):]
            if suffix in TIER_SUFFIXES:
                return suffix
    return None


def is_milli_resource(name: str) -> bool:
    """True when the integer internal value of `name` is in milli-cores.

    Native `cpu` is parsed to milli-cores; the batch/mid cpu tiers already hold integer
    milli-cores as their Kubernetes value.
    """
    return name == CPU


class Resources(msgspec.Struct, frozen=True, gc=False):
    """A (cpu, memory) vector: integer milli-cores and integer bytes.

    A msgspec Struct without GC tracking: a metric message holds hundreds of these, and
    tracked objects made the garbage collector the largest cost of decoding a batch.
    """

    cpu_milli: int = 0
    memory_bytes: int = 0

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        """Pydantic messages validate it from {"cpu_milli", "memory_bytes"} and write it back so."""
        from_dict = core_schema.no_info_after_validator_function(
            lambda d: cls(d.get("cpu_milli", 0), d.get("memory_bytes", 0)),
            core_schema.typed_dict_schema(
                {
                    "cpu_milli": core_schema.typed_dict_field(core_schema.int_schema(), required=False),
                    "memory_bytes": core_schema.typed_dict_field(core_schema.int_schema(), required=False),
                }
            ),
        )
        return core_schema.json_or_python_schema(
            json_schema=from_dict,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_dict]),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda r: {"cpu_milli": r.cpu_milli, "memory_bytes": r.memory_bytes}
            ),
        )

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes)

    def __neg__(self) -> Resources:
        return Resources(-self.cpu_milli, -self.memory_bytes)

    def scale_percent(self, cpu_percent: float, memory_percent: float | None = None) -> Resources:
        """Each component x percent / 100, truncated toward zero (Koordinator's integer maths)."""
        mem_pct = cpu_percent if memory_percent is None else memory_percent
        return Resources(int(self.cpu_milli * cpu_percent / 100), int(self.memory_bytes * mem_pct / 100))

    def max(self, other: Resources) -> Resources:
        return Resources(max(self.cpu_milli, other.cpu_milli), max(self.memory_bytes, other.memory_bytes))

    def min(self, other: Resources) -> Resources:
        return Resources(min(self.cpu_milli, other.cpu_milli), min(self.memory_bytes, other.memory_bytes))

    def clamp0(self) -> Resources:
        return Resources(max(self.cpu_milli, 0), max(self.memory_bytes, 0))

    def is_zero(self) -> bool:
        return self.cpu_milli == 0 and self.memory_bytes == 0

    def fits_in(self, other: Resources) -> bool:
        return self.cpu_milli <= other.cpu_milli and self.memory_bytes <= other.memory_bytes

    @classmethod
    def from_list(cls, resources: dict[str, int]) -> Resources:
        """From an integer resource list (see `koordcommon.quantity.parse_resource_list`)."""
        return cls(int(resources.get(CPU, 0)), int(resources.get(MEMORY, 0)))

    def to_list(self) -> dict[str, int]:
        return {CPU: self.cpu_milli, MEMORY: self.memory_bytes}


ZERO = Resources()


def tier_of(resource_list: dict[str, int], cpu_suffix: str, memory_suffix: str) -> Resources:
    """One tier's cpu (milli-cores) and memory of an integer resource list, under either prefix."""
    cpu = mem = 0
    for name, value in resource_list.items():
        suffix = tier_suffix(name)
        if suffix == cpu_suffix:
            cpu += value
        elif suffix == memory_suffix:
            mem += value
    return Resources(cpu, mem)


def batch_of(resource_list: dict[str, int]) -> Resources:
    """batch-cpu (milli-cores) and batch-memory of an integer resource list, under either prefix."""
    return tier_of(resource_list, BATCH_CPU_SUFFIX, BATCH_MEMORY_SUFFIX)


def mid_of(resource_list: dict[str, int]) -> Resources:
    """mid-cpu (milli-cores) and mid-memory of an integer resource list, under either prefix."""
    return tier_of(resource_list, MID_CPU_SUFFIX, MID_MEMORY_SUFFIX)


def sum_resources(items) -> Resources:
    cpu = mem = 0
    for r in items:
        cpu += r.cpu_milli
        mem += r.memory_bytes
    return Resources(cpu, mem)
