"""Pins that kill the surviving mutants of ``formats/`` (issue 42's mutation run).

``FloatFormat.decode`` is mostly reached through ``_code_table``, whose ``functools.cache`` is
filled before a mutant is switched on, so these tests call ``decode`` itself, code by code,
against ml_dtypes (numpy for fp16, fp32 and fp64).  ``quantize_cast`` casts a tensor of more
than ``CAST_CHUNK`` elements a chunk at a time; the other tests' tensors are smaller, so the
chunked path is checked here against one ``cast`` of the whole tensor, and ``error_metrics``'s
chunks against numpy.  ``_mx_schemes`` runs at import, so it is called here and checked against
the registry built then; ``random_tensor``'s draws against torch's seeded stream and the moments
of each distribution.
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest
import torch
from formats_oracles import ORACLES

from tensorledger.errors import InputError, ShapeError
from tensorledger.formats import FORMATS, resolve_format
from tensorledger.formats.blocks import (
    CAST_CHUNK,
    SCHEMES,
    _mx_schemes,
    quantize_cast,
    quantize_per_tensor,
)
from tensorledger.formats.metrics import METRICS_CHUNK, error_metrics
from tensorledger.formats.quantize import cast
from tensorledger.formats.spec import cast_scalar, read_cast_input
from tensorledger.formats.tensors import random_tensor


def _as_float64(values: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # NaN codes widen without a warning
        return values.astype(np.float64)


def _same(got: float, want: float) -> bool:
    """Equal values with equal signs (so +0 is not -0, and -NaN is not NaN)."""
    if math.isnan(want):  # a NaN keeps its sign bit
        return math.isnan(got) and math.copysign(1.0, got) == math.copysign(1.0, want)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_decode_of_every_small_code_matches_ml_dtypes(name: str) -> None:
    fmt = FORMATS[name]
    codes = np.arange(fmt.code_count, dtype=np.uint8)  # 2^layout_bits: 256, 64 or 16 codes
    oracle = _as_float64(codes.view(ORACLES[name]))
    wrong = [(code, fmt.decode(code), float(want)) for code, want in enumerate(oracle)
             if not _same(fmt.decode(code), float(want))]
    assert wrong == []


@pytest.mark.parametrize(("name", "unsigned", "oracle"), [
    ("bf16", np.uint16, ml_dtypes.bfloat16),
    ("fp16", np.uint16, np.float16),
])
def test_decode_of_every_16_bit_code_matches_the_oracle(name: str, unsigned: type,
                                                        oracle: type) -> None:
    fmt = resolve_format(name)
    codes: np.ndarray = np.arange(2**16, dtype=unsigned)  # all 65,536 codes
    values = _as_float64(codes.view(oracle))
    wrong = [code for code in range(2**16) if not _same(fmt.decode(code), float(values[code]))]
    assert wrong == []


def _edge_codes(exponent_bits: int, mantissa_bits: int) -> list[int]:
    """Codes at the binade edges: both signs × exponent fields 0, 1, 2, the bias, top - 1 and
    top × mantissa fields 0, 1, half and all ones."""
    top = 2**exponent_bits - 1
    bias = 2**(exponent_bits - 1) - 1
    mantissas = (0, 1, 2**(mantissa_bits - 1), 2**mantissa_bits - 1)
    return [(sign << (exponent_bits + mantissa_bits)) | (exponent << mantissa_bits) | mantissa
            for sign in (0, 1) for exponent in (0, 1, 2, bias, top - 1, top)
            for mantissa in mantissas]


@pytest.mark.parametrize(("name", "unsigned", "oracle"), [
    ("fp32", np.uint32, np.float32),
    ("fp64", np.uint64, np.float64),
])
def test_decode_of_wide_formats_at_binade_edges_matches_numpy(name: str, unsigned: type,
                                                              oracle: type) -> None:
    fmt = resolve_format(name)
    codes = _edge_codes(fmt.exponent_bits, fmt.mantissa_bits)  # 2 × 6 × 4 = 48 codes
    values = _as_float64(np.array(codes, dtype=unsigned).view(oracle))
    wrong = [c for c, v in zip(codes, values, strict=True) if not _same(fmt.decode(c), float(v))]
    assert wrong == []


def test_decode_of_tf32_is_fp32_with_13_more_zero_bits_and_no_subnormals() -> None:
    fmt = resolve_format("tf32")  # 1 + 8 + 10 = 19 layout bits
    codes = _edge_codes(8, 10)
    as_fp32 = np.array([c << 13 for c in codes], dtype=np.uint32).view(np.float32)
    for code, value in zip(codes, _as_float64(as_fp32), strict=True):
        exponent = (code >> 10) & 0xFF
        # exponent field 0: fp32 reads a subnormal, tf32 (no subnormals) a zero of that sign
        want = math.copysign(0.0, float(value)) if exponent == 0 else float(value)
        assert _same(fmt.decode(code), want), (code, fmt.decode(code), want)


@pytest.mark.parametrize("name", ["fp4_e2m1", "fp8_e4m3fn", "e8m0", "bf16"])
def test_decode_takes_exactly_the_codes_of_the_layout(name: str) -> None:
    fmt = resolve_format(name)
    last = 2**fmt.layout_bits - 1  # 15, 255, 255, 65,535
    fmt.decode(0)
    fmt.decode(last)  # the first and the last code decode without an error
    for code in (-1, last + 1):
        with pytest.raises(InputError, match="out of range"):
            fmt.decode(code)


@pytest.mark.parametrize("name", ["fp8_e4m3fn", "fp6_e3m2", "bf16"])
def test_a_cast_of_more_than_one_chunk_equals_one_cast_of_the_whole(name: str) -> None:
    # 3 rows of CAST_CHUNK // 3 + 7 = 1,398,108: 4,194,324 elements, CAST_CHUNK (4,194,304)
    # and a last chunk of 20
    columns = CAST_CHUNK // 3 + 7
    x = torch.randn(3, columns, generator=torch.Generator().manual_seed(0)) * 64
    assert x.numel() == CAST_CHUNK + 20
    chunked = quantize_cast(x, name)
    whole = cast(x, name)  # the same rounding in one call, the second code path
    assert chunked.dequantized.shape == x.shape
    assert torch.equal(chunked.dequantized, whole.values)
    if whole.codes is None:  # bf16: 16 bits, no codes
        assert chunked.codes is None
    else:
        assert chunked.codes is not None and chunked.codes.shape == x.shape
        assert torch.equal(chunked.codes, whole.codes)


def test_mx_schemes_are_five_elements_each_with_a_floor_and_an_up_scale() -> None:
    schemes = _mx_schemes()
    elements = {"mxfp8": "fp8_e4m3fn", "mxfp8_e5m2": "fp8_e5m2", "mxfp6": "fp6_e2m3",
                "mxfp6_e3m2": "fp6_e3m2", "mxfp4": "fp4_e2m1"}
    assert [(s.name, s.kind, s.element, s.rule) for s in schemes] == [
        (name + suffix, "mx", element, rule) for name, element in elements.items()
        for suffix, rule in (("", "floor"), ("_up", "up"))]
    assert schemes[0].description == "MX fp8_e4m3fn, blocks of 32, E8M0 floor scale"
    assert schemes[1].description == "MX fp8_e4m3fn, blocks of 32, E8M0 round-up scale"
    # SCHEMES was built when the module was imported: under mutmut, before a mutant is on
    assert schemes == [s for s in SCHEMES.values() if s.kind == "mx"]


def test_error_metrics_over_more_than_one_chunk_match_numpy() -> None:
    n = METRICS_CHUNK + 5  # two chunks: 2^20 and 5 elements
    # fp32, as the quantizers give (fp64 inputs: the next test)
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    x[::7] = 0.0  # zeros: left out of the relative errors
    q = torch.round(x * 4) / 4  # |x| < 1/8 rounds to 0: an underflow
    q[-1] = x[-1] + 10.0  # the largest absolute error, in the last chunk
    x[-2], q[-2] = 1e-3, 1.0  # the largest relative error (999), in the last chunk
    got = error_metrics(x, q)
    xs, qs = x.double().numpy(), q.double().numpy()
    error = qs - xs
    nonzero = xs != 0
    relative = np.abs(error[nonzero]) / np.abs(xs[nonzero])
    assert got.elements == n
    assert got.mse == pytest.approx(float(np.sum(error**2)) / n, rel=1e-12)
    assert got.sqnr_db == pytest.approx(
        10 * math.log10(float(np.sum(xs**2)) / float(np.sum(error**2))), rel=1e-12)
    assert got.max_abs_error == float(np.abs(error).max())
    assert got.max_abs_error == pytest.approx(10.0, rel=1e-6)  # fp32's rounding of x + 10
    assert got.max_rel_error == pytest.approx(float(relative.max()), rel=1e-12)
    assert got.max_rel_error == pytest.approx(999.0, rel=1e-6)  # (1 - 0.001) / 0.001
    assert got.mean_rel_error == pytest.approx(float(relative.mean()), rel=1e-12)
    assert got.underflow_fraction == int(np.sum(nonzero & (qs == 0))) / n


def test_error_metrics_leave_fp64_inputs_as_they_were() -> None:
    """fp64 tensors on the CPU: ``.to(float64)`` of one is no copy, and the error was once
    written over the caller's ``dequantized``.  Both stay as they were, and the error of
    q = x + 0.5 is 0.5 everywhere (mse 0.25)."""
    x = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    q = x + 0.5
    before = (x.clone(), q.clone())
    got = error_metrics(x, q)
    assert torch.equal(x, before[0]) and torch.equal(q, before[1])
    assert (got.mse, got.max_abs_error) == (0.25, 0.5)


def test_error_metrics_of_an_exact_copy_and_of_a_zero_signal() -> None:
    x = torch.tensor([0.0, 1.5, -2.0])
    exact = error_metrics(x, x.clone())
    assert (exact.mse, exact.sqnr_db, exact.max_abs_error) == (0.0, math.inf, 0.0)
    assert (exact.max_rel_error, exact.mean_rel_error, exact.underflow_fraction) == (0, 0, 0)
    zero = error_metrics(torch.zeros(2), torch.tensor([0.5, 0.0]))
    assert zero.sqnr_db == -math.inf  # no signal, some error
    assert zero.mse == 0.125  # 0.5² / 2
    assert (zero.max_rel_error, zero.mean_rel_error) == (0.0, 0.0)  # no nonzero original


def test_random_normal_is_the_stream_of_torch_manual_seed() -> None:
    torch.manual_seed(3)
    assert torch.equal(random_tensor("normal", (4, 5), seed=3), torch.randn(4, 5))
    assert random_tensor("normal", (4, 5), seed=3).dtype == torch.float32


@pytest.mark.parametrize(("dist", "mean_abs", "variance"), [
    ("uniform", 0.5, 1 / 3),  # U(-1, 1): E|x| = 1/2, Var = 2²/12 = 1/3
    ("laplace", 1.0, 2.0),  # Laplace(0, 1): E|x| = b = 1, Var = 2b² = 2
])
def test_random_tensors_have_their_distributions_moments(dist: str, mean_abs: float,
                                                         variance: float) -> None:
    drawn = random_tensor(dist, (256, 256), seed=0)  # 65,536 samples
    assert drawn.dtype == torch.float32 and drawn.shape == (256, 256)
    x = drawn.double()
    # standard errors ≈ sd / 256: under 0.01 for E|x| and 0.03 for Var (Laplace's 4th moment
    # is 24, so sd(x²) = √(24 - 4) ≈ 4.5, / 256 ≈ 0.018)
    assert float(x.abs().mean()) == pytest.approx(mean_abs, abs=0.03)
    assert float(x.var()) == pytest.approx(variance, abs=0.08)
    assert abs(float(x.mean())) < 0.03  # symmetric about 0
    if dist == "uniform":
        assert float(x.min()) >= -1.0 and float(x.max()) < 1.0
    assert torch.equal(random_tensor(dist, (256, 256), seed=0).double(), x)  # seeded
    assert not torch.equal(random_tensor(dist, (256, 256), seed=1).double(), x)


@pytest.mark.parametrize(("text", "expected"), [
    ("1e999", (math.inf, True, False)),  # beyond fp64's 1.8e308: inf on reading
    ("-1e999", (-math.inf, True, False)),
    ("1e-999", (0.0, False, True)),  # below fp64's 4.9e-324: 0 on reading
    ("0.0001e-999", (0.0, False, True)),  # a nonzero digit before the exponent
    ("0e5", (0.0, False, False)),  # a true zero
    ("0.000", (0.0, False, False)),
    ("inf", (math.inf, False, False)),  # typed, not overflowed
    ("-Infinity", (-math.inf, False, False)),
    (" 2.5 ", (2.5, False, False)),
    (".5", (0.5, False, False)),
    ("5.", (5.0, False, False)),
    ("+3", (3.0, False, False)),
    ("1E5", (100000.0, False, False)),
    ("2e+3", (2000.0, False, False)),
])
def test_read_cast_input(text: str, expected: tuple[float, bool, bool]) -> None:
    assert read_cast_input(text) == expected


def test_read_cast_input_reads_nan_as_nan() -> None:
    value, overflowed, underflowed = read_cast_input("NaN")
    assert math.isnan(value) and (overflowed, underflowed) == (False, False)


@pytest.mark.parametrize("text", ["", "abc", "1e", "e5", "1.2.3", "--1", "1 2", "infinit",
                                  "nan1", "0x10"])
def test_read_cast_input_refuses_what_is_not_a_number(text: str) -> None:
    expected = "; expected a number such as 1e-8, -3.5, inf or nan, in ASCII digits"
    with pytest.raises(InputError, match=re.escape(expected) + "$"):
        read_cast_input(text)


@pytest.mark.parametrize(("value", "name", "saturate", "result", "outcome", "code"), [
    (math.nan, "fp8_e4m3fn", False, math.nan, "nan", 0x7F),  # 0.1111.111, E4M3's NaN
    (1e-8, "fp16", False, 0.0, "underflow", None),  # below half of 2^-24 ≈ 5.96e-8
    (1e6, "fp16", False, math.inf, "overflow", None),  # beyond 65,504
    (1e6, "fp16", True, 65504.0, "saturated", None),
    (1e6, "fp4_e2m1", False, 6.0, "saturated", 0b0111),  # fp4 has no inf: it clamps to 6
    (1.5, "fp4_e2m1", False, 1.5, "exact", 0b0011),  # 1.1b × 2^0: exponent field 0+1, m 1
    (1.3, "fp4_e2m1", False, 1.5, "rounded", 0b0011),  # 1.5 - 1.3 = 0.2 < 1.3 - 1 = 0.3
    (-2.0, "fp8_e4m3fn", False, -2.0, "exact", 0b1_1000_000),  # sign, 1+7 = 8, m 0: 192
    (0.0, "bf16", False, 0.0, "exact", None),  # 16 bits: no code
    (math.inf, "fp16", False, math.inf, "exact", None),  # inf was the input
])
def test_cast_scalar_outcomes(value: float, name: str, saturate: bool, result: float,
                              outcome: str, code: int | None) -> None:
    got = cast_scalar(value, name, saturate=saturate)
    assert _same(got.result, result)
    assert (got.outcome, got.code, got.format, got.saturate) == (outcome, code, name, saturate)
    fmt = resolve_format(name)
    assert (got.max_finite, got.min_positive) == (fmt.max_finite, fmt.min_positive)
    assert _same(got.value, value)


def test_cast_scalar_errors() -> None:
    rounded = cast_scalar(1.3, "fp4_e2m1")
    assert rounded.abs_error == pytest.approx(0.2, rel=1e-12)  # |1.5 - 1.3|
    assert rounded.rel_error == pytest.approx(0.2 / 1.3, rel=1e-12)
    saturated = cast_scalar(1e6, "fp16", saturate=True)
    assert saturated.abs_error == 1e6 - 65504  # 934,496
    assert saturated.rel_error == pytest.approx(0.934496, rel=1e-12)
    zero = cast_scalar(0.0, "fp8_e4m3fn")
    assert (zero.abs_error, zero.rel_error) == (0.0, None)  # no relative error of 0
    overflow = cast_scalar(1e6, "fp16")
    assert math.isnan(overflow.abs_error) and overflow.rel_error is None


@pytest.mark.parametrize(("name", "oracle", "largest"), [
    ("fp8_e4m3fn", ml_dtypes.float8_e4m3fn, 448.0),  # 1.75 × 2^8
    ("fp8_e5m2", ml_dtypes.float8_e5m2, 57344.0),  # 1.75 × 2^15
])
def test_per_tensor_scaling_matches_ml_dtypes(name: str, oracle: type, largest: float) -> None:
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(2)) * 3
    x[0, 0] = 0.0
    got = quantize_per_tensor(x, name)
    xs = x.numpy()
    # s = amax / largest, worked in fp64 and stored in fp32: amax lands on the largest value
    scale = np.float32(float(np.abs(xs).max()) / largest)
    scaled = np.abs(xs) / scale  # fp32, as the library divides
    # the amax can land a rounding above the largest value: saturation brings it back
    codes = np.minimum(scaled, np.float32(largest)).astype(oracle)
    expected = np.copysign(codes.astype(np.float32) * scale, xs)
    assert got.tensor_scale == float(scale)
    assert torch.equal(got.dequantized, torch.from_numpy(expected))
    assert got.saturated == int(np.sum(scaled > largest))
    signed = (codes.view(np.uint8) | (np.signbit(xs).astype(np.uint8) << 7))
    assert got.codes is not None and torch.equal(got.codes, torch.from_numpy(signed))
    n = 64 * 64
    assert (got.elements, got.packed_bytes) == (n, n + 4)  # a byte each and the fp32 scale
    assert got.bits_per_value == (n + 4) * 8 / n
    assert (got.scheme, got.element_format, got.scale_format) == (f"tensor_{name}", name, "fp32")


def test_per_tensor_scaling_of_zeros_uses_a_scale_of_one() -> None:
    got = quantize_per_tensor(torch.zeros(8), "fp8_e4m3fn")
    assert got.tensor_scale == 1.0 and got.saturated == 0
    assert torch.equal(got.dequantized, torch.zeros(8))


def test_a_small_cast_passes_saturation_and_the_seed_on() -> None:
    x = torch.randn(64, generator=torch.Generator().manual_seed(4)) * 1000  # beyond 448
    assert torch.equal(quantize_cast(x, "fp8_e4m3fn", saturate=True).dequantized,
                       cast(x, "fp8_e4m3fn", saturate=True).values)
    y = x / 20  # within ±448: no NaN from overflow, so torch.equal compares every element
    stochastic = quantize_cast(y, "fp8_e4m3fn", rounding="stochastic", seed=5)
    assert torch.equal(stochastic.dequantized,
                       cast(y, "fp8_e4m3fn", rounding="stochastic", seed=5).values)


def test_a_chunked_cast_saturates_and_draws_from_one_seeded_generator() -> None:
    columns = CAST_CHUNK // 3 + 7  # 3 rows: CAST_CHUNK + 20 elements, two chunks
    x = torch.randn(3, columns, generator=torch.Generator().manual_seed(6)) * 400
    saturated = quantize_cast(x, "fp8_e4m3fn", saturate=True)
    assert torch.equal(saturated.dequantized, cast(x, "fp8_e4m3fn", saturate=True).values)
    assert saturated.codes is not None and saturated.codes.dtype == torch.uint8
    y = x / 8  # σ = 50, under 6σ = 300 < 448: no NaN from overflow
    first = quantize_cast(y, "fp8_e4m3fn", rounding="stochastic", seed=7)
    again = quantize_cast(y, "fp8_e4m3fn", rounding="stochastic", seed=7)
    assert torch.equal(first.dequantized, again.dequantized)  # the seed decides every draw
    nearest = quantize_cast(y, "fp8_e4m3fn")
    assert not torch.equal(first.dequantized, nearest.dequantized)  # stochastic, not nearest
    # the last chunk's 20 elements are drawn too
    last = slice(CAST_CHUNK, None)
    drawn, rounded = first.dequantized.reshape(-1), nearest.dequantized.reshape(-1)
    assert not torch.equal(drawn[last], rounded[last])


def test_per_tensor_scaling_below_one_scales_too() -> None:
    x = torch.tensor([0.25, -0.125, 0.0])  # amax 0.25 < 1: s = 0.25 / 448
    got = quantize_per_tensor(x, "fp8_e4m3fn")
    assert got.tensor_scale == float(np.float32(0.25 / 448))
    assert got.dequantized.tolist() == [0.25, -0.125, 0.0]  # 448 and 224, both exact


def test_error_metrics_refuses_empty_tensors() -> None:
    with pytest.raises(ShapeError, match="empty"):
        error_metrics(torch.zeros(0), torch.zeros(0))


def test_cast_scalar_of_the_largest_value_is_exact() -> None:
    assert cast_scalar(448.0, "fp8_e4m3fn").outcome == "exact"  # not "saturated"
    assert cast_scalar(-6.0, "fp4_e2m1").outcome == "exact"
