"""Hypothesis properties of casts and block quantizers, checked against ml_dtypes and by
the torch-free scalar rounding (a second code path)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorledger.formats import cast, quantize_scheme, round_to_format

ML_DTYPES = {"fp8_e4m3fn": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
             "fp6_e2m3": ml_dtypes.float6_e2m3fn, "fp6_e3m2": ml_dtypes.float6_e3m2fn,
             "fp4_e2m1": ml_dtypes.float4_e2m1fn, "bf16": ml_dtypes.bfloat16,
             "fp16": np.float16}

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_subnormal=True,
                   width=32)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=64), st.sampled_from(sorted(ML_DTYPES)))
def test_cast_agrees_with_ml_dtypes_and_the_scalar_path(values: list[float], fmt: str) -> None:
    x = torch.tensor(values, dtype=torch.float32)
    ours = cast(x, fmt).values.tolist()
    with np.errstate(over="ignore"):  # overflow to inf is part of what is compared
        oracle = np.array(values, dtype=np.float32).astype(ML_DTYPES[fmt]).astype(np.float64)
    scalar = [round_to_format(v, fmt) for v in np.array(values, dtype=np.float32).tolist()]
    for a, b, c in zip(ours, oracle.tolist(), scalar, strict=True):
        assert (math.isnan(a) and math.isnan(b)) or a == b, (a, b)
        assert (math.isnan(a) and math.isnan(c)) or a == c, (a, c)


@settings(max_examples=100, deadline=None)
@given(st.lists(finite, min_size=2, max_size=64), st.sampled_from(sorted(ML_DTYPES)))
def test_cast_is_monotonic_and_idempotent(values: list[float], fmt: str) -> None:
    x = torch.tensor(sorted(values), dtype=torch.float32)
    once = cast(x, fmt, saturate=True).values
    assert bool((once[1:] >= once[:-1]).all())  # rounding never reorders values
    assert torch.equal(cast(once, fmt, saturate=True).values, once)  # values stay put


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=8), st.integers(min_value=0, max_value=31),
       st.integers(min_value=0, max_value=2**31 - 1),
       st.sampled_from(["nvfp4", "mxfp4", "mxfp8", "fp8"]))
def test_block_quantizers_never_grow_a_block_and_keep_zeros(blocks: int, short: int, seed: int,
                                                            scheme: str) -> None:
    # rows `short` values short of whole blocks of 32: the last block of each row is padded
    # inside the quantizer, and the padding must not come back out
    generator = torch.Generator().manual_seed(seed)
    length = 32 * blocks - short
    x = torch.randn(4, length, generator=generator)
    x[:, :3] = 0.0
    result = quantize_scheme(x, scheme)
    assert result.dequantized.shape == x.shape
    assert result.elements == 4 * length
    if result.block_shape:  # one scale per (padded) block, never a block more
        (block,) = result.block_shape
        assert result.scales is not None
        assert tuple(result.scales.shape) == (4, math.ceil(length / block))
    assert bool((result.dequantized[:, :3] == 0).all())  # zero is exact in every format
    # no value comes back with the other sign
    assert bool((result.dequantized * x >= 0).all())


def test_comparison_best_is_the_highest_sqnr() -> None:
    from tensorledger.formats import compare_schemes

    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    comparison = compare_schemes(x, ["nvfp4", "mxfp4", "mxfp8"])
    by_hand = sorted(comparison.results, key=lambda r: -r.error.sqnr_db)[0]
    assert comparison.best is by_hand
    assert comparison.best.scheme == "mxfp8"  # 8-bit elements beat 4-bit ones
