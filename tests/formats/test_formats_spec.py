"""Format metadata: properties against FACTS.md, every code against ml_dtypes, no torch."""

from __future__ import annotations

import math
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from formats_oracles import ORACLES

from tensorledger.dtypes import DTYPES
from tensorledger.errors import InputError, UnknownNameError
from tensorledger.formats import (
    FORMATS,
    code_values,
    finite_values,
    format_properties,
    resolve_format,
    round_to_format,
)

# FACTS.md, "Numeric formats": S/E/M, bias, max finite, min normal, min subnormal.
FACTS = {
    "fp32": ((1, 8, 23), 127, 3.4028235e38, 2.0**-126, 2.0**-149),
    "tf32": ((1, 8, 10), 127, 3.40116e38, 2.0**-126, None),
    "fp16": ((1, 5, 10), 15, 65504.0, 2.0**-14, 2.0**-24),
    "bf16": ((1, 8, 7), 127, 3.3895314e38, 2.0**-126, 2.0**-133),
    "fp8_e4m3fn": ((1, 4, 3), 7, 448.0, 2.0**-6, 2.0**-9),
    "fp8_e5m2": ((1, 5, 2), 15, 57344.0, 2.0**-14, 2.0**-16),
    "fp8_e4m3fnuz": ((1, 4, 3), 8, 240.0, 2.0**-7, 2.0**-10),
    "fp8_e5m2fnuz": ((1, 5, 2), 16, 57344.0, 2.0**-15, 2.0**-17),
    "e8m0": ((0, 8, 0), 127, 2.0**127, 2.0**-127, None),
    "fp6_e2m3": ((1, 2, 3), 1, 7.5, 1.0, 0.125),
    "fp6_e3m2": ((1, 3, 2), 3, 28.0, 0.25, 0.0625),
    "fp4_e2m1": ((1, 2, 1), 1, 6.0, 1.0, 0.5),
}
# FACTS.md "inf / nan" column: (has inf, has nan, has -0).
SPECIALS = {
    "fp32": (True, True, True), "fp16": (True, True, True), "bf16": (True, True, True),
    "fp8_e4m3fn": (False, True, True), "fp8_e5m2": (True, True, True),
    "fp8_e4m3fnuz": (False, True, False), "fp8_e5m2fnuz": (False, True, False),
    "e8m0": (False, True, False), "fp6_e2m3": (False, False, True),
    "fp6_e3m2": (False, False, True), "fp4_e2m1": (False, False, True),
}


@pytest.mark.parametrize("name", sorted(FACTS))
def test_properties_match_facts(name: str) -> None:
    layout, bias, max_finite, min_normal, min_subnormal = FACTS[name]
    p = format_properties(name)
    assert (p.sign_bits, p.exponent_bits, p.mantissa_bits) == layout
    assert p.bias == bias
    assert p.max_finite == pytest.approx(max_finite, rel=1e-6)  # FACTS prints 6 to 8 digits
    assert p.min_normal == min_normal
    assert p.min_subnormal == min_subnormal


@pytest.mark.parametrize("name", sorted(SPECIALS))
def test_special_values_match_facts(name: str) -> None:
    p = format_properties(name)
    assert (p.has_inf, p.has_nan, p.has_negative_zero) == SPECIALS[name]


def test_properties_against_numpy_finfo() -> None:
    """A second source for the wide formats: numpy's finfo (and ml_dtypes' for bf16)."""
    for name, dtype in (("fp64", np.float64), ("fp32", np.float32), ("fp16", np.float16),
                        ("bf16", ml_dtypes.bfloat16)):
        info = ml_dtypes.finfo(dtype) if name == "bf16" else np.finfo(dtype)
        p = format_properties(name)
        assert p.max_finite == float(info.max)
        assert p.min_normal == float(info.smallest_normal)
        assert p.min_subnormal == float(info.smallest_subnormal)
        assert p.epsilon == float(info.eps)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_small_formats_against_ml_dtypes_finfo(name: str) -> None:
    info = ml_dtypes.finfo(ORACLES[name])
    fmt = resolve_format(name)
    assert fmt.max_finite == float(info.max)
    assert fmt.min_normal == float(info.smallest_normal)
    assert fmt.epsilon == float(info.eps)


def test_derived_properties_by_hand() -> None:
    e4m3 = resolve_format("fp8_e4m3fn")
    assert e4m3.epsilon == 0.125  # 2^-3
    # log10(448 / 2^-9) = log10(229376)
    assert e4m3.dynamic_range_decades == pytest.approx(math.log10(229376))
    e8m0 = resolve_format("e8m0")
    assert e8m0.dynamic_range_decades == pytest.approx(254 * math.log10(2))  # 2^127 / 2^-127
    assert not e8m0.has_zero


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_bit_width_equals_dtype_table(name: str) -> None:
    assert FORMATS[name].bits == DTYPES[name].bits


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_aliases_resolve_like_the_dtype_table(name: str) -> None:
    for alias in DTYPES[name].aliases:
        assert resolve_format(alias).name == name
    assert resolve_format(name.upper()).name == name


def test_unknown_format_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown format .fp5.*fp4_e2m1"):
        resolve_format("fp5")


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_every_code_decodes_as_ml_dtypes_does(name: str) -> None:
    fmt = resolve_format(name)
    codes = np.arange(fmt.code_count, dtype=np.uint8)
    oracle = codes.view(ORACLES[name]).astype(np.float64)
    ours = np.array([v.value for v in code_values(name)], dtype=np.float64)
    # bit for bit in fp64: the same values, the same signs of zero and of NaN
    np.testing.assert_array_equal(ours.view(np.uint64), oracle.view(np.uint64))


def test_fp4_holds_the_fifteen_values_of_facts() -> None:
    assert finite_values("fp4_e2m1") == (-6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0,
                                         0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    rows = code_values("fp4_e2m1")
    assert [r.bits for r in rows[:3]] == ["0.00.0", "0.00.1", "0.01.0"]
    assert [r.kind for r in rows[:3]] == ["zero", "subnormal", "normal"]


def test_e4m3fn_has_one_nan_per_sign() -> None:
    rows = code_values("fp8_e4m3fn")
    assert [r.code for r in rows if r.kind == "nan"] == [0x7F, 0xFF]
    assert [r.code for r in code_values("fp8_e4m3fnuz") if r.kind == "nan"] == [0x80]


def test_wide_formats_are_not_enumerated() -> None:
    with pytest.raises(InputError, match="at most 8 bits"):
        code_values("bf16")


def test_encode_inverts_decode() -> None:
    for name in ORACLES:
        fmt = resolve_format(name)
        for row in code_values(name):
            if row.kind != "nan":
                assert fmt.encode(row.value) == row.code


# FACTS.md: FP4 E2M1 ties, E4M3FN ties, and the double-rounding example.
@pytest.mark.parametrize(("value", "name", "expected"), [
    (0.25, "fp4_e2m1", 0.0), (0.75, "fp4_e2m1", 1.0), (1.25, "fp4_e2m1", 1.0),
    (1.75, "fp4_e2m1", 2.0), (2.5, "fp4_e2m1", 2.0), (3.5, "fp4_e2m1", 4.0),
    (5.0, "fp4_e2m1", 4.0), (6.5, "fp4_e2m1", 6.0),
    (17.0, "fp8_e4m3fn", 16.0), (19.0, "fp8_e4m3fn", 20.0), (21.0, "fp8_e4m3fn", 20.0),
    (17.00001, "fp8_e4m3fn", 18.0), (1e-8, "fp16", 0.0), (1e-8, "bf16", 1.0011717677116394e-08),
    (464.0, "fp8_e4m3fn", 448.0),  # the tie between 448 and 480 goes to the even 448
    (61440.0, "fp8_e5m2", math.inf),  # the tie between 57344 and 65536 goes to 2^16: inf
])
def test_scalar_rounding_examples(value: float, name: str, expected: float) -> None:
    assert round_to_format(value, name) == expected


def test_scalar_rounding_overflow_rules() -> None:
    assert math.isnan(round_to_format(465.0, "fp8_e4m3fn"))
    assert round_to_format(465.0, "fp8_e4m3fn", saturate=True) == 448.0
    assert round_to_format(-1e6, "fp4_e2m1") == -6.0
    assert round_to_format(-1e-4, "fp8_e4m3fnuz") == 0.0
    assert math.copysign(1.0, round_to_format(-1e-4, "fp8_e4m3fnuz")) == 1.0  # no -0
    assert math.isnan(round_to_format(0.0, "e8m0"))
    assert round_to_format(1e-45, "e8m0") == 2.0**-127


def test_double_rounding_through_fp16_differs() -> None:
    """FACTS.md: 17.00001 → e4m3fn is 18 directly, 16 by way of fp16."""
    via_fp16 = round_to_format(round_to_format(17.00001, "fp16"), "fp8_e4m3fn")
    assert (round_to_format(17.00001, "fp8_e4m3fn"), via_fp16) == (18.0, 16.0)


def test_metadata_imports_without_torch() -> None:
    code = ("import sys; import tensorledger.formats as f; f.format_properties('fp4');"
            "f.code_values('fp8_e4m3fn'); f.round_to_format(1e-8, 'fp16');"
            "import tensorledger.formats.spec; assert 'torch' not in sys.modules, 'torch loaded'")
    subprocess.run([sys.executable, "-c", code], check=True)
