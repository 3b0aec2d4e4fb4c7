"""Pins for ``formats/blocks.py`` and the scheme comparison of ``formats/metrics.py``.

Packing at its edges (1 and 8 bits, codes wider than their field), the E8M0 exponent's clamp
and dtype, MX blocks holding inf or NaN beside finite ones (in a 2-D tensor, so a block index
and a row index differ), every field of an MX result, a plain cast's defaults and saturation
count, and ``compare_schemes`` passing axis, rounding and seed to each scheme, each with a
small tensor (at most a few hundred elements).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tensorledger.errors import InputError, ShapeError
from tensorledger.formats import FloatFormat, resolve_format
from tensorledger.formats.blocks import (
    SCHEMES,
    Scheme,
    mx_scale_exponents,
    pack_codes,
    quantize_cast,
    quantize_mx,
    quantize_nvfp4,
    quantize_per_tensor,
    quantize_scheme,
    resolve_scheme,
    unpack_codes,
)
from tensorledger.formats.metrics import (
    WORKING_MULTIPLE,
    compare_schemes,
    error_metrics,
    quantize_memory_bytes,
)
from tensorledger.formats.quantize import cast

E5M3 = FloatFormat("e5m3", 5, 3)  # 1 + 5 + 3 = 9 bits


def test_one_bit_codes_pack_eight_to_a_byte() -> None:
    codes = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1], dtype=torch.uint8)
    # little end first: bits 0, 2 and 3 set in the first byte: 1 + 4 + 8 = 13; then the ninth
    packed = pack_codes(codes, 1)
    assert packed.tolist() == [13, 1]
    assert torch.equal(unpack_codes(packed, 1, 9), codes)


@pytest.mark.parametrize("bits", [0, 9])
def test_codes_of_no_bits_or_of_more_than_8_are_refused(bits: int) -> None:
    with pytest.raises(InputError, match=f"cannot pack {bits}-bit codes; expected 1 to 8"):
        pack_codes(torch.zeros(4, dtype=torch.uint8), bits)


def test_packing_keeps_only_each_codes_own_bits() -> None:
    # 4-bit fields: 0x1F keeps 0xF and 0xF2 keeps 0x2; the byte is 0x2F = 47, not a carry of
    # the fifth bit into the next code
    assert pack_codes(torch.tensor([0x1F, 0xF2], dtype=torch.uint8), 4).tolist() == [0x2F]


@pytest.mark.parametrize("bits", [4, 8])
def test_packed_and_unpacked_codes_are_bytes_whatever_came_in(bits: int) -> None:
    codes = torch.tensor([3, 12, 7], dtype=torch.int64)  # int64 codes, each within 4 bits
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.uint8
    # 4 bits: 3 | 12 << 4 = 195, then 7; 8 bits: one byte each
    assert packed.tolist() == ([195, 7] if bits == 4 else [3, 12, 7])
    unpacked = unpack_codes(packed, bits, 3)
    assert unpacked.dtype == torch.uint8 and unpacked.tolist() == [3, 12, 7]


def test_scale_exponents_are_int64_and_clamped_to_e8m0() -> None:
    e4m3 = resolve_format("fp8_e4m3fn")  # largest 448: emax 8
    amax = torch.tensor([1e300, 1e-300, 2.0**-119, 2.0**-120], dtype=torch.float64)
    got = mx_scale_exponents(amax, e4m3)
    assert got.dtype == torch.int64
    # 1e300 ≈ 2^996.6: 996 - 8 = 988 → 127; 1e-300: -997 - 8 → -127;
    # 2^-119 - 8 = -127 exactly, 2^-120 - 8 = -128 → -127
    assert got.tolist() == [127, -127, -127, -127]
    assert mx_scale_exponents(amax.float()[2:], e4m3).dtype == torch.int64  # fp32 amax too
    assert mx_scale_exponents(amax, e4m3, "up").tolist() == [127, -127, -127, -127]


def test_mx_refuses_an_element_format_of_more_than_8_bits() -> None:
    wide = FloatFormat("e5m3", 5, 3)  # 1 + 5 + 3 = 9 bits: no uint8 code holds it
    with pytest.raises(InputError, match="e5m3 is not an MX element format"):
        quantize_mx(torch.ones(32), wide)


def test_mx_blocks_with_inf_or_nan_decode_to_nan_and_leave_the_others_alone() -> None:
    # 3 rows × 64 columns: 2 blocks of 32 per row (rows ≠ blocks)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(8)) * 4
    x[1, 40], x[1, 41] = math.inf, -3e38  # row 1, block 1: an inf beside a large finite value
    x[2, 3] = math.nan  # row 2, block 0
    bad = torch.zeros(3, 2, dtype=torch.bool)
    bad[1, 1] = bad[2, 0] = True
    q = quantize_mx(x, "fp8_e4m3fn")
    # the same tensor with the two blocks zeroed: every other block is quantized alone
    clean = x.clone().reshape(3, 2, 32)
    clean[bad] = 0.0
    reference = quantize_mx(clean.reshape(3, 64), "fp8_e4m3fn")
    got = q.dequantized.reshape(3, 2, 32)
    assert got[bad].isnan().all()  # -3e38 too: the block's scale is NaN
    assert torch.equal(got[~bad], reference.dequantized.reshape(3, 2, 32)[~bad])
    assert q.scales is not None and q.scale_codes is not None and q.codes is not None
    assert q.scales[bad].isnan().all() and not q.scales[~bad].isnan().any()
    assert q.scale_codes[bad].tolist() == [255, 255]  # E8M0's NaN
    # the elements of a NaN block are rounded as zeros: only their sign bits are set
    assert (q.codes[bad] & 0x7F).eq(0).all()
    assert q.saturated == reference.saturated  # no inf counted as clipped


def test_every_field_of_an_mx_result() -> None:
    x = torch.linspace(-3.0, 5.0, 64)  # two blocks of 32
    q = quantize_mx(x, "fp4_e2m1")
    assert (q.scheme, q.element_format, q.block_shape, q.scale_format) == (
        "mx_fp4_e2m1_floor", "fp4_e2m1", (32,), "e8m0")
    assert q.scales is not None and q.scale_codes is not None and q.codes is not None
    # block 0 ends near 0.81, amax 3: floor(log2 3) - 2 = -1; block 1 amax 5: 2 - 2 = 0
    assert q.scales.dtype == torch.float32 and q.scales.tolist() == [0.5, 1.0]
    assert q.scale_codes.dtype == torch.uint8 and q.scale_codes.tolist() == [126, 127]
    assert q.codes.shape == (2, 32) and q.codes.dtype == torch.uint8
    assert (q.tensor_scale, q.elements) == (None, 64)
    # 64 codes of 4 bits = 32 bytes, one E8M0 byte per block: 34 bytes, 34 · 8 / 64 = 4.25
    assert (q.packed_bytes, q.bits_per_value) == (34, 4.25)


def test_mx_stochastic_rounding_draws_from_the_seed() -> None:
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(9))
    first = quantize_mx(x, "fp4_e2m1", rounding="stochastic", seed=11).dequantized
    assert torch.equal(first, quantize_mx(x, "fp4_e2m1", rounding="stochastic",
                                          seed=11).dequantized)
    assert not torch.equal(first, quantize_mx(x, "fp4_e2m1", rounding="stochastic",
                                              seed=12).dequantized)


def test_a_plain_cast_does_not_saturate_unless_asked_and_counts_what_overflows() -> None:
    x = torch.tensor([448.0, 449.0, -1000.0, 1.0])  # E4M3's largest is 448
    q = quantize_cast(x, "fp8_e4m3fn")
    assert (q.scheme, q.element_format, q.block_shape, q.scale_format) == (
        "fp8_e4m3fn", "fp8_e4m3fn", (), None)
    # 449 rounds to 448 (spacing 32 there) but lies beyond it: counted; 448 itself is not
    assert q.saturated == 2
    assert q.dequantized[:2].tolist() == [448.0, 448.0] and q.dequantized[2].isnan()
    assert quantize_cast(x, "fp8_e4m3fn", saturate=True).dequantized.tolist() == [
        448.0, 448.0, -448.0, 1.0]


def test_compare_schemes_passes_axis_rounding_and_seed_to_each_scheme() -> None:
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(10))  # axis 0: 40 long
    got = compare_schemes(x, ["mxfp4", "nvfp4"], axis=0, rounding="stochastic", seed=5)
    assert (got.source, got.shape, got.elements, got.fp32_bytes) == ("tensor", (40, 3), 120, 480)
    assert (got.axis, got.rounding) == (0, "stochastic")
    mx = quantize_mx(x, "fp4_e2m1", axis=0, rounding="stochastic", seed=5, scheme="mxfp4")
    row = got.results[0]
    assert row.error == error_metrics(x, mx.dequantized)  # the same draws along axis 0
    assert (row.scheme, row.description) == ("mxfp4", SCHEMES["mxfp4"].description)
    assert (row.element_format, row.block_shape, row.scale_format) == ("fp4_e2m1", (32,), "e8m0")
    assert (row.packed_bytes, row.bits_per_value) == (mx.packed_bytes, mx.bits_per_value)
    assert 0 < mx.saturated < 120  # the floor rule clips some amaxes
    assert row.saturated_fraction == mx.saturated / 120
    assert got.results[1].scale_format == "fp8_e4m3fn"


def test_compare_schemes_names_its_source() -> None:
    got = compare_schemes(torch.ones(4), ["bf16"], source="w.npy")
    assert (got.source, got.axis, got.rounding) == ("w.npy", -1, "nearest")
    assert math.isinf(got.best.error.sqnr_db)  # ones are exact in bf16


def test_nvfp4_tiles_over_rows_padded_to_16_equal_tiles_of_the_padded_tensor() -> None:
    x = torch.randn(20, 40, generator=torch.Generator().manual_seed(12))  # 20 rows → 32
    got = quantize_nvfp4(x, tile="16x16").dequantized
    # zero rows change no tile's amax, so padding by hand gives the same first 20 rows
    padded = torch.nn.functional.pad(x, (0, 0, 0, 12))
    assert torch.equal(got, quantize_nvfp4(padded, tile="16x16").dequantized[:20])


def test_nvfp4_tiles_of_a_batch_are_each_matrix_tiled() -> None:
    first = torch.randn(20, 40, generator=torch.Generator().manual_seed(13))
    x = torch.stack([first, -first])  # (2, 20, 40): one amax, so one tensor scale for all
    got = quantize_nvfp4(x, tile="16x16")
    alone = quantize_nvfp4(first, tile="16x16")
    assert got.dequantized.shape == (2, 20, 40)
    assert torch.equal(got.dequantized[0], alone.dequantized)
    assert torch.equal(got.dequantized[1], -alone.dequantized)  # signs apart, the same
    assert got.scales is not None and got.scales.shape == (2, 2, 3)  # ceil(20/16) × ceil(40/16)


@pytest.mark.parametrize(("name", "direct"), [
    ("mxfp4_up", lambda x, **kw: quantize_mx(x, "fp4_e2m1", rule="up", **kw)),
    ("nvfp4", lambda x, **kw: quantize_nvfp4(x, **kw)),
    ("fp8_e5m2_tensor", lambda x, **kw: quantize_per_tensor(x, "fp8_e5m2", **kw)),
    ("fp6_e3m2", lambda x, **kw: quantize_cast(x, "fp6_e3m2", **kw)),
])
def test_a_scheme_by_name_is_its_quantizer_with_every_argument(name: str, direct: Any) -> None:
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(14)) * 3
    got = quantize_scheme(x, name, axis=0, rounding="stochastic", seed=5)
    extra = {"axis": 0} if resolve_scheme(name).kind in ("mx", "nvfp4") else {}
    want = direct(x, rounding="stochastic", seed=5, **extra)
    assert torch.equal(got.dequantized, want.dequantized)
    assert (got.scheme, got.element_format) == (name, want.element_format)
    # and the draws matter: another seed or nearest rounding gives another tensor
    assert not torch.equal(got.dequantized, quantize_scheme(x, name, axis=0, seed=5).dequantized)
    assert not torch.equal(got.dequantized, quantize_scheme(x, name, axis=0,
                                                            rounding="stochastic",
                                                            seed=6).dequantized)


@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_a_0_d_tensor_quantizes_as_its_one_element(name: str) -> None:
    scalar = torch.tensor(2.7)
    got = quantize_scheme(scalar, name)
    assert got.dequantized.shape == ()
    assert got.dequantized.item() == quantize_scheme(scalar.reshape(1), name).dequantized.item()


def test_an_axis_beyond_a_1_d_tensor_is_refused() -> None:
    for axis in (1, -2):  # a 1-D tensor has axes 0 and -1 only
        with pytest.raises(ShapeError, match=f"axis {axis} is out of range for a tensor of"):
            quantize_mx(torch.ones(32), axis=axis)


def test_a_block_amax_that_lands_on_the_largest_element_is_not_clipped() -> None:
    x = torch.zeros(32)
    x[0], x[1] = 6.0, -1.0  # floor(log2 6) - 2 = 0: scale 1, and 6 is E2M1's largest
    q = quantize_mx(x, "fp4_e2m1")
    assert q.saturated == 0 and q.dequantized[:2].tolist() == [6.0, -1.0]


def test_nvfp4_tensor_scales_below_and_at_zero() -> None:
    x = torch.zeros(16)
    x[0], x[1] = 0.5, -0.25  # amax 0.5 < 1: s_enc = 448 · 6 / 0.5 = 5,376
    assert quantize_nvfp4(x).tensor_scale == 5376.0
    assert quantize_nvfp4(torch.zeros(16)).tensor_scale == 1.0  # all zero: s_enc = 1


def test_nvfp4_block_scales_below_one_still_scale() -> None:
    x = torch.zeros(32)
    x[:16] = 1.0  # block 0: all ones
    x[16] = 1000.0  # block 1: the tensor's amax
    got = quantize_nvfp4(x)
    # s_enc = 2688 / 1000 = 2.688; block 0: 1 / 6 · 2.688 = 0.448 → E4M3 0.4375 (7 · 2^-4);
    # 1 · 2.688 / 0.4375 = 6.144 → E2M1 6; 6 · 0.4375 / 2.688 = 0.9765625
    assert got.dequantized[:16].tolist() == pytest.approx([0.9765625] * 16, rel=1e-6)


def test_every_field_of_an_nvfp4_tile_result() -> None:
    first = torch.randn(20, 40, generator=torch.Generator().manual_seed(15))
    got = quantize_nvfp4(torch.stack([first, -first]), tile="16x16")  # (2, 20, 40)
    assert (got.scheme, got.element_format, got.block_shape, got.scale_format) == (
        "nvfp4_16x16", "fp4_e2m1", (16, 16), "fp8_e4m3fn")
    # codes blockwise: 20 rows padded to 32, 40 columns to 3 blocks of 16
    assert got.codes is not None and got.codes.shape == (2, 32, 3, 16)
    assert quantize_nvfp4(first).block_shape == (16,)


@pytest.mark.usefixtures("float64_default")
def test_the_nvfp4_tensor_scale_is_fp32_whatever_the_default_dtype() -> None:
    x = torch.zeros(16)
    x[0] = 5.0  # s_enc = 2688 / 5 = 537.6, which fp32 holds as 537.5999755859375
    assert quantize_nvfp4(x).tensor_scale == 537.5999755859375


def test_quantize_memory_is_the_input_and_its_working_multiple() -> None:
    assert WORKING_MULTIPLE == 6
    # 2^25 fp32 elements: 4 bytes each, the input once and 6 times over: 7 · 4 · 2^25 bytes,
    # 0.875 GiB
    assert quantize_memory_bytes(2**25) == 7 * 4 * 2**25 == 0.875 * 2**30
    assert quantize_memory_bytes(3) == 84  # 7 · 4 · 3


def test_nvfp4_refuses_a_tensor_too_small_for_its_fp32_scales() -> None:
    # amax 1e-34: s_enc = 2688 / 1e-34 ≈ 2.7e37, and a block 10^5 times smaller gets the E4M3
    # scale 0.0044, so s_enc / s_b ≈ 6e39 overflowed fp32: its zeros became NaN
    x = torch.zeros(32)
    x[0], x[16] = 1e-34, 1e-39
    with pytest.raises(InputError, match=r"largest magnitude is 1e-34, below 2\^-106"):
        quantize_nvfp4(x)
    smallest = 2.0**-106  # the smallest amax scaled: every factor stays finite
    x[0], x[16] = smallest, smallest * 1e-5
    got = quantize_nvfp4(x)
    assert bool(got.dequantized.isfinite().all()) and got.dequantized[1] == 0.0
    assert got.dequantized[0] == pytest.approx(smallest, rel=0.01)  # one of the largest codes
    below = float(torch.nextafter(torch.tensor(smallest), torch.tensor(0.0)))  # one fp32 ulp
    x[0] = below
    with pytest.raises(InputError, match="below 2\\^-106"):
        quantize_nvfp4(x)


def test_quantizers_take_floating_point_tensors_of_any_size_and_give_fp32() -> None:
    for bad in (torch.arange(32), [1.0] * 32):  # integers; not a tensor at all
        with pytest.raises(InputError, match="quantization needs a floating-point tensor"):
            quantize_mx(bad)  # type: ignore[arg-type]
    one = quantize_mx(torch.tensor([2.0]))  # one element: padded to a block of 32
    assert one.dequantized.tolist() == [2.0]
    half = quantize_mx(torch.tensor([1.5, -3.0], dtype=torch.float16), "fp8_e4m3fn")
    assert half.dequantized.dtype == torch.float32 and half.dequantized.tolist() == [1.5, -3.0]


def test_per_tensor_scaling_defaults_to_e4m3_and_names_itself_in_refusals() -> None:
    got = quantize_per_tensor(torch.tensor([448.0, -1.0]))  # amax 448: scale 1
    assert (got.element_format, got.tensor_scale) == ("fp8_e4m3fn", 1.0)
    with pytest.raises(InputError, match=r"^per-tensor scaling needs a finite tensor"):
        quantize_per_tensor(torch.tensor([1.0, math.inf]))


def test_per_tensor_codes_only_for_formats_of_at_most_8_bits() -> None:
    x = torch.tensor([1.5, -0.5])
    assert quantize_per_tensor(x, "bf16").codes is None
    assert quantize_per_tensor(x, E5M3).codes is None  # 9 bits
    codes = quantize_per_tensor(x, "fp8_e4m3fn").codes
    # amax 1.5: scale 1.5 / 448; 1.5 → 448 = 0.1111.110 (0x7E), -0.5 → -149.33 → -144
    # (spacing 16 in [128, 256)) = 1.1110.001 (0xF1)
    assert codes is not None and codes.tolist() == [0x7E, 0xF1]


def test_a_plain_cast_stores_its_bits_per_value() -> None:
    x = torch.ones(3)
    assert quantize_cast(x, "fp8_e4m3fn").bits_per_value == 8.0  # 3 bytes · 8 / 3
    assert quantize_cast(x, "fp4_e2m1").bits_per_value == 16 / 3  # 2 bytes · 8 / 3


def test_a_cast_scheme_keeps_its_own_name() -> None:
    mine = Scheme("bf16_weights", "cast", "bf16", "the weights in bf16")
    assert quantize_scheme(torch.ones(4), mine).scheme == "bf16_weights"


def test_per_tensor_scaling_saturates_an_amax_its_fp32_scale_sends_past_the_top() -> None:
    # into tf32 (largest (2 - 2^-10) · 2^127): s = amax / largest is an fp32 subnormal, so
    # amax / s lands above the largest value, and the saturating cast brings it back to it
    largest = (2 - 2.0**-10) * 2.0**127
    x = torch.tensor([1.4203048944473267, -0.5])
    scale = torch.tensor(float(x[0]) / largest, dtype=torch.float32)
    assert float(x[0] / scale) > largest  # the overshoot the saturation catches
    got = quantize_per_tensor(x, "tf32")
    assert got.tensor_scale == float(scale)
    assert got.dequantized[0] == torch.tensor(largest, dtype=torch.float32) * scale


@pytest.mark.parametrize("name", ["bf16", "tf32", "fp32", "fp16", "fp8_e4m3fn"])
def test_per_tensor_scaling_rounds_like_a_saturating_cast_of_the_scaled_tensor(name: str) -> None:
    # the second path: cast(|x| / s, saturate) · s with x's sign.  bf16, tf32 and fp32 need
    # fp64 to round in; in fp32 they were left unrounded (bf16), or became NaN (tf32) or inf
    x = torch.randn(4096, generator=torch.Generator().manual_seed(18))
    got = quantize_per_tensor(x, name)
    scale = torch.tensor(got.tensor_scale)
    want = cast(x.abs() / scale, name, saturate=True).values * scale * x.sign()
    assert got.dequantized.dtype == torch.float32
    assert torch.equal(got.dequantized, want)


def test_per_tensor_scaling_into_fp32_saturates_an_amax_that_overflows_on_division() -> None:
    # s = 1.4203... / 3.4e38 is an fp32 subnormal, and amax / s passes fp32's largest value
    # (inf); the saturating cast brings it back to the largest value
    largest = torch.finfo(torch.float32).max
    x = torch.tensor([1.4203048944473267, -0.5])
    scale = torch.tensor(float(x[0]) / largest, dtype=torch.float32)
    assert torch.isinf(x[0] / scale)  # the overflow the saturation catches
    got = quantize_per_tensor(x, "fp32")
    assert got.dequantized[0] == torch.tensor(largest) * scale
