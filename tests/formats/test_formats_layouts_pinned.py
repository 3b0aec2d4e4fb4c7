"""Pins for ``formats/spec.py`` and ``formats/quantize.py`` at layouts the registry lacks.

``FloatFormat`` takes any layout, and every function resolves a ``FloatFormat`` as itself, so
a 9-bit format (E5M3) and an unsigned fp4 check what the registry's formats cannot: that codes
are only made for at most 8 bits, and that an unsigned format reads no sign.  Beside them:
the bit strings and kinds of E5M2 (where exponent and mantissa widths differ by more than one),
``pow2`` at the ends of fp64's normal range and for int32 exponents, and per-tensor scaling
under a float64 default dtype.
"""

from __future__ import annotations

import math

import pytest
import torch

from tensorledger.formats import FloatFormat, cast_scalar, code_values
from tensorledger.formats.blocks import CAST_CHUNK, quantize_cast, quantize_mx, quantize_per_tensor
from tensorledger.formats.metrics import error_metrics
from tensorledger.formats.quantize import cast, pow2, round_magnitudes

E5M3 = FloatFormat("e5m3", 5, 3)  # 1 + 5 + 3 = 9 bits: bias 15, largest 1.875 · 2^15 = 61,440
UNSIGNED_E2M1 = FloatFormat("ue2m1", 2, 1, "finite", signed=False)  # 3 bits, no sign


def test_a_9_bit_format_gets_no_code_from_cast_scalar() -> None:
    got = cast_scalar(1.3, E5M3)  # spacing 2^-3 in [1, 2): 1.25 and 1.375, 1.25 nearer
    assert (got.result, got.outcome, got.code) == (1.25, "rounded", None)


def test_a_chunked_cast_to_a_9_bit_format_gives_no_codes() -> None:
    x = torch.full((CAST_CHUNK + 3,), 1.3)  # two chunks: CAST_CHUNK and 3
    got = quantize_cast(x, E5M3)
    assert got.codes is None
    assert cast(x[:4], E5M3).codes is None  # one chunk: the same
    assert bool(got.dequantized.eq(1.25).all())


def test_an_unsigned_format_reads_no_sign_bit() -> None:
    # codes 0..7: exponent field 0 (subnormals 0, 0.5), then 1.0, 1.5, 2, 3, 4, 6
    values = [UNSIGNED_E2M1.decode(code) for code in range(8)]
    assert values == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_e5m2_bit_strings_split_1_5_2() -> None:
    values = code_values("fp8_e5m2")
    # 0x7C = 0.11111.00: +inf; 0xFD = 1.11111.01: a NaN; 0x3E = 0.01111.10 = 1.5
    assert (values[0x7C].bits, values[0x7C].kind) == ("0.11111.00", "inf")
    assert (values[0xFC].bits, values[0xFC].kind) == ("1.11111.00", "inf")
    assert (values[0xFD].bits, values[0xFD].kind) == ("1.11111.01", "nan")
    assert (values[0x3E].bits, values[0x3E].value) == ("0.01111.10", 1.5)


def test_e8m0_bit_strings_are_its_eight_exponent_bits() -> None:
    values = code_values("e8m0")  # no sign, no mantissa: one field
    assert (values[127].bits, values[127].value) == ("01111111", 1.0)  # 2^(127 - 127)


def test_pow2_clamps_to_fp64s_normal_range() -> None:
    exponents = torch.tensor([-1100, -1023, -1022, 0, 1023, 1024])
    got = pow2(exponents, torch.float64)
    # biased exponent e + 1023 clamped to 1..2046: 2^-1022 at the bottom, 2^1023 at the top
    assert got.tolist() == [2.0**-1022, 2.0**-1022, 2.0**-1022, 1.0, 2.0**1023, 2.0**1023]


def test_pow2_of_int32_exponents() -> None:
    exponents = torch.tensor([3, -3, 1000], dtype=torch.int32)
    # 1000 + 1023 = 2023, shifted 52 places: beyond int32, so the shift must be in int64
    assert pow2(exponents, torch.float64).tolist() == [8.0, 0.125, 2.0**1000]


def test_pow2_into_fp32_is_fp32_down_to_its_smallest_subnormal() -> None:
    got = pow2(torch.tensor([-149, -127, 127]), torch.float32)
    assert got.dtype == torch.float32
    assert got.tolist() == [2.0**-149, 2.0**-127, 2.0**127]  # exact, by way of fp64


@pytest.mark.usefixtures("float64_default")
def test_the_per_tensor_scale_is_fp32_whatever_the_default_dtype() -> None:
    got = quantize_per_tensor(torch.tensor([0.3, -1.0], dtype=torch.float32), "fp8_e4m3fn")
    # s = 1 / 448 stored in fp32: 0.0022321429569..., not fp64's 0.0022321428571...
    assert got.tensor_scale == float(torch.tensor(1 / 448, dtype=torch.float32))
    assert got.tensor_scale != 1 / 448


def test_an_fp64_input_is_rounded_once_in_fp64() -> None:
    # 1 + 2^-4 + 2^-30: just above the tie between E4M3's 1 and 1.125 (spacing 2^-3), so it
    # rounds up; read into fp32 first, the 2^-30 would be lost and the tie go to even, 1
    x = torch.tensor([1 + 2.0**-4 + 2.0**-30], dtype=torch.float64)
    assert cast(x, "fp8_e4m3fn").values.tolist() == [1.125]


def test_a_copy_of_fp32_under_another_name_keeps_fp32_values_up_to_the_top() -> None:
    # not "fp32", so it is rounded, not copied; its top binade's spacing is 2^(127 - 23), and
    # |x| + 2^127 would overflow fp32, so the rounding must work in fp64
    copy = FloatFormat("binary32", 8, 23)
    x = torch.tensor([3e38, -3.4e38, 1.5, 1e-45])  # near the top, a plain value, a subnormal
    got = cast(x, copy).values
    assert got.dtype == torch.float32 and torch.equal(got, x)


def test_nan_into_fp4_is_code_0() -> None:
    got = cast(torch.tensor([math.nan, -math.nan]), "fp4_e2m1")
    assert got.values.tolist() == [0.0, 0.0]
    assert got.codes is not None and got.codes.tolist() == [0, 0]  # +0, whatever NaN's sign


def test_a_given_generator_wins_over_a_seed() -> None:
    x = torch.full((64,), 1.3)
    drawn = cast(x, "fp8_e4m3fn", rounding="stochastic",
                 generator=torch.Generator().manual_seed(1), seed=2)
    again = cast(x, "fp8_e4m3fn", rounding="stochastic",
                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(drawn.values, again.values)
    assert not torch.equal(drawn.values, cast(x, "fp8_e4m3fn", rounding="stochastic",
                                               seed=2).values)


def test_stochastic_bf16_draws_fp64_uniforms_from_the_seed() -> None:
    # bf16 rounds in fp64 (its spacing at the top needs it); 1 + 2^-9 lies a quarter of the
    # way from 1 to 1 + 2^-7, so it rounds up where the uniform u >= 3/4
    x = torch.full((256,), 1 + 2.0**-9)
    got = cast(x, "bf16", rounding="stochastic", seed=3)
    u = torch.rand(256, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    want = torch.where(u >= 0.75, 1 + 2.0**-7, 1.0).float()
    assert torch.equal(got.values, want)
    assert got.codes is None  # 16 bits: no codes, drawn or not


def test_cast_results_say_what_they_are() -> None:
    x = torch.tensor([1.5, -0.25], dtype=torch.float16)
    for name, bits in (("fp32", 32), ("bf16", 16), ("fp8_e4m3fn", 8)):
        got = cast(x, name, saturate=True, rounding="stochastic", seed=0)
        assert (got.format, got.saturate, got.rounding) == (name, True, "stochastic")
        assert got.values.dtype == torch.float32  # fp16 in, fp32 out
        assert got.values.tolist() == [1.5, -0.25]  # both exact in every one of them
        assert (got.codes is None) == (bits > 8)
    codes = cast(x, "fp8_e4m3fn").codes
    # 1.5 = 0.0111.100 = 0x3C; -0.25 = 1.0101.000 = 0xA8
    assert codes is not None and codes.dtype == torch.uint8 and codes.tolist() == [0x3C, 0xA8]


def test_fp64_is_kept_as_it_is_up_to_its_largest_value() -> None:
    x = torch.tensor([1.7e308, -5e-324, 1.0], dtype=torch.float64)
    got = cast(x, "fp64").values
    assert got.dtype == torch.float64 and torch.equal(got, x)


def test_round_magnitudes_rounds_to_nearest_unless_told() -> None:
    fmt = FloatFormat("fp8_e4m3fn", 4, 3, "fn")
    rounded, codes = round_magnitudes(torch.tensor([1.3, 17.0]), fmt, saturate=False)
    # 1.3: spacing 1/8, 1.25 nearer; 17: spacing 2, a tie between 16 and 18, to even 16
    assert rounded.tolist() == [1.25, 16.0]
    assert codes is not None and codes.tolist() == [0x3A, 0x58]  # 0.0111.010, 0.1011.000


def test_tf32_keeps_its_smallest_normal_in_a_tensor_cast() -> None:
    x = torch.tensor([2.0**-126, 2.0**-127])  # tf32 flushes subnormals, not its smallest normal
    assert cast(x, "tf32").values.tolist() == [2.0**-126, 0.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA tensor")
def test_a_gpu_tensor_is_quantized_and_compared_on_the_cpu() -> None:
    x = torch.randn(64, generator=torch.Generator().manual_seed(17))
    on_gpu = x.cuda()
    assert quantize_mx(on_gpu).dequantized.device.type == "cpu"
    assert torch.equal(cast(on_gpu, "fp8_e4m3fn").values, cast(x, "fp8_e4m3fn").values)
    q = torch.round(x * 4) / 4
    # the metrics read each chunk onto the CPU: the same sums, in the same order
    assert error_metrics(on_gpu, q.cuda()) == error_metrics(x, q)


class _Elsewhere(torch.Tensor):
    """A stand-in for a tensor on an accelerator, where this machine has none: it can be looked
    at (shape, dtype), viewed, sliced and moved, but it stays "elsewhere" unless moved to the
    CPU by name, and any arithmetic on it raises, as arithmetic mixing a CUDA tensor with a CPU
    one does.  So a function that forgets to bring a tensor to the CPU fails here too."""

    _LOOKS_AND_VIEWS = frozenset({
        torch.Tensor.detach, torch.Tensor.reshape, torch.Tensor.__getitem__,
        torch.Tensor.numel, torch.Tensor.is_floating_point, torch.Tensor.dim,
        torch.Tensor.shape.__get__, torch.Tensor.dtype.__get__,  # type: ignore[attr-defined]
        torch.Tensor.ndim.__get__,  # type: ignore[attr-defined]
    })

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is torch.Tensor.to:
            named = [*args[1:], kwargs.get("device")]
            to_cpu = any(isinstance(a, (str, torch.device)) and torch.device(a).type == "cpu"
                         for a in named)
            with torch._C.DisableTorchFunctionSubclass():
                moved = func(*args, **kwargs)
            # (``to`` hands back ``self`` when nothing changes: the type is set either way)
            return moved.as_subclass(torch.Tensor if to_cpu else cls)
        if func in cls._LOOKS_AND_VIEWS:
            return super().__torch_function__(func, types, args, kwargs)
        raise RuntimeError(f"{getattr(func, '__name__', func)} on a tensor that is not on the CPU")


def _elsewhere(x: torch.Tensor) -> torch.Tensor:
    return x.clone().as_subclass(_Elsewhere)


def test_the_device_stand_in_refuses_arithmetic_until_moved_to_the_cpu() -> None:
    away = _elsewhere(torch.ones(4))
    with pytest.raises(RuntimeError, match="not on the CPU"):
        away + 1
    with pytest.raises(RuntimeError, match="not on the CPU"):
        away.to(torch.float64) + 1  # a dtype alone keeps it where it is
    assert type(away.to("cpu", torch.float64)) is torch.Tensor
    assert type(away[1:3].to(device=torch.device("cpu"))) is torch.Tensor


def test_a_tensor_elsewhere_is_quantized_cast_and_compared_on_the_cpu() -> None:
    # what the CUDA test above checks, on a stand-in device: every path reads its input onto
    # the CPU by name first (``.to("cpu", ...)``), so the results are plain CPU tensors equal
    # to those of the same values on the CPU
    x = torch.randn(64, generator=torch.Generator().manual_seed(17))
    mx = quantize_mx(_elsewhere(x)).dequantized
    assert type(mx) is torch.Tensor and torch.equal(mx, quantize_mx(x).dequantized)
    for fmt in ("fp8_e4m3fn", "fp32"):  # fp32 returns the moved source itself, unrounded
        got = cast(_elsewhere(x), fmt).values
        assert type(got) is torch.Tensor and torch.equal(got, cast(x, fmt).values)
    q = torch.round(x * 4) / 4
    q[0] = 0.0  # one element underflowed to zero: the count reads the CPU copy too
    assert error_metrics(_elsewhere(x), _elsewhere(q)) == error_metrics(x, q)
