"""Block-scaled quantization: the FACTS.md figures, packing, scales and axes."""

from __future__ import annotations

import math

import pytest
import torch

from tensorledger.errors import InputError, ShapeError, UnknownNameError
from tensorledger.formats import code_values, resolve_format
from tensorledger.formats.blocks import (
    mx_scale_exponents,
    pack_codes,
    packed_code_bytes,
    quantize_mx,
    quantize_nvfp4,
    quantize_scheme,
    resolve_scheme,
    unpack_codes,
)
from tensorledger.formats.metrics import compare_schemes, error_metrics


@pytest.fixture(scope="module")
def gaussian() -> torch.Tensor:
    torch.manual_seed(0)  # FACTS.md's "seed 0"; the same stream as Generator().manual_seed(0)
    return torch.randn(1024, 1024)


# FACTS.md, reproducible figures on N(0,1) 1024×1024 fp32: (scheme, MSE or None, SQNR dB)
FACTS = [
    ("nvfp4", 0.00905, 20.4),
    ("mxfp4", None, 18.8),
    ("mxfp8", None, 30.7),
    ("mxfp8_up", 0.000706, 31.5),
    ("mxfp6", None, 30.9),
]


@pytest.mark.parametrize(("scheme", "mse", "sqnr_db"), FACTS)
def test_facts_figures_within_one_percent(gaussian: torch.Tensor, scheme: str,
                                          mse: float | None, sqnr_db: float) -> None:
    error = error_metrics(gaussian, quantize_scheme(gaussian, scheme).dequantized)
    assert error.sqnr_db == pytest.approx(sqnr_db, rel=0.01)
    if mse is not None:
        assert error.mse == pytest.approx(mse, rel=0.01)
    # SQNR and MSE describe one number: N(0,1) has E[x²] ≈ 1, so SQNR ≈ -10·log10(MSE)
    assert error.sqnr_db == pytest.approx(-10 * math.log10(error.mse), abs=0.05)


def test_nvfp4_beats_mxfp4_and_round_up_beats_floor_for_mxfp8(gaussian: torch.Tensor) -> None:
    rows = {r.scheme: r for r in compare_schemes(gaussian, ["nvfp4", "mxfp4", "mxfp8",
                                                            "mxfp8_up"]).results}
    assert rows["nvfp4"].error.sqnr_db > rows["mxfp4"].error.sqnr_db + 1.0
    assert rows["mxfp8_up"].error.mse < rows["mxfp8"].error.mse
    assert rows["mxfp8_up"].saturated_fraction == 0.0  # round-up never clips
    assert rows["mxfp8"].saturated_fraction > 0.0


def test_packed_sizes(gaussian: torch.Tensor) -> None:
    n = gaussian.numel()  # 2^20
    nv = quantize_scheme(gaussian, "nvfp4")
    assert nv.packed_bytes == n // 2 + n // 16 + 4  # 4-bit codes + E4M3 per 16 + fp32 scale
    assert nv.bits_per_value == pytest.approx(4.5, abs=1e-4)
    assert quantize_scheme(gaussian, "mxfp4").packed_bytes == n // 2 + n // 32  # 4.25 bits
    assert quantize_scheme(gaussian, "mxfp6").packed_bytes == n * 6 // 8 + n // 32
    assert quantize_scheme(gaussian, "fp8").packed_bytes == n + 4
    assert quantize_scheme(gaussian, "bf16").packed_bytes == 2 * n
    tiles = quantize_scheme(gaussian, "nvfp4_16x16")
    assert tiles.packed_bytes == n // 2 + n // 256 + 4
    assert nv.codes is not None
    assert pack_codes(nv.codes, 4).numel() == packed_code_bytes(n, 4) == n // 2


@pytest.mark.parametrize("bits", [4, 6, 8, 3])
def test_pack_round_trips(bits: int) -> None:
    codes = torch.randint(0, 2**bits, (1001,), generator=torch.Generator().manual_seed(bits),
                          dtype=torch.int64).to(torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.numel() == math.ceil(1001 * bits / 8)
    assert torch.equal(unpack_codes(packed, bits, 1001), codes)


def test_nvfp4_by_hand() -> None:
    x = torch.tensor([0.0, 1.0, -2.0, 3.0] * 4)  # one block of 16, amax 3
    q = quantize_nvfp4(x)
    # s_enc = 448·6/3 = 896; s_b = e4m3(3/6 · 896 = 448) = 448; x·s_enc/s_b = x·2
    assert q.tensor_scale == 896.0
    assert q.scales is not None and q.scales.tolist() == [0.5]  # 448 / 896
    assert q.dequantized.tolist() == x.tolist()  # 2, -4, 6 are E2M1 values
    # codes of 0, 2, -4, 6: 0.00.0, 0.10.0, 1.11.0, 0.11.1
    assert q.codes is not None and q.codes[0, :4].tolist() == [0, 0b0100, 0b1110, 0b0111]


def test_nvfp4_elements_are_scaled_fp4_values(gaussian: torch.Tensor) -> None:
    q = quantize_nvfp4(gaussian[:64])
    assert q.scales is not None and q.codes is not None
    table = torch.tensor([v.value for v in code_values("fp4_e2m1")])
    elements = table[q.codes.long()]  # the codes decoded by the spec, a second path
    assert torch.equal(q.dequantized.reshape(64, -1, 16), elements * q.scales.unsqueeze(-1))
    e4m3 = torch.tensor([v.value for v in code_values("fp8_e4m3fn")])
    assert q.tensor_scale is not None and q.scale_codes is not None
    block_scales = e4m3[q.scale_codes.long()]  # the stored E4M3 codes, decoded by the spec
    assert torch.equal(q.scales, block_scales / torch.tensor(q.tensor_scale))


def test_mx_floor_scale_by_hand() -> None:
    # amax 5 → floor(log2 5) = 2; E2M1's emax is 2 → scale 2^0. amax 0.3 → -2 - 2 = -4.
    amax = torch.tensor([5.0, 0.3, 0.0, math.nan])
    fp4 = resolve_format("fp4_e2m1")
    assert mx_scale_exponents(amax, fp4).tolist() == [0, -4, -127, 128]
    # round-up: least k with 6·2^k >= amax: 6·2^0 >= 5, 6·2^-4 = 0.375 >= 0.3
    assert mx_scale_exponents(amax, fp4, "up").tolist() == [0, -4, -127, 128]
    assert mx_scale_exponents(torch.tensor([6.5, 12.0]), fp4, "up").tolist() == [1, 1]
    assert mx_scale_exponents(torch.tensor([6.5, 12.0]), fp4).tolist() == [0, 1]


def test_mx_clips_with_the_floor_rule() -> None:
    x = torch.zeros(32)
    x[0], x[1] = 7.9, 1.0  # scale 2^(2-2) = 1; 7.9 clips to E2M1's 6
    q = quantize_mx(x, "fp4_e2m1")
    assert q.dequantized[:2].tolist() == [6.0, 1.0]
    assert q.saturated == 1
    assert q.scale_codes is not None and q.scale_codes.tolist() == [127]  # 2^0 in E8M0
    up = quantize_mx(x, "fp4_e2m1", rule="up")  # scale 2: 7.9/2 = 3.95 → 4 → 8
    assert up.dequantized[:2].tolist() == [8.0, 1.0]


def test_mx_nan_block_decodes_to_nan() -> None:
    x = torch.ones(64)
    x[40] = math.nan
    q = quantize_mx(x, "fp8_e4m3fn")
    assert q.dequantized[:32].tolist() == [1.0] * 32
    assert q.dequantized[32:].isnan().all()
    # amax 1: floor(log2 1) - emax 8 = -8, stored as 127 - 8 = 119; the NaN block gets 0xFF
    assert q.scale_codes is not None and q.scale_codes.tolist() == [119, 255]


def test_axis_and_padding() -> None:
    x = torch.randn(40, 24, generator=torch.Generator().manual_seed(1))
    along_rows = quantize_mx(x, "fp4_e2m1", axis=0).dequantized
    transposed = quantize_mx(x.movedim(0, 1).contiguous(), "fp4_e2m1").dequantized
    assert torch.equal(along_rows, transposed.movedim(1, 0))
    # 40 along axis 0 pads to 64: two blocks of 32 per column
    assert quantize_mx(x, "fp4_e2m1", axis=0).packed_bytes == 24 * 64 // 2 + 24 * 2
    padded = torch.nn.functional.pad(x, (0, 8))  # zeros do not change any block's amax
    assert torch.equal(quantize_nvfp4(x).dequantized, quantize_nvfp4(padded).dequantized[:, :24])


def test_nvfp4_16x16_tiles_share_a_scale() -> None:
    x = torch.randn(20, 40, generator=torch.Generator().manual_seed(2))
    q = quantize_nvfp4(x, tile="16x16")
    assert q.dequantized.shape == x.shape
    assert q.scales is not None and q.scales.shape == (2, 3)  # ceil(20/16) × ceil(40/16)
    one_tile = x[:16, :16]
    expected_scale = float(one_tile.abs().max()) / 6 * q.tensor_scale  # before the E4M3 rounding
    assert q.scales[0, 0].item() * q.tensor_scale == pytest.approx(expected_scale, rel=1 / 16)


def test_stochastic_nvfp4_is_reproducible(gaussian: torch.Tensor) -> None:
    a = quantize_scheme(gaussian[:32], "nvfp4", rounding="stochastic", seed=3).dequantized
    b = quantize_scheme(gaussian[:32], "nvfp4", rounding="stochastic", seed=3).dequantized
    nearest = quantize_scheme(gaussian[:32], "nvfp4").dequantized
    assert torch.equal(a, b) and not torch.equal(a, nearest)


def test_scheme_names() -> None:
    assert resolve_scheme("fp8").kind == "tensor"  # per-tensor scaled, not the bare format
    assert resolve_scheme("bfloat16").kind == "cast"
    with pytest.raises(UnknownNameError, match="nvfp4"):
        resolve_scheme("nvfp5")


def test_bad_inputs() -> None:
    with pytest.raises(InputError, match="finite"):
        quantize_nvfp4(torch.tensor([1.0, math.inf]))
    with pytest.raises(ShapeError, match="axis"):
        quantize_mx(torch.ones(4, 4), axis=2)
    with pytest.raises(ShapeError, match="16x16"):
        quantize_nvfp4(torch.ones(32), tile="16x16")
    with pytest.raises(InputError, match="MX element"):
        quantize_mx(torch.ones(32), "bf16")


def test_zero_tensor_quantizes_to_zero() -> None:
    for scheme in ("nvfp4", "mxfp4", "fp8"):
        assert torch.equal(quantize_scheme(torch.zeros(8, 32), scheme).dequantized,
                           torch.zeros(8, 32))
