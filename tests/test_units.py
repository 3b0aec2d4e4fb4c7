"""Parsing and formatting of quantities."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensorledger.errors import ShapeError, UnitError
from tensorledger.units import (
    format_bytes,
    format_count,
    format_duration,
    format_flop_rate,
    format_sci,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_flop_rate,
    parse_flops,
    parse_integer,
    parse_real,
    parse_shape,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("70B", 70e9), ("70e9", 70e9), ("15T", 15e12), ("1.5M", 1.5e6), ("4096", 4096.0),
    ("2k", 2000.0), ("7G", 7e9), (" 8B ", 8e9), (".5K", 500.0),
])
def test_parse_count(text: str, expected: float) -> None:
    assert parse_count(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["70Q", "70b", "1.5m", "", "B", "-3B", "1e400", "nan", "7 B B"])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(UnitError, match=r"expected|finite"):
        parse_count(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("80GB", 80e9), ("80GiB", 80 * 2**30), ("2304MiB", 2304 * 2**20), ("128", 128.0),
    ("1.5TB", 1.5e12), ("512 KiB", 512 * 1024.0),
])
def test_parse_bytes(text: str, expected: float) -> None:
    assert parse_bytes(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["80Gb", "80gb", "80G", "80 GBs", "GB"])
def test_parse_bytes_rejects_ambiguous(text: str) -> None:
    with pytest.raises(UnitError, match=r"80GB|expected"):
        parse_bytes(text)


def test_rates_and_bandwidths() -> None:
    assert parse_bandwidth("3.35TB/s") == pytest.approx(3.35e12)
    assert parse_bandwidth("2039GB/s") == pytest.approx(2.039e12)
    assert parse_flop_rate("989.5TFLOP/s") == pytest.approx(989.5e12)
    assert parse_flop_rate("1.979PFLOP/s") == pytest.approx(1.979e15)
    assert parse_flop_rate("9.895e14") == pytest.approx(9.895e14)
    with pytest.raises(UnitError, match="FLOP/s"):
        parse_flop_rate("989TFLOPS")  # a count and a rate are not mixed up
    with pytest.raises(UnitError, match="/s"):
        parse_bandwidth("3.35TB")


def test_flop_counts() -> None:
    assert parse_flops("3.14e23") == pytest.approx(3.14e23)
    assert parse_flops("6.3e24 FLOPs") == pytest.approx(6.3e24)
    with pytest.raises(UnitError, match="rate"):
        parse_flops("989TFLOP/s")


@pytest.mark.parametrize(("text", "seconds"), [
    ("2w", 2 * 7 * 86400), ("14d", 14 * 86400), ("36h", 36 * 3600), ("90min", 90 * 60),
    ("30s", 30), ("250ms", 0.25),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["14", "3m", "2 fortnights", "d"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UnitError):
        parse_duration(text)


def test_parse_shape() -> None:
    assert parse_shape("4x8") == (4, 8)
    assert parse_shape("49152x12288") == (49152, 12288)
    assert parse_shape("2,3,4") == (2, 3, 4)
    assert parse_shape("1024×1024") == (1024, 1024)
    for bad in ("4x", "x8", "4xa", "4x0", "", "-4x8", "4.5x8"):
        with pytest.raises(ShapeError):
            parse_shape(bad)


def test_formatting_examples() -> None:
    assert format_sci(6.3e24) == "6.3e24"
    assert format_sci(9.5751936e21) == "9.575e21"
    assert format_count(70e9) == "70B"
    assert format_count(53.333e9) == "53.33B"
    assert format_bytes(2415919104, "MiB") == "2304 MiB"  # 49152·12288·4 / 2^20
    assert format_bytes(2415919104, "GB") == "2.416 GB"
    assert format_bytes(2415919104, "auto-binary") == "2.25 GiB"
    assert format_flop_rate(989.5e12) == "989.5 TFLOP/s"
    assert format_duration(143.9 * 86400) == "143.9 days"
    assert format_duration(0.012) == "12 ms"


finite_positive = st.floats(min_value=1e-3, max_value=1e30, allow_nan=False, allow_infinity=False)


@given(finite_positive)
def test_count_round_trip(value: float) -> None:
    assert parse_count(format_count(value, digits=17)) == pytest.approx(value, rel=1e-12)
    assert parse_count(format_sci(value, digits=17)) == pytest.approx(value, rel=1e-12)


@given(finite_positive, st.sampled_from(["B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
                                         "auto", "auto-binary"]))
def test_bytes_round_trip(value: float, unit: str) -> None:
    text = format_bytes(value, unit, digits=17).replace(" ", "")
    assert parse_bytes(text) == pytest.approx(value, rel=1e-12)


@given(finite_positive)
def test_rate_round_trip(value: float) -> None:
    text = format_flop_rate(value, digits=17).replace(" ", "")
    assert parse_flop_rate(text) == pytest.approx(value, rel=1e-12)


@given(st.floats(min_value=1e-6, max_value=1e12))
def test_duration_round_trip(seconds: float) -> None:
    text = format_duration(seconds, digits=17).replace(" ", "")
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)
    assert math.isfinite(parse_duration(text))


@pytest.mark.parametrize(("text", "expected"), [
    ("4096", 4096), ("-3", -3), ("+7", 7), (" 12 ", 12), ("0009", 9),
    (str(2**63 - 1), 2**63 - 1),
])
def test_parse_integer(text: str, expected: int) -> None:
    assert parse_integer(text, what="--n", minimum=-64) == expected


@pytest.mark.parametrize(("text", "fragment"), [
    (str(2**63), "out of range"), ("9" * 5000, "out of range"), ("1.5", "(a fraction)"),
    ("1e3", "not a whole number"), ("٤", "ARABIC-INDIC DIGIT FOUR"), ("", "not a whole number"),
    ("1_000", "not a whole number"), ("0x10", "not a whole number"), ("-65", "out of range"),
])
def test_parse_integer_rejects(text: str, fragment: str) -> None:
    with pytest.raises(UnitError, match=re.escape(fragment)):
        parse_integer(text, what="--n", minimum=-64)


@pytest.mark.parametrize(("text", "fragment"), [
    ("nan", "not finite"), ("-inf", "not finite"), ("1e400", "too large for a float"),
    ("0", "out of range"), ("1.0000001", "out of range"), ("٣", "ARABIC-INDIC DIGIT THREE"),
    ("0,5", "not a number"), ("x" * 101, "too long"),
])
def test_parse_real_rejects(text: str, fragment: str) -> None:
    with pytest.raises(UnitError, match=re.escape(fragment)):
        parse_real(text, what="--mfu", minimum=0, maximum=1, minimum_open=True)
    assert parse_real("0.25", what="--mfu", minimum=0, maximum=1) == 0.25


@pytest.mark.parametrize("text", ["٧٠B", "７０B", "-70B", "1e307T", "7" * 101])
def test_quantities_refuse_other_scripts_negatives_and_overflow(text: str) -> None:
    with pytest.raises(UnitError):
        parse_count(text)


def test_shape_limits() -> None:
    assert parse_shape("x".join(["2"] * 62 + ["1", "1"])) == (2,) * 62 + (1, 1)  # 2^62 elements
    assert parse_shape(f"{2**63 - 1}") == (2**63 - 1,)
    for text in ("x".join(["2"] * 65), f"{2**32}x{2**32}", "٤x٤", "1" + "0" * 30):
        with pytest.raises(ShapeError):
            parse_shape(text)
