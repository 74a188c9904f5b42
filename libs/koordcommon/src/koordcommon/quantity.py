"""Kubernetes `resource.Quantity`: exact parse and canonical print (apimachinery semantics).

Values are kept exactly as `Fraction`s; the rules are apimachinery's `ParseQuantity` and
`CanonicalizeBytes` (apimachinery pkg/api/resource/quantity.go):

* parse: optional sign, digits with an optional fraction, then a suffix (`Ki`..`Ei`, `n`..`E`,
  or `e<int>` / `E<int>`); non-zero magnitudes are rounded *up* to a multiple of 1n; BinarySI
  magnitudes are capped at 2^63-1 and BinarySI values in (0, 1) switch to DecimalSI.
* print: zero is `0`; BinarySI prints `<n><Ki..Ei>` when the value is an integer of magnitude
  >= 1024, otherwise falls back to DecimalSI; decimal formats write m x 10^x with the exponent
  rounded down to a multiple of 3.

Two deliberate differences from Go, both outside every value Kubernetes round-trips:
Go echoes some non-canonical inputs verbatim (`1E3`, `+1k`); we always print the canonical
form. Go prints decimal values >= 10^21 without any suffix (losing the exponent); we print
them with an `e<x>` exponent so the value survives.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from . import resources as rn


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


class Format(StrEnum):
    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


DecimalSI = Format.DECIMAL_SI
BinarySI = Format.BINARY_SI
DecimalExponent = Format.DECIMAL_EXPONENT

_DEC_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_BY_EXP = {v: k for k, v in _DEC_SUFFIXES.items()}
_BIN_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BIN_BY_POWER = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_NANO = Fraction(1, 10**9)
_MAX_BINARY = Fraction(2**63 - 1)
# Exponents beyond this are refused: Go would wrap them through int32 or print them
# without a suffix, and building 10^huge exactly would stall the process.
_MAX_EXPONENT = 10_000
_MAX_LENGTH = 1_000


def _scan(s: str) -> tuple[bool, str, str, str]:
    """Go's parseQuantityString: (positive, integer digits, fraction digits, suffix)."""
    positive = True
    pos, end = 0, len(s)
    if pos < end and s[0] in "+-":
        positive = s[0] == "+"
        pos += 1
    while pos < end and s[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    num = s[start:pos] or "0"
    denom = ""
    if pos < end and s[pos] == ".":
        pos += 1
        start = pos
        while pos < end and s[pos] in _DIGITS:
            pos += 1
        denom = s[start:pos]
    suffix_start = pos
    while pos < end and s[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(f"quantity {s!r}: unexpected character {s[pos]!r} at position {pos}")
    return positive, num, denom, s[suffix_start:]


def _interpret(suffix: str, s: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix."""
    if suffix in _DEC_SUFFIXES:
        return 10, _DEC_SUFFIXES[suffix], DecimalSI
    if suffix in _BIN_SUFFIXES:
        return 2, _BIN_SUFFIXES[suffix], BinarySI
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        digits = rest[1:] if rest[0] in "+-" else rest
        if digits and all(c in _DIGITS for c in digits):
            negative = rest[0] == "-"
            digits = digits.lstrip("0") or "0"
            if len(digits) > 9 or int(digits) > _MAX_EXPONENT:
                if not negative:
                    raise QuantityError(f"quantity {s!r}: exponent out of range")
                # Far below 1n: parse_quantity rounds any non-zero value up to 1n.
                return 10, -_MAX_EXPONENT, DecimalExponent
            return 10, -int(digits) if negative else int(digits), DecimalExponent
    raise QuantityError(f"quantity {s!r}: unknown suffix {suffix!r} (expected n u m k M G T P E, Ki..Ei or e<int>)")


def _round_up_nano(v: Fraction) -> Fraction:
    """Magnitude rounded up to a whole number of nano units (inf.RoundUp at scale 9)."""
    if v == 0:
        return v
    mag = abs(v)
    nanos = -((-mag.numerator * 10**9) // mag.denominator)
    out = Fraction(nanos, 10**9)
    return out if v > 0 else -out


def _ceil_away(v: Fraction) -> int:
    """Round away from zero to an integer (apimachinery's negativeScaleInt64)."""
    mag = -((-abs(v).numerator) // abs(v).denominator)
    return mag if v >= 0 else -mag


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact quantity and the format it prints in. Equality and order are by value."""

    amount: Fraction
    format: Format = DecimalSI

    # construction -------------------------------------------------------------------
    @classmethod
    def from_int(cls, value: int, fmt: Format | str = DecimalSI) -> Quantity:
        """NewQuantity(value, format)."""
        return cls(Fraction(int(value)), Format(fmt))

    @classmethod
    def from_milli(cls, milli: int, fmt: Format | str = DecimalSI) -> Quantity:
        """NewMilliQuantity(milli, format): milli / 1000."""
        return cls(Fraction(int(milli), 1000), Format(fmt))

    @classmethod
    def zero(cls) -> Quantity:
        return cls(Fraction(0), DecimalSI)

    # values ---------------------------------------------------------------------------
    def value(self) -> int:
        """Go `Value()`: the integer value, non-integers rounded away from zero."""
        return _ceil_away(self.amount)

    def milli_value(self) -> int:
        """Go `MilliValue()`: value x 1000, rounded away from zero."""
        return _ceil_away(self.amount * 1000)

    def is_zero(self) -> bool:
        return self.amount == 0

    def sign(self) -> int:
        return (self.amount > 0) - (self.amount < 0)

    def __neg__(self) -> Quantity:
        return Quantity(-self.amount, self.format)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount + other.amount, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount - other.amount, self.format)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.amount == other.amount
        return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        return self.amount < other.amount

    def __le__(self, other: Quantity) -> bool:
        return self.amount <= other.amount

    def __gt__(self, other: Quantity) -> bool:
        return self.amount > other.amount

    def __ge__(self, other: Quantity) -> bool:
        return self.amount >= other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    # printing -------------------------------------------------------------------------
    def canonical(self) -> str:
        v = self.amount
        if v == 0:
            return "0"
        fmt = self.format
        if fmt is BinarySI and (-1024 < v < 1024 or v.denominator != 1):
            fmt = DecimalSI
        sign = "-" if v < 0 else ""
        if fmt is BinarySI:
            n, power = abs(v.numerator), 0
            while n % 1024 == 0 and power < len(_BIN_BY_POWER) - 1:
                n //= 1024
                power += 1
            # Beyond Ei (only reachable by arithmetic) the rest stays in the mantissa.
            return f"{sign}{n}{_BIN_BY_POWER[power]}"
        mantissa, exp = _decimal_mantissa(abs(v))
        while exp % 3:
            mantissa *= 10
            exp -= 1
        if fmt is DecimalExponent:
            return f"{sign}{mantissa}" + (f"e{exp}" if exp else "")
        suffix = _DEC_BY_EXP.get(exp)
        if suffix is None:
            return f"{sign}{mantissa}e{exp}"
        return f"{sign}{mantissa}{suffix}"

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r}, {self.format.value})"


def _decimal_mantissa(mag: Fraction) -> tuple[int, int]:
    """|v| = m x 10^x with m an integer without trailing zeros."""
    den = mag.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den != 1:
        # Only arithmetic on non-decimal fractions gets here; keep nano precision like Go.
        mag = _round_up_nano(mag)
        return _decimal_mantissa(mag)
    k = max(twos, fives)
    m = mag.numerator * (10**k // mag.denominator)
    exp = -k
    while m % 10 == 0:
        m //= 10
        exp += 1
    return m, exp


def parse_quantity(s: str) -> Quantity:
    """ParseQuantity: the exact value and remembered format of a quantity string."""
    if not isinstance(s, str):
        raise QuantityError(f"quantity must be a string, got {type(s).__name__}")
    if not s:
        raise QuantityError("quantity is empty")
    if len(s) > _MAX_LENGTH:
        raise QuantityError(f"quantity of {len(s)} characters is too long (at most {_MAX_LENGTH})")
    positive, num, denom, suffix = _scan(s)
    base, exp, fmt = _interpret(suffix, s)
    digits = int(num + denom)
    if base == 10:
        shift = exp - len(denom)
        if shift < 0 and -shift > len(num) + len(denom) + 20:
            # Far below 1n: any non-zero digit rounds up to 1n anyway.
            shift = -(len(num) + len(denom) + 20)
        v = Fraction(digits * 10**shift) if shift >= 0 else Fraction(digits, 10**-shift)
    else:
        v = Fraction(digits * 2**exp, 10 ** len(denom))
    v = _round_up_nano(v)
    if fmt is BinarySI:
        v = min(v, _MAX_BINARY)
        if 0 < v < 1:
            fmt = DecimalSI
    return Quantity(v if positive else -v, fmt)


def parse_json_quantity(v: str | float | None) -> Quantity:
    """Quantity.UnmarshalJSON on a decoded JSON value: null is zero, numbers are accepted,
    surrounding whitespace of strings is trimmed."""
    if v is None:
        return Quantity.zero()
    if isinstance(v, bool):
        raise QuantityError(f"quantity must be a string or a number, got {v!r}")
    if isinstance(v, int):
        return parse_quantity(str(v))
    if isinstance(v, float):
        if not math.isfinite(v):
            raise QuantityError(f"quantity {v!r} is not a finite number")
        return parse_quantity(repr(v))
    if isinstance(v, str):
        return parse_quantity(v.strip())
    raise QuantityError(f"quantity must be a string or a number, got {type(v).__name__}")


# Resource lists -----------------------------------------------------------------------

_BINARY_SUFFIXES = (rn.BATCH_MEMORY_SUFFIX, rn.MID_MEMORY_SUFFIX)


def is_binary_resource(name: str) -> bool:
    """Byte-valued resources print BinarySI, as Kubernetes and Koordinator create them."""
    return (
        name in (rn.MEMORY, "ephemeral-storage", "storage")
        or name.startswith("hugepages-")
        or rn.tier_suffix(name) in _BINARY_SUFFIXES
    )


def parse_resource_list(d: Mapping[str, str | int | float | None] | None) -> dict[str, int]:
    """A Kubernetes ResourceList to integers: `cpu` in milli-cores (MilliValue), every other
    name by Value() (the batch/mid cpu tiers already count milli-cores in Kubernetes)."""
    out: dict[str, int] = {}
    if not d:
        return out
    if not isinstance(d, Mapping):
        raise QuantityError(f"resource list must be an object, got {type(d).__name__}")
    for name, raw in d.items():
        try:
            out[str(name)] = _resource_int(raw, rn.is_milli_resource(name))
        except QuantityError as e:
            raise QuantityError(f"resource {name!r}: {e}") from None
        except TypeError:  # an unhashable value (a list, an object): not a quantity
            raise QuantityError(f"resource {name!r}: quantity must be a string or a number") from None
    return out


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True must not hit the entry of 1
def _resource_int(raw: str | float | None, milli: bool) -> int:
    """One quantity of a resource list as an integer; the same few strings ("500m", "4Gi")
    come back in every pod of a cluster, and exact parsing is costly."""
    q = parse_json_quantity(raw)
    return q.milli_value() if milli else q.value()


@functools.lru_cache(maxsize=4096, typed=True)
def format_quantity(name: str, value: int) -> str:
    """The canonical Kubernetes string of one integer resource value; the same few values come
    back in every pod of a cluster, and the exact formatting is costly."""
    if rn.is_milli_resource(name):
        return Quantity.from_milli(value, DecimalSI).canonical()
    if is_binary_resource(name):
        return Quantity.from_int(value, BinarySI).canonical()
    return Quantity.from_int(value, DecimalSI).canonical()


def format_resource_list(d: Mapping[str, int] | None) -> dict[str, str]:
    """Integer resource list to Kubernetes strings: cpu milli -> `500m`/`2`, memory-like ->
    BinarySI (`1Gi`), the cpu tiers and everything else -> DecimalSI (`50k`)."""
    return {name: format_quantity(name, int(v)) for name, v in (d or {}).items()}
