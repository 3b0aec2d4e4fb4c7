"""Element casts in torch: round-to-nearest-even or stochastic, saturating or not, any shape.

The rounding adds and subtracts a per-element power of two ``C = 2^(k + P)``, where ``2^k`` is the
spacing of the target format at that magnitude and ``P`` the mantissa width of the working float:
``|x| + C`` lands in a binade whose spacing is exactly ``2^k``, so the hardware's own correctly
rounded addition does the round-to-nearest-even, and the bits of ``|x| + C`` hold the rounded
significand, from which the code follows without a table.  Everything else is in-place integer
and float arithmetic over the tensor, a few passes in all.

Defaults follow IEEE 754 and ml_dtypes: ``saturate=False``, so overflow gives inf where the
format has it and NaN where it does not (fp6 and fp4 hold neither and clamp to their largest
value).  ``saturate=True`` clamps overflow and infinities to ± the largest finite value, which is
what torch's cast to ``float8_e4m3fn`` does and what MX and NVFP4 quantization require.

>>> import torch
>>> cast(torch.tensor([17.0, 19.0, 500.0]), "fp8_e4m3fn").values.tolist()
[16.0, 20.0, nan]
>>> r = cast(torch.tensor([17.0, 19.0, 500.0]), "fp8_e4m3fn", saturate=True)
>>> r.values.tolist(), r.codes.tolist()
([16.0, 20.0, 448.0], [88, 90, 126])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from tensorledger.errors import InputError
from tensorledger.formats.spec import FloatFormat, resolve_format

__all__ = ["CastResult", "Rounding", "cast", "pow2", "round_magnitudes"]

Rounding = Literal["nearest", "stochastic"]

# Working float dtype -> (its integer view, mantissa bits P, exponent bias B).
_WORK: dict[torch.dtype, tuple[torch.dtype, int, int]] = {
    torch.float32: (torch.int32, 23, 127),
    torch.float64: (torch.int64, 52, 1023),
}


@dataclass(frozen=True)
class CastResult:
    """A cast tensor: its values (fp32, or fp64 for fp64 input) and, for formats of at most
    8 bits, the uint8 code of each element."""

    format: str
    values: torch.Tensor
    codes: torch.Tensor | None
    saturate: bool
    rounding: Rounding


def pow2(exponent: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``2.0 ** exponent`` built from the bits, exact for every normal power of ``dtype``, and
    for the subnormal powers of fp32 (down to 2^-149) by way of fp64."""
    if dtype == torch.float32:
        return pow2(exponent, torch.float64).to(torch.float32)
    biased = (exponent.to(torch.int64) + 1023).clamp_(1, 2046)
    return biased.bitwise_left_shift_(52).view(torch.float64)


def _working_dtype(dtype: torch.dtype, fmt: FloatFormat) -> torch.dtype:
    if dtype == torch.float64:
        return torch.float64
    # C = 2^(k + 23) must stay a finite fp32 number for the largest spacing k of the format.
    if fmt.max_exponent + 1 - fmt.mantissa_bits + 23 <= 127:
        return torch.float32
    return torch.float64


def round_magnitudes(magnitudes: torch.Tensor, fmt: FloatFormat, *, saturate: bool,
                     rounding: Rounding = "nearest", generator: torch.Generator | None = None,
                     want_codes: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Round non-negative magnitudes (fp32 or fp64, overwritten in place) to ``fmt``.

    Returns the rounded magnitudes and the unsigned code of each (integer tensor), with the
    overflow, NaN and sign rules left to the caller: values above the largest finite one come
    back as the next power of two or more, and their codes are meaningless.
    """
    int_dtype, mantissa_w, bias_w = _WORK[magnitudes.dtype]
    m_bits = fmt.mantissa_bits
    a = magnitudes
    if saturate:
        a.clamp_(max=fmt.max_finite)
    if not fmt.has_zero:
        a.clamp_(min=fmt.min_normal)
    if not fmt.subnormals:
        a.masked_fill_(a < fmt.min_normal, 0.0)
    # Exponent of the binade that sets the spacing, clamped to the format's normal range
    # (subnormals share the spacing of the lowest binade; one binade above the top lets
    # overflow show).
    big_bits = torch.bitwise_right_shift(a.view(int_dtype), mantissa_w)
    big_bits.clamp_(fmt.min_exponent + bias_w, fmt.max_exponent + 1 + bias_w)
    big_bits.add_(mantissa_w - m_bits).bitwise_left_shift_(mantissa_w)
    big = big_bits.view(a.dtype)  # C = 2^(e - M + P): |x| + C has spacing 2^(e - M)
    if rounding == "stochastic":
        spacing = big * math.ldexp(1.0, -mantissa_w)
        steps = a.div_(spacing)
        steps.add_(torch.rand(steps.shape, generator=generator, dtype=steps.dtype)).floor_()
        significand = steps.to(int_dtype) if want_codes else None
        result = steps.mul_(spacing)
    elif rounding == "nearest":
        a.add_(big)  # the addition rounds to nearest, ties to even
        significand = torch.sub(a.view(int_dtype), big_bits) if want_codes else None
        result = a.sub_(big)
    else:
        raise InputError(f"unknown rounding {rounding!r}; known: nearest, stochastic")
    if significand is None:
        return result, None
    # code = (e + bias - 1)·2^M + significand holds for normals, subnormals and the carry into
    # the next binade alike; big_bits >> (P - M) is (e - M + P + B)·2^M.
    offset = (fmt.bias - 1 + m_bits - mantissa_w - bias_w) << m_bits
    significand.add_(big_bits.bitwise_right_shift_(mantissa_w - m_bits)).add_(offset)
    return result, significand


def _max_code(fmt: FloatFormat) -> int:
    return ((fmt.max_exponent + fmt.bias) << fmt.mantissa_bits) | fmt.max_mantissa


def _special_codes(fmt: FloatFormat) -> tuple[int, int]:
    """(code magnitude of an overflow without saturation, code magnitude of NaN)."""
    top = (2**fmt.exponent_bits - 1) << fmt.mantissa_bits
    if fmt.specials == "ieee":
        return top, top | (1 << (fmt.mantissa_bits - 1))  # inf; quiet NaN
    if fmt.specials in ("fn", "e8m0"):
        all_ones = 2 ** (fmt.exponent_bits + fmt.mantissa_bits) - 1
        return all_ones, all_ones
    if fmt.specials == "fnuz":
        nan = 1 << (fmt.exponent_bits + fmt.mantissa_bits)  # 1000…0, set with the sign bit
        return nan, nan
    return _max_code(fmt), 0  # finite: clamp, and NaN becomes +0


def cast(x: torch.Tensor, fmt: str | FloatFormat, *, saturate: bool = False,
         rounding: Rounding = "nearest", generator: torch.Generator | None = None,
         seed: int | None = None) -> CastResult:
    """Round every element of ``x`` to ``fmt``.

    ``rounding="stochastic"`` rounds up with probability equal to the distance from the value
    below, divided by the spacing (unbiased in expectation); give ``seed`` or a ``generator``
    for reproducible draws.  NaN into fp6 or fp4, which hold none, gives +0.
    """
    resolved = resolve_format(fmt)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise InputError(f"cast needs a floating-point tensor, got {type(x).__name__} "
                         f"{getattr(x, 'dtype', '')}".strip())
    if rounding == "stochastic" and generator is None and seed is not None:
        generator = torch.Generator().manual_seed(seed)
    out_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    source = x.detach().to("cpu", out_dtype)
    if resolved.name == "fp64" or (resolved.name == "fp32" and out_dtype == torch.float32):
        return CastResult(resolved.name, source.clone(), None, saturate, rounding)
    work = _working_dtype(out_dtype, resolved)
    want_codes = resolved.layout_bits <= 8
    magnitudes, code = round_magnitudes(source.to(work).abs(), resolved, saturate=saturate,
                                        rounding=rounding, generator=generator,
                                        want_codes=want_codes)
    nan_input = torch.isnan(source)
    has_nan_input = bool(nan_input.any())
    overflow = None
    if not saturate:
        overflow = magnitudes > resolved.max_finite
        if resolved.specials == "finite":
            magnitudes.clamp_(max=resolved.max_finite)
        else:
            magnitudes.masked_fill_(overflow, math.inf if resolved.has_inf else math.nan)
    values = magnitudes.to(out_dtype)
    if resolved.signed:
        values.copysign_(source)
    if resolved.specials == "finite" and has_nan_input:
        values.masked_fill_(nan_input, 0.0)
    elif resolved.specials == "e8m0":
        values.masked_fill_(~(source > 0), math.nan)
    if not resolved.has_negative_zero:
        values.add_(0.0)  # -0 + 0 is +0 under round-to-nearest
    if code is None:
        return CastResult(resolved.name, values, None, saturate, rounding)
    overflow_code, nan_code = _special_codes(resolved)
    codes = code.to(torch.uint8)  # one byte per element from here on
    if overflow is not None:
        codes.masked_fill_(overflow, overflow_code)
    if has_nan_input:
        codes.masked_fill_(nan_input, nan_code)
    if resolved.specials == "e8m0":
        codes.masked_fill_(~(source > 0), nan_code)
    if resolved.signed:
        sign = torch.signbit(source)
        if resolved.specials == "fnuz":  # no -0; the NaN code already carries the sign bit
            sign &= (codes != 0) & (codes != nan_code)
        elif resolved.specials == "finite" and has_nan_input:
            sign &= ~nan_input
        sign_bits = sign.view(torch.uint8)  # a bool is one byte
        codes.bitwise_or_(sign_bits.bitwise_left_shift_(resolved.exponent_bits
                                                        + resolved.mantissa_bits))
    return CastResult(resolved.name, values, codes, saturate, rounding)
