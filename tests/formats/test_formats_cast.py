"""Vectorised casts, bit for bit against ml_dtypes (non-saturating) and torch (float8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from formats_oracles import ORACLES

from tensorledger.errors import InputError
from tensorledger.formats import FloatFormat, finite_values, resolve_format, round_to_format
from tensorledger.formats.quantize import cast, pow2

SPECIALS = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-45, -1e-45, 3.4e38],
                    dtype=np.float32)
SPECIALS[3] = np.copysign(np.float32(np.nan), np.float32(-1.0))  # a NaN with its sign bit set


def hard_values(name: str, count: int = 1_000_000, seed: int = 0) -> np.ndarray:
    """At least ``count`` fp32 values that test a cast to ``name``: normal, log-uniform over
    the whole range and beyond, exact ties, subnormals, overflow, random bit patterns, specials."""
    fmt = resolve_format(name)
    rng = np.random.default_rng(seed)
    part = count // 6
    signs = rng.choice(np.array([-1.0, 1.0]), part)
    low, high = math.log2(fmt.min_positive) - 4, math.log2(fmt.max_finite) + 2
    if fmt.layout_bits <= 8:
        values = np.array(finite_values(name))
        ties = (values[1:] + values[:-1]) / 2
    else:  # halfway between 2^k·(1 + j/2^M) and its upper neighbour
        k = rng.integers(max(fmt.min_exponent, -126), min(fmt.max_exponent, 127), part)
        j = rng.integers(0, 2**fmt.mantissa_bits, part)
        ties = signs * np.ldexp(1.0 + (j + 0.5) / 2**fmt.mantissa_bits, k)
    with np.errstate(all="ignore"):  # fp32 overflows to inf past 3.4e38, on purpose
        return _concatenate(rng, fmt, part, count, signs, low, high, ties)


def _concatenate(rng: np.random.Generator, fmt: FloatFormat, part: int, count: int,
                 signs: np.ndarray, low: float, high: float, ties: np.ndarray) -> np.ndarray:
    return np.concatenate([
        rng.standard_normal(part) * fmt.max_finite / 8,
        signs * np.exp2(rng.uniform(low, high, part)),
        np.resize(ties, part),
        signs * rng.uniform(0, fmt.min_normal, part),
        signs * rng.uniform(fmt.max_finite, 4 * fmt.max_finite, part),
        rng.integers(0, 2**32, count - 5 * part, dtype=np.uint64).astype(np.uint32)
        .view(np.float32),
        SPECIALS,
    ]).astype(np.float32)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_cast_matches_ml_dtypes_bit_for_bit(name: str) -> None:
    x = hard_values(name)
    with np.errstate(all="ignore"):
        oracle = x.astype(ORACLES[name])
    ours = cast(torch.from_numpy(x), name)
    defined = np.ones(x.shape, dtype=bool)
    fmt = resolve_format(name)
    if not fmt.has_nan:
        # NaN into a format without NaN is undefined: ml_dtypes gives a zero of the opposite
        # sign, we give +0.  Both are zero.
        defined = ~np.isnan(x)
        assert np.all(ours.values.numpy()[~defined] == 0)
    if name == "e8m0":
        # ml_dtypes rounds everything in (2^-127, 2^-126) up to 2^-126; nearest-even sends the
        # lower half of that binade down to 2^-127.
        defined &= ~((x > 2.0**-127) & (x < 2.0**-126))
    assert defined.sum() >= 1_000_000 * 0.95
    assert ours.codes is not None
    np.testing.assert_array_equal(ours.codes.numpy()[defined], oracle.view(np.uint8)[defined])
    with np.errstate(all="ignore"):
        expected = oracle.astype(np.float32)
    # The codes are the stored bits; a decoded NaN's fp32 payload means nothing, so values are
    # compared bit for bit where they are numbers and as NaN where they are not.
    values = ours.values.numpy()
    np.testing.assert_array_equal(np.isnan(values[defined]), np.isnan(expected[defined]))
    number = defined & ~np.isnan(expected)
    np.testing.assert_array_equal(values[number].view(np.uint32), expected[number].view(np.uint32))


TORCH_FLOAT8 = {
    # torch 2.13 CPU saturates casts to e4m3fn (inf too) and not the others.
    "fp8_e4m3fn": (torch.float8_e4m3fn, True),
    "fp8_e5m2": (torch.float8_e5m2, False),
    "fp8_e4m3fnuz": (torch.float8_e4m3fnuz, False),
    "fp8_e5m2fnuz": (torch.float8_e5m2fnuz, False),
}


@pytest.mark.parametrize("name", sorted(TORCH_FLOAT8))
def test_cast_matches_torch_float8(name: str) -> None:
    dtype, saturating = TORCH_FLOAT8[name]
    x = torch.from_numpy(hard_values(name, seed=1))
    reference = x.to(dtype)
    ours = cast(x, name, saturate=saturating)
    nan = reference.float().isnan()
    # Which NaN code a NaN becomes is torch's own choice (e5m2: 0x7F; ml_dtypes and we: 0x7E).
    assert torch.equal(ours.values.isnan(), nan)
    assert ours.codes is not None
    assert torch.equal(ours.codes[~nan], reference.view(torch.uint8)[~nan])


@pytest.mark.parametrize(("name", "dtype"), [("bf16", torch.bfloat16),
                                             ("fp16", torch.float16)])
def test_cast_to_16_bits_matches_torch(name: str, dtype: torch.dtype) -> None:
    x = torch.from_numpy(hard_values(name, seed=2))
    ours = cast(x, name).values
    reference = x.to(dtype).float()
    assert torch.equal(ours.isnan(), reference.isnan())
    keep = ~reference.isnan()
    assert torch.equal(ours[keep].view(torch.int32), reference[keep].view(torch.int32))
    assert cast(x, name).codes is None  # wider than a byte: values only


def test_cast_fp64_to_fp32_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.integers(0, 2**64, 500_000, dtype=np.uint64).view(np.float64),
                        rng.standard_normal(500_000) * 2.0**-140])
    with np.errstate(all="ignore"):
        expected = x.astype(np.float32).astype(np.float64)
    ours = cast(torch.from_numpy(x), "fp32").values.numpy()
    assert ours.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    keep = ~np.isnan(expected)
    np.testing.assert_array_equal(ours[keep].view(np.uint64), expected[keep].view(np.uint64))


def test_tf32_rounds_the_mantissa_to_ten_bits() -> None:
    """Second code path: round-to-nearest-even on the fp32 bits, dropping 13 of them."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(200_000) * np.exp2(rng.uniform(-100, 100, 200_000)))
    x = x.astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    expected = rounded.astype(np.uint32).view(np.float32)
    ours = cast(torch.from_numpy(x), "tf32").values.numpy()
    np.testing.assert_array_equal(ours, expected)
    assert cast(torch.tensor([1e-39]), "tf32").values.item() == 0.0  # below 2^-126: flushed


def test_vectorised_cast_agrees_with_scalar_rounding() -> None:
    rng = np.random.default_rng(5)
    x = np.exp2(rng.uniform(-30, 20, 300)) * rng.choice([-1.0, 1.0], 300)
    x = np.concatenate([x, [0.0, -0.0, math.inf, -math.inf, 1e-8, 17.00001]])
    for name in ("fp16", "bf16", "tf32", "fp8_e4m3fn", "fp8_e5m2fnuz", "fp6_e3m2", "fp4_e2m1",
                 "e8m0"):
        for saturate in (False, True):
            ours = cast(torch.from_numpy(x), name, saturate=saturate).values.tolist()
            scalar = [round_to_format(v, name, saturate=saturate) for v in x.tolist()]
            assert np.array_equal(np.array(ours), np.array(scalar), equal_nan=True), name


def test_saturating_cast_clamps_overflow_and_inf() -> None:
    x = torch.tensor([1e9, -math.inf, 470.0, 57345.0])
    assert cast(x, "fp8_e4m3fn", saturate=True).values.tolist() == [448.0, -448.0, 448.0, 448.0]
    e5m2 = cast(x, "fp8_e5m2").values.tolist()
    assert e5m2 == [math.inf, -math.inf, 448.0, 57344.0]


def test_cast_keeps_shape_and_handles_any_rank() -> None:
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    result = cast(x, "fp4_e2m1")
    assert result.values.shape == x.shape
    assert result.codes is not None and result.codes.shape == x.shape
    scalar = cast(torch.tensor(2.6), "fp4_e2m1")
    assert scalar.values.item() == 3.0 and scalar.values.shape == ()


def test_cast_rejects_integer_tensors() -> None:
    with pytest.raises(InputError, match="floating-point"):
        cast(torch.arange(4), "fp16")


def test_stochastic_rounding_is_unbiased_and_reproducible() -> None:
    x = torch.full((200_000,), 1.1)  # between e2m1's 1.0 and 1.5: rounds up 20% of the time
    first = cast(x, "fp4_e2m1", rounding="stochastic", seed=7).values
    again = cast(x, "fp4_e2m1", rounding="stochastic", seed=7).values
    assert torch.equal(first, again)
    assert set(first.unique().tolist()) == {1.0, 1.5}
    # E[x̂] = 1.0 + 0.5·0.2 = 1.1; the standard error of the mean is 0.5·0.4/√200000 ≈ 4.5e-4
    assert abs(first.double().mean().item() - 1.1) < 3e-3
    up = cast(x, "fp4_e2m1", rounding="stochastic", seed=7).codes
    assert up is not None and set(up.unique().tolist()) == {2, 3}  # codes of 1.0 and 1.5
    exact = torch.tensor([0.5, 1.5, 6.0, -3.0])
    assert torch.equal(cast(exact, "fp4_e2m1", rounding="stochastic", seed=1).values, exact)


def test_pow2_is_exact_across_fp32_range() -> None:
    exponents = torch.arange(-149, 128)
    expected = [math.ldexp(1.0, int(k)) for k in exponents]
    assert pow2(exponents, torch.float32).double().tolist() == expected
