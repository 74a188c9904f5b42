"""resource.Quantity conformance on Kubernetes' own cases, plus resource-list round trips."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from koordcommon.quantity import (
    BinarySI,
    DecimalExponent,
    DecimalSI,
    Format,
    Quantity,
    QuantityError,
    format_resource_list,
    parse_json_quantity,
    parse_quantity,
    parse_resource_list,
)
from koordcommon.testing.fixtures import fixtures_dir


def _load_cases() -> dict:
    fixtures = fixtures_dir()
    with open(fixtures / "apimachinery.resource.quantity_test.cases.json") as f:
        return json.load(f)


CASES = _load_cases()


def _params(group: str, ident) -> list:
    return [pytest.param(c, id=f"{group}[{i}]:{ident(c)}") for i, c in enumerate(CASES[group]["cases"])]


def test_fixture_holds_238_cases():
    assert sum(len(g["cases"]) for g in CASES.values()) == 238


@pytest.mark.parametrize("case", _params("parse_value_and_format", lambda c: c["input"]))
def test_parse_value_and_format(case):
    want = Fraction(case["value"])
    for prefix, sign in (("", 1), ("+", 1), ("-", -1)):
        q = parse_quantity(prefix + case["input"])
        assert q.amount == sign * want, prefix + case["input"]
        assert q.format == Format(case["format"]), prefix + case["input"]


@pytest.mark.parametrize("case", _params("invalid", repr))
def test_invalid(case):
    with pytest.raises(QuantityError):
        parse_quantity(case)


@pytest.mark.parametrize("case", _params("format_canonical", lambda c: f"{c['value']}-{c['format']}"))
def test_format_canonical(case):
    q = Quantity(Fraction(case["value"]), Format(case["format"]))
    assert str(q) == case["expect"]
    assert q.canonical() == case["expect"]
    if not q.is_zero():
        assert str(-q) == "-" + case["expect"]
    assert str(parse_quantity(case["expect"])) == case["expect"]
    if case["alternate"] is not None:
        assert str(parse_quantity(case["alternate"])) == case["expect"]


@pytest.mark.parametrize("case", _params("parse_emit", lambda c: c["input"]))
def test_parse_emit(case):
    assert str(parse_quantity(case["input"])) == case["expect"]
    assert str(parse_quantity("-" + case["input"])) == "-" + case["expect"]


@pytest.mark.parametrize("case", _params("parse_canonical", lambda c: c["input"]))
def test_parse_canonical(case):
    q = parse_quantity(case["input"])
    assert q.amount == Fraction(case["value"])
    assert str(q) == case["canonical"]


@pytest.mark.parametrize("case", _params("json_whitespace", lambda c: c["json"]))
def test_json_whitespace(case):
    assert str(parse_json_quantity(json.loads(case["json"]))) == case["expect"]


# Go's MilliValue / Value: exact when possible, otherwise rounded away from zero.
@pytest.mark.parametrize(
    "text,milli,value",
    [
        ("0", 0, 0),
        ("1", 1000, 1),
        ("0.5", 500, 1),
        ("500m", 500, 1),
        ("1.5", 1500, 2),
        ("100u", 1, 1),
        ("1n", 1, 1),
        ("-1n", -1, -1),
        ("-1.5", -1500, -2),
        ("32", 32000, 32),
        ("2.5Gi", 2684354560000, 2684354560),
        ("50k", 50000000, 50000),
        ("1e3", 1000000, 1000),
        ("9Ei", (2**63 - 1) * 1000, 2**63 - 1),
    ],
)
def test_milli_value_and_value(text, milli, value):
    q = parse_quantity(text)
    assert q.milli_value() == milli
    assert q.value() == value


@pytest.mark.parametrize(
    "q,expect",
    [
        (Quantity.from_milli(500, DecimalSI), "500m"),
        (Quantity.from_milli(2000, DecimalSI), "2"),
        (Quantity.from_milli(1500, DecimalSI), "1500m"),
        (Quantity.from_int(50000, DecimalSI), "50k"),
        (Quantity.from_int(2**30, BinarySI), "1Gi"),
        (Quantity.from_int(1536 * 2**20, BinarySI), "1536Mi"),
        (Quantity.from_int(1000, BinarySI), "1k"),  # < 1024 prints DecimalSI
        (Quantity.from_int(1025, BinarySI), "1025"),
        (Quantity.from_int(3000, DecimalExponent), "3e3"),
        (Quantity.from_int(0, BinarySI), "0"),
        (Quantity.from_int(10**21, DecimalSI), "1e21"),  # beyond E: exponent kept (Go drops it)
    ],
)
def test_constructors_print_canonically(q, expect):
    assert str(q) == expect


@pytest.mark.parametrize("raw", [True, [1], {"a": 1}, float("nan"), float("inf"), "", "1 1", "1e99999", "9" * 1001])
def test_bad_json_quantities_raise_quantity_error(raw):
    with pytest.raises(QuantityError):
        parse_json_quantity(raw)


@pytest.mark.parametrize(
    "raw,expect",
    [(None, "0"), (0, "0"), (1.5, "1500m"), (110, "110"), ("  2Gi ", "2Gi"), (1e21, "1e21"), ("-", "0"), (".", "0")],
)
def test_json_values(raw, expect):
    assert str(parse_json_quantity(raw)) == expect


def test_quantity_error_is_a_value_error_with_the_input():
    with pytest.raises(ValueError, match="'12x'"):
        parse_quantity("12x")


def test_tiny_exponent_rounds_up_to_one_nano_without_building_huge_numbers():
    assert parse_quantity("1e-2000000000").amount == Fraction(1, 10**9)
    assert parse_quantity("0e-2000000000").is_zero()


def test_equality_and_order_are_by_value():
    assert parse_quantity("1Gi") == parse_quantity("1024Mi")
    assert parse_quantity("1G") < parse_quantity("1Gi")
    assert len({parse_quantity("0.5"), parse_quantity("500m")}) == 1


# Resource lists -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "k8s,internal",
    [
        ({"cpu": "500m", "memory": "1Gi"}, {"cpu": 500, "memory": 2**30}),
        ({"cpu": "0.5"}, {"cpu": 500}),
        ({"cpu": 32, "memory": "256Gi", "pods": 110}, {"cpu": 32000, "memory": 256 * 2**30, "pods": 110}),
        ({"cpu": "1m"}, {"cpu": 1}),
        ({"cpu": "100u"}, {"cpu": 1}),  # MilliValue rounds up
        ({"memory": "1.5"}, {"memory": 2}),  # Value rounds up
        ({"memory": "129M"}, {"memory": 129_000_000}),
        (
            {"kubernetes.io/batch-cpu": "50k", "kubernetes.io/batch-memory": "120Gi"},
            {"kubernetes.io/batch-cpu": 50_000, "kubernetes.io/batch-memory": 120 * 2**30},
        ),
        (
            {"koordinator.sh/batch-cpu": 8000, "koordinator.sh/mid-memory": "4Gi"},
            {"koordinator.sh/batch-cpu": 8000, "koordinator.sh/mid-memory": 4 * 2**30},
        ),
        ({"example.com/dongle": 3}, {"example.com/dongle": 3}),
        ({"nvidia.com/gpu": None}, {"nvidia.com/gpu": 0}),
        ({}, {}),
    ],
)
def test_parse_resource_list(k8s, internal):
    assert parse_resource_list(k8s) == internal


@pytest.mark.parametrize(
    "internal,k8s",
    [
        ({"cpu": 500}, {"cpu": "500m"}),
        ({"cpu": 2000}, {"cpu": "2"}),
        ({"cpu": 1500}, {"cpu": "1500m"}),
        ({"cpu": 0}, {"cpu": "0"}),
        ({"memory": 2**30}, {"memory": "1Gi"}),
        ({"memory": 3 * 2**29}, {"memory": "1536Mi"}),
        ({"memory": 1_000_000_000}, {"memory": "1000000000"}),  # not a multiple of 1024: plain integer
        ({"memory": 1000}, {"memory": "1k"}),
        ({"memory": 1023}, {"memory": "1023"}),
        ({"koordinator.sh/batch-cpu": 50_000}, {"koordinator.sh/batch-cpu": "50k"}),
        ({"kubernetes.io/mid-cpu": 12_345}, {"kubernetes.io/mid-cpu": "12345"}),
        ({"kubernetes.io/batch-memory": 120 * 2**30}, {"kubernetes.io/batch-memory": "120Gi"}),
        ({"pods": 110}, {"pods": "110"}),
        ({"ephemeral-storage": 10 * 2**30}, {"ephemeral-storage": "10Gi"}),
        ({"example.com/dongle": 4000}, {"example.com/dongle": "4k"}),
    ],
)
def test_format_resource_list(internal, k8s):
    assert format_resource_list(internal) == k8s
    assert parse_resource_list(format_resource_list(internal)) == internal


@pytest.mark.parametrize(
    "resources",
    [
        {"cpu": 1, "memory": 1},
        {"cpu": 999, "memory": 1023, "pods": 1},
        {"cpu": 123_456, "memory": 7 * 2**40 + 1, "kubernetes.io/batch-cpu": 1, "kubernetes.io/batch-memory": 2**20},
        {"cpu": 10**12, "memory": 2**62, "koordinator.sh/mid-cpu": 10**9, "koordinator.sh/mid-memory": 5 * 10**9},
    ],
)
def test_resource_list_round_trip(resources):
    assert parse_resource_list(format_resource_list(resources)) == resources


def test_invalid_resource_list_names_the_resource():
    with pytest.raises(QuantityError, match="'memory'"):
        parse_resource_list({"cpu": "1", "memory": "12 Gi"})
    with pytest.raises(QuantityError):
        parse_resource_list(["cpu"])  # type: ignore[arg-type]
