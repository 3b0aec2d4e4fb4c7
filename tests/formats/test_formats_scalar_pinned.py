"""Pins for the scalar path of ``formats/spec.py`` and for ``tensors.random_tensor`` and
``training`` called directly.

``fp8_recipe_error`` is cached (``functools.cache``) and filled before a mutant is switched on,
so its test tensor and ``describe`` are checked here by themselves: the tensor against the
stream of ``torch.manual_seed(0)`` and the σ of each row, the text against the format written
out by hand.
"""

from __future__ import annotations

import math

import pytest
import torch

from tensorledger.errors import InputError
from tensorledger.formats import format_properties, round_to_format
from tensorledger.formats.blocks import Scheme, quantize_per_tensor, resolve_scheme
from tensorledger.formats.metrics import error_metrics
from tensorledger.formats.spec import read_cast_input
from tensorledger.formats.tensors import random_tensor
from tensorledger.formats.training import TEST_TENSOR, Fp8RecipeError, _error, _test_tensor


def test_fp64_rounds_a_float_to_itself() -> None:
    assert round_to_format(0.1, "fp64") == 0.1
    assert round_to_format(5e-324, "fp64") == 5e-324  # fp64's smallest subnormal


def test_nan_into_a_format_without_nan_is_zero() -> None:
    assert round_to_format(math.nan, "fp4_e2m1") == 0.0  # fp4 holds neither inf nor NaN
    assert math.copysign(1.0, round_to_format(math.nan, "fp6_e3m2")) == 1.0  # +0
    assert math.isnan(round_to_format(math.nan, "fp8_e4m3fn"))


def test_tf32_keeps_its_smallest_normal() -> None:
    # tf32 has no subnormals; 2^-126 is its smallest normal and stays, half of it flushes
    assert round_to_format(2.0**-126, "tf32") == 2.0**-126
    assert round_to_format(2.0**-127, "tf32") == 0.0


def test_negative_zero_stays_where_the_format_has_it() -> None:
    assert math.copysign(1.0, round_to_format(-0.0, "fp16")) == -1.0
    assert math.copysign(1.0, round_to_format(-1e-30, "fp16")) == -1.0  # underflow keeps sign
    assert math.copysign(1.0, round_to_format(-0.0, "fp8_e4m3fnuz")) == 1.0  # fnuz: no -0


def test_format_properties_of_e8m0_and_tf32() -> None:
    e8m0 = format_properties("e8m0")
    assert e8m0.aliases == ("fp8_e8m0", "float8_e8m0fnu", "e8m0fnu")
    assert (e8m0.bits, e8m0.has_zero, e8m0.specials) == (8, False, "e8m0")
    assert e8m0.note == "MX block scale: a power of two"
    tf32 = format_properties("tf32")  # 1 + 8 + 10 = 19 layout bits on 32-bit storage
    assert (tf32.bits, tf32.has_zero, tf32.specials) == (32, True, "ieee")


def test_a_number_in_foreign_digits_is_refused_naming_the_value() -> None:
    with pytest.raises(InputError, match=r"^the value '٣' holds '٣' \(ARABIC-INDIC DIGIT THREE"):
        read_cast_input("٣")


def test_a_format_name_as_a_scheme_is_a_plain_cast() -> None:
    assert resolve_scheme("bfloat16") == Scheme("bf16", "cast", "bf16",
                                                 "plain bf16 cast, no scale")


def test_random_tensors_default_to_seed_0() -> None:
    for dist in ("normal", "uniform", "laplace"):
        assert torch.equal(random_tensor(dist, (3, 4)), random_tensor(dist, (3, 4), seed=0))


def test_laplace_is_the_inverse_cdf_of_fp64_uniforms() -> None:
    # Laplace(0, 1) from u uniform on [-1/2, 1/2): x = -sign(u) · ln(1 - 2|u|), drawn in fp64
    u = torch.rand(500, generator=torch.Generator().manual_seed(4), dtype=torch.float64) - 0.5
    want = [-math.copysign(1.0, v) * math.log1p(-2 * abs(v)) if v else 0.0 for v in u.tolist()]
    got = random_tensor("laplace", (500,), seed=4)
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx(want, rel=1e-6, abs=1e-12)  # fp32 rounding of each


def test_the_fp8_test_tensor_is_seeded_rows_of_spread_sigma() -> None:
    x = _test_tensor()
    assert x.shape == (256, 1024) and x.dtype == torch.float32
    torch.manual_seed(0)
    values = torch.randn(256, 1024)
    # row r has σ = 2^(-8 + 16 r / 255): 2^-8 for the first row, 2^8 for the last
    sigma = torch.tensor([2.0 ** (-8 + 16 * r / 255) for r in range(256)])
    assert torch.allclose(x, values * sigma[:, None], rtol=1e-6, atol=0.0)
    assert (float(sigma[0]), float(sigma[-1])) == (2.0**-8, 2.0**8)


@pytest.mark.usefixtures("float64_default")
def test_the_fp8_test_tensor_is_fp32_whatever_the_default_dtype() -> None:
    assert _test_tensor().dtype == torch.float32


def test_describe_names_a_separate_gradient_format() -> None:
    tensorwise = Fp8RecipeError("tensorwise", "fp8_e4m3fn", "fp8_e5m2", "tensor", 30.04,
                                0.0234, 25.06)
    assert tensorwise.describe() == (
        "precision lab: fp8_e4m3fn, one scale per tensor: SQNR 30.0 dB, mean relative error "
        f"2.34%; fp8_e5m2 gradients SQNR 25.1 dB (on {TEST_TENSOR})")
    rowwise = Fp8RecipeError("rowwise", "fp8_e4m3fn", "fp8_e4m3fn", "row", 32.0, 0.0231, 32.0)
    assert rowwise.describe() == (
        "precision lab: fp8_e4m3fn, one scale per row: SQNR 32.0 dB, mean relative error "
        f"2.31% (on {TEST_TENSOR})")


def test_the_recipe_error_scales_per_tensor_or_per_row() -> None:
    # rows 1000 times apart: one scale for both squeezes the small row, one per row does not
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(16))
    x[1] *= 1000
    per_tensor = _error(x, "fp8_e5m2", "tensor")
    assert per_tensor == error_metrics(x, quantize_per_tensor(x, "fp8_e5m2").dequantized)
    per_row = _error(x, "fp8_e5m2", "row")
    rows = torch.stack([quantize_per_tensor(row, "fp8_e5m2").dequantized for row in x])
    assert per_row == error_metrics(x, rows)
    assert per_row.mean_rel_error < per_tensor.mean_rel_error
