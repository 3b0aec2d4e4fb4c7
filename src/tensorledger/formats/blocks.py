"""Scaled quantization: per-tensor fp8, MX block scaling and NVFP4 two-level scaling.

Every quantizer returns a :class:`Quantized`: the dequantized tensor (input shape, fp32), the
uint8 element codes and the block scales, and the bytes the packed representation occupies, so
memory is accounted at its real size (NVFP4: 4 bits per value + one byte per 16 values + the
fp32 tensor scale ≈ 4.5 bits per value).

- **MX** (OCP Microscaling v1.0): blocks of 32 along ``axis``, one E8M0 scale per block.  The
  spec's *floor* rule takes ``2^(floor(log2 amax) - emax_elem)`` and lets the largest elements
  clip to the element maximum; the *round-up* rule takes the smallest power of two with
  ``amax / scale <= max_elem``, which never clips.
- **NVFP4**: blocks of 16 E2M1 values (or 16×16 tiles), an E4M3 scale per block and an fp32
  tensor scale: ``s_enc = 448·6 / amax``, ``s_b = e4m3(amax_b / 6 · s_enc)``,
  ``q = e2m1(x · s_enc / s_b)``, ``x̂ = q · s_b / s_enc``.
- **per-tensor fp8**: ``scale = amax / max_elem`` in fp32, ``x̂ = e4m3(x / scale) · scale``.

Blocks that are all zero get the smallest scale; an MX block holding NaN or inf gets the NaN
scale (0xFF) and decodes to NaN.  NVFP4 and per-tensor scaling need a finite tensor, and NVFP4
one whose largest magnitude is 0 or at least 2^-106 (its fp32 scales overflow below that).

>>> import torch
>>> q = quantize_nvfp4(torch.linspace(-1, 1, 64))
>>> q.packed_bytes, q.bits_per_value  # 64/2 + 4 block scales + 4 (fp32 tensor scale)
(40, 5.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from tensorledger.errors import InputError, ShapeError, UnknownNameError
from tensorledger.formats.quantize import (
    Rounding,
    _working_dtype,
    cast,
    pow2,
    round_magnitudes,
)
from tensorledger.formats.spec import FloatFormat, resolve_format

__all__ = [
    "SCHEMES",
    "Quantized",
    "Scheme",
    "mx_scale_exponents",
    "pack_codes",
    "packed_code_bytes",
    "quantize_cast",
    "quantize_mx",
    "quantize_nvfp4",
    "quantize_per_tensor",
    "quantize_scheme",
    "resolve_scheme",
    "unpack_codes",
]

ScaleRule = Literal["floor", "up"]


@dataclass(frozen=True)
class Quantized:
    """A quantized tensor: what it decodes to, what is stored, and how many bytes that takes.

    ``codes`` and ``scale_codes`` are laid out blockwise: the quantized axis moved last and
    padded with zeros to whole blocks.  ``scales`` are the decoded per-block factors (x̂ = q ·
    scale); for NVFP4 they include the tensor scale.
    """

    scheme: str
    element_format: str
    block_shape: tuple[int, ...]
    scale_format: str | None
    dequantized: torch.Tensor
    codes: torch.Tensor | None
    scales: torch.Tensor | None
    scale_codes: torch.Tensor | None
    tensor_scale: float | None
    elements: int
    saturated: int  # elements whose scaled magnitude exceeded the element format's maximum
    packed_bytes: int
    bits_per_value: float


def packed_code_bytes(count: int, bits: int) -> int:
    """Bytes that ``count`` codes of ``bits`` bits occupy packed back to back."""
    return math.ceil(count * bits / 8)


def _group(bits: int) -> tuple[int, int]:
    """(codes, bytes) of the smallest run of codes that fills whole bytes."""
    bytes_ = math.lcm(bits, 8) // 8
    return bytes_ * 8 // bits, bytes_


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack codes of ``bits`` bits (1..8) little-end first into a flat uint8 tensor.

    >>> pack_codes(torch.tensor([1, 2, 3], dtype=torch.uint8), 4).tolist()  # 0x21, 0x03
    [33, 3]
    """
    if not 1 <= bits <= 8:
        raise InputError(f"cannot pack {bits}-bit codes; expected 1 to 8 bits")
    flat = codes.reshape(-1)
    if bits == 8:
        return flat.to(torch.uint8).clone()
    per_group, group_bytes = _group(bits)
    count = flat.numel()
    padded = torch.zeros(math.ceil(count / per_group) * per_group, dtype=torch.int64)
    padded[:count] = flat.to(torch.int64) & ((1 << bits) - 1)
    shifts = torch.arange(per_group, dtype=torch.int64) * bits
    words = (padded.view(-1, per_group) << shifts).sum(dim=1)
    byte_shifts = torch.arange(group_bytes, dtype=torch.int64) * 8
    packed = ((words[:, None] >> byte_shifts) & 0xFF).to(torch.uint8).reshape(-1)
    return packed[: packed_code_bytes(count, bits)]


def unpack_codes(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """The inverse of :func:`pack_codes`: ``count`` uint8 codes."""
    if bits == 8:
        return packed[:count].clone()
    per_group, group_bytes = _group(bits)
    groups = math.ceil(count / per_group)
    padded = torch.zeros(groups * group_bytes, dtype=torch.int64)
    padded[: packed.numel()] = packed.to(torch.int64)
    byte_shifts = torch.arange(group_bytes, dtype=torch.int64) * 8
    words = (padded.view(groups, group_bytes) << byte_shifts).sum(dim=1)
    shifts = torch.arange(per_group, dtype=torch.int64) * bits
    codes = (words[:, None] >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:count].to(torch.uint8)


# ------------------------------------------------------------------------------ helpers

def _check_tensor(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise InputError(f"quantization needs a floating-point tensor, got "
                         f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.numel() == 0:
        raise ShapeError(f"cannot quantize an empty tensor of shape {tuple(x.shape)}")
    return x.detach().to("cpu", torch.float32)


def _blocked(x: torch.Tensor, axis: int, block: int) -> tuple[torch.Tensor, int]:
    """``x`` with ``axis`` moved last, padded with zeros to whole blocks, shaped
    (..., blocks, block); and the padded length of that axis."""
    ndim = max(x.ndim, 1)
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for a tensor of shape {tuple(x.shape)}")
    moved = x.reshape(1) if x.ndim == 0 else x.movedim(axis, -1)
    length = moved.shape[-1]
    padded_length = math.ceil(length / block) * block
    if padded_length != length:
        moved = torch.nn.functional.pad(moved, (0, padded_length - length))
    return moved.reshape(*moved.shape[:-1], padded_length // block, block).contiguous(), \
        padded_length


def _unblocked(blocks: torch.Tensor, x: torch.Tensor, axis: int) -> torch.Tensor:
    """Undo :func:`_blocked`: drop the padding and move the axis back."""
    if x.ndim == 0:
        return blocks.reshape(-1)[:1].reshape(())
    flat = blocks.reshape(*blocks.shape[:-2], -1)[..., : x.shape[axis]]
    return flat.movedim(-1, axis).contiguous()


def _signed_codes(code: torch.Tensor, source: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    # in uint8 throughout: a bool tensor is one byte per element, so it views as uint8
    sign = torch.signbit(source).view(torch.uint8)
    sign.bitwise_left_shift_(fmt.exponent_bits + fmt.mantissa_bits)
    return code.to(torch.uint8).bitwise_or_(sign)


def _round_elements(scaled: torch.Tensor, source: torch.Tensor, fmt: FloatFormat,
                    rounding: Rounding, generator: torch.Generator | None,
                    ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Saturating cast of scaled magnitudes (overwritten); returns the unsigned magnitudes,
    the signed codes and how many elements clipped."""
    saturated = int(torch.count_nonzero(scaled > fmt.max_finite))
    magnitudes, code = round_magnitudes(scaled, fmt, saturate=True, rounding=rounding,
                                        generator=generator)
    assert code is not None
    return magnitudes, _signed_codes(code, source, fmt), saturated


def _generator(seed: int | None) -> torch.Generator | None:
    return None if seed is None else torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------ MX

_MX_BLOCK = 32


def _floor_log2(values: torch.Tensor) -> torch.Tensor:
    """floor(log2 v) for positive finite v, exactly (from the float's exponent)."""
    return torch.frexp(values.to(torch.float64))[1].to(torch.int64) - 1


def mx_scale_exponents(amax: torch.Tensor, element: FloatFormat,
                       rule: ScaleRule = "floor") -> torch.Tensor:
    """The E8M0 exponent of each block scale (int64; the NaN blocks get 128).

    floor: ``floor(log2 amax) - emax_elem``; up: the least k with ``max_elem · 2^k >= amax``.
    Both are clamped to E8M0's range [-127, 127]; an all-zero block gets -127.
    """
    emax_elem = math.floor(math.log2(element.max_finite))
    positive = amax > 0
    safe = torch.where(positive & torch.isfinite(amax), amax, torch.ones_like(amax))
    exponent = _floor_log2(safe) - emax_elem
    if rule == "up":
        reach = element.max_finite * pow2(exponent, torch.float64)
        exponent = exponent + (reach < safe.to(torch.float64)).to(torch.int64)
    elif rule != "floor":
        raise InputError(f"unknown MX scale rule {rule!r}; known: floor, up")
    exponent = exponent.clamp_(-127, 127).masked_fill_(~positive, -127)
    return exponent.masked_fill_(~torch.isfinite(amax), 128)


def quantize_mx(x: torch.Tensor, element: str | FloatFormat = "fp8_e4m3fn", *,
                axis: int = -1, rule: ScaleRule = "floor", rounding: Rounding = "nearest",
                seed: int | None = None, scheme: str | None = None) -> Quantized:
    """MX block quantization along ``axis``: blocks of 32 elements sharing one E8M0 scale."""
    fmt = resolve_format(element)
    if fmt.layout_bits > 8 or not fmt.signed:
        raise InputError(f"{fmt.name} is not an MX element format; use fp8_e4m3fn, fp8_e5m2, "
                         "fp6_e2m3, fp6_e3m2 or fp4_e2m1")
    source = _check_tensor(x)
    blocks, _ = _blocked(source, axis, _MX_BLOCK)
    scaled = blocks.abs()
    amax = scaled.amax(dim=-1)
    exponent = mx_scale_exponents(amax, fmt, rule)
    nan_block = exponent == 128
    scales = pow2(exponent, torch.float32).masked_fill_(nan_block, math.nan)
    scaled.mul_(pow2(-exponent, torch.float32).unsqueeze(-1))  # exact: a power of two
    if bool(nan_block.any()):
        scaled.masked_fill_(nan_block.unsqueeze(-1), 0.0)
    magnitudes, codes, saturated = _round_elements(scaled, blocks, fmt, rounding,
                                                   _generator(seed))
    dequantized = magnitudes.mul_(scales.unsqueeze(-1)).copysign_(blocks)
    scale_codes = (exponent + 127).to(torch.uint8)
    block_count = amax.numel()
    packed = packed_code_bytes(block_count * _MX_BLOCK, fmt.bits) + block_count
    elements = source.numel()
    name = scheme or f"mx_{fmt.name}_{rule}"
    return Quantized(name, fmt.name, (_MX_BLOCK,), "e8m0", _unblocked(dequantized, source, axis),
                     codes, scales, scale_codes, None, elements, saturated, packed,
                     packed * 8 / elements)


# ------------------------------------------------------------------------------ NVFP4

_NV_BLOCK = 16
_E2M1 = resolve_format("fp4_e2m1")
_E4M3 = resolve_format("fp8_e4m3fn")
#: The smallest nonzero amax NVFP4 scales.  Below it the fp32 encode factor s_enc / s_b
#: (448·6 / amax over E4M3's smallest block scale, 2^-9) can pass fp32's largest value, 2^128:
#: 2688 · 2^106 · 2^9 ≈ 2^126.4 still fits.  An overflowed factor made a block's elements 0 or NaN.
_NV_SMALLEST_AMAX = 2.0**-106


def _finite_amax(source: torch.Tensor, what: str) -> float:
    amax = float(source.abs().amax())
    if not math.isfinite(amax):
        raise InputError(f"{what} needs a finite tensor; this one holds inf or NaN")
    return amax


def quantize_nvfp4(x: torch.Tensor, *, axis: int = -1, tile: Literal["1x16", "16x16"] = "1x16",
                   rounding: Rounding = "nearest", seed: int | None = None,
                   scheme: str | None = None) -> Quantized:
    """NVFP4: E2M1 elements in blocks of 16 along ``axis`` (or 16×16 tiles over the last two
    dimensions after moving ``axis`` last), one E4M3 scale per block, one fp32 tensor scale."""
    source = _check_tensor(x)
    if tile not in ("1x16", "16x16"):
        raise InputError(f"unknown NVFP4 tile {tile!r}; known: 1x16, 16x16")
    if tile == "16x16" and source.ndim < 2:
        raise ShapeError(f"16x16 tiles need a tensor of at least 2 dimensions, got shape "
                         f"{tuple(source.shape)}")
    blocks, _ = _blocked(source, axis, _NV_BLOCK)
    if tile == "16x16":
        rows = blocks.shape[-3]
        padded_rows = math.ceil(rows / _NV_BLOCK) * _NV_BLOCK
        if padded_rows != rows:
            blocks = torch.nn.functional.pad(blocks, (0, 0, 0, 0, 0, padded_rows - rows))
        # (..., rows, blocks, 16) -> (..., row tiles, 16, blocks, 16): a tile is [.., r, :, c, :]
        blocks = blocks.reshape(*blocks.shape[:-3], padded_rows // _NV_BLOCK, _NV_BLOCK,
                                *blocks.shape[-2:])
    scaled = blocks.abs()
    tile_dims = (-3, -1) if tile == "16x16" else (-1,)
    block_amax = scaled.amax(dim=tile_dims, keepdim=True)
    amax = float(block_amax.max())
    if not math.isfinite(amax):
        raise InputError("NVFP4 needs a finite tensor; this one holds inf or NaN")
    if 0 < amax < _NV_SMALLEST_AMAX:
        raise InputError(f"NVFP4 cannot scale a tensor whose largest magnitude is {amax:.3g}, "
                         "below 2^-106 (1.2e-32): its fp32 scales would overflow; scale the "
                         "tensor up first")
    # fp32 arithmetic throughout, as a kernel would do it.
    s_enc = torch.tensor(448.0 * 6.0 / amax if amax > 0 else 1.0, dtype=torch.float32)
    block_scale = cast(block_amax / 6.0 * s_enc, _E4M3, saturate=True)
    s_b = block_scale.values
    encode = torch.where(s_b > 0, s_enc / s_b, torch.zeros_like(s_b))
    scaled.mul_(encode)
    magnitudes, codes, saturated = _round_elements(scaled, blocks, _E2M1, rounding,
                                                   _generator(seed))
    decode = s_b / s_enc
    dequantized = magnitudes.mul_(decode).copysign_(blocks)
    if tile == "16x16":
        # back to (..., rows, blocks, 16), without the padded rows
        dequantized = dequantized.reshape(*dequantized.shape[:-4], -1,
                                          *dequantized.shape[-2:])[..., :rows, :, :]
        codes = codes.reshape(*codes.shape[:-4], -1, *codes.shape[-2:])
    block_count = s_b.numel()
    packed = packed_code_bytes(codes.numel(), _E2M1.bits) + block_count + 4
    elements = source.numel()
    shape = (_NV_BLOCK, _NV_BLOCK) if tile == "16x16" else (_NV_BLOCK,)
    scale_codes = block_scale.codes
    assert scale_codes is not None
    return Quantized(scheme or f"nvfp4_{tile}", _E2M1.name, shape, "fp8_e4m3fn",
                     _unblocked(dequantized, source, axis), codes, decode.squeeze(tile_dims),
                     scale_codes.squeeze(tile_dims), float(s_enc), elements, saturated, packed,
                     packed * 8 / elements)


# ------------------------------------------------------------------------------ per tensor

def quantize_per_tensor(x: torch.Tensor, element: str | FloatFormat = "fp8_e4m3fn", *,
                        rounding: Rounding = "nearest", seed: int | None = None,
                        scheme: str | None = None) -> Quantized:
    """Scale the whole tensor by one fp32 factor so that its amax lands on the format's largest
    value, then cast with saturation: ``x̂ = cast(x / s) · s`` with ``s = amax / max_elem``."""
    fmt = resolve_format(element)
    source = _check_tensor(x)
    amax = _finite_amax(source, "per-tensor scaling")
    scale = torch.tensor(amax / fmt.max_finite if amax > 0 else 1.0, dtype=torch.float32)
    scaled = source.abs().div_(scale)
    saturated = int(torch.count_nonzero(scaled > fmt.max_finite))
    # in fp64 where fp32 cannot hold the format's rounding constant (bf16, tf32, fp32), as
    # cast() does: in fp32 those were left unrounded, or became inf or NaN
    magnitudes, code = round_magnitudes(scaled.to(_working_dtype(torch.float32, fmt)), fmt,
                                        saturate=True, rounding=rounding,
                                        generator=_generator(seed),
                                        want_codes=fmt.layout_bits <= 8)
    dequantized = magnitudes.to(torch.float32).mul_(scale).copysign_(source)
    codes = None if code is None else _signed_codes(code, source, fmt)
    elements = source.numel()
    packed = packed_code_bytes(elements, fmt.bits) + 4
    return Quantized(scheme or f"tensor_{fmt.name}", fmt.name, (), "fp32", dequantized, codes,
                     None, None, float(scale), elements, saturated, packed, packed * 8 / elements)


def quantize_cast(x: torch.Tensor, element: str | FloatFormat, *, saturate: bool = False,
                  rounding: Rounding = "nearest", seed: int | None = None,
                  scheme: str | None = None) -> Quantized:
    """A plain element cast with no scale (what ``tensor.to(dtype)`` does)."""
    fmt = resolve_format(element)
    source = _check_tensor(x)
    values, codes = _cast_in_chunks(source, fmt, saturate=saturate, rounding=rounding, seed=seed)
    saturated = int(torch.count_nonzero(source.abs() > fmt.max_finite))
    elements = source.numel()
    packed = packed_code_bytes(elements, fmt.bits)
    return Quantized(scheme or fmt.name, fmt.name, (), None, values, codes, None,
                     None, None, elements, saturated, packed, packed * 8 / elements)


#: Elements cast at a time by :func:`quantize_cast`: formats with a wide exponent (bf16) round
#: in fp64 with int64 views, so casting a whole tensor at once would take 8× its fp32 bytes.
CAST_CHUNK = 2**22


def _cast_in_chunks(source: torch.Tensor, fmt: FloatFormat, *, saturate: bool,
                    rounding: Rounding, seed: int | None
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``cast`` over the flat tensor a chunk at a time, one generator drawing throughout."""
    flat = source.reshape(-1)
    if flat.numel() <= CAST_CHUNK:
        result = cast(source, fmt, saturate=saturate, rounding=rounding, seed=seed)
        return result.values, result.codes
    generator = _generator(seed) if rounding == "stochastic" else None
    values = torch.empty_like(flat)
    codes = torch.empty(flat.numel(), dtype=torch.uint8) if fmt.layout_bits <= 8 else None
    for start in range(0, flat.numel(), CAST_CHUNK):
        part = cast(flat[start:start + CAST_CHUNK], fmt, saturate=saturate, rounding=rounding,
                    generator=generator)
        values[start:start + CAST_CHUNK] = part.values
        if codes is not None and part.codes is not None:
            codes[start:start + CAST_CHUNK] = part.codes
    return values.reshape(source.shape), None if codes is None else codes.reshape(source.shape)


# ------------------------------------------------------------------------------ schemes

@dataclass(frozen=True)
class Scheme:
    """A named recipe: ``kind`` is mx, nvfp4, tensor or cast."""

    name: str
    kind: Literal["mx", "nvfp4", "tensor", "cast"]
    element: str
    description: str
    rule: ScaleRule = "floor"
    tile: Literal["1x16", "16x16"] = "1x16"


def _mx_schemes() -> list[Scheme]:
    out = []
    for name, element in (("mxfp8", "fp8_e4m3fn"), ("mxfp8_e5m2", "fp8_e5m2"),
                          ("mxfp6", "fp6_e2m3"), ("mxfp6_e3m2", "fp6_e3m2"),
                          ("mxfp4", "fp4_e2m1")):
        out.append(Scheme(name, "mx", element, f"MX {element}, blocks of 32, E8M0 floor scale"))
        out.append(Scheme(f"{name}_up", "mx", element,
                          f"MX {element}, blocks of 32, E8M0 round-up scale", rule="up"))
    return out


SCHEMES: dict[str, Scheme] = {s.name: s for s in [
    Scheme("nvfp4", "nvfp4", "fp4_e2m1", "E2M1, 1x16 blocks, E4M3 block scale, fp32 tensor"),
    Scheme("nvfp4_16x16", "nvfp4", "fp4_e2m1", "E2M1, 16x16 tiles, E4M3 scale, fp32 tensor",
           tile="16x16"),
    *_mx_schemes(),
    Scheme("fp8", "tensor", "fp8_e4m3fn", "E4M3 with one fp32 amax scale per tensor"),
    Scheme("fp8_e5m2_tensor", "tensor", "fp8_e5m2", "E5M2 with one fp32 amax scale per tensor"),
]}


def resolve_scheme(name: str) -> Scheme:
    """A scheme by name; a format name or alias (``bf16``, ``fp8_e4m3fn``) is a plain cast.
    ``fp8`` is the per-tensor scaled E4M3 scheme, not the bare format."""
    key = name.strip().lower()
    if key in SCHEMES:
        return SCHEMES[key]
    try:
        fmt = resolve_format(key)
    except UnknownNameError:
        raise UnknownNameError("quantization scheme (or format)", name, SCHEMES) from None
    return Scheme(fmt.name, "cast", fmt.name, f"plain {fmt.name} cast, no scale")


def quantize_scheme(x: torch.Tensor, name: str | Scheme, *, axis: int = -1,
                    rounding: Rounding = "nearest", seed: int | None = None) -> Quantized:
    """Quantize ``x`` with a named scheme (see :data:`SCHEMES`)."""
    scheme = resolve_scheme(name) if isinstance(name, str) else name
    if scheme.kind == "mx":
        return quantize_mx(x, scheme.element, axis=axis, rule=scheme.rule, rounding=rounding,
                           seed=seed, scheme=scheme.name)
    if scheme.kind == "nvfp4":
        return quantize_nvfp4(x, axis=axis, tile=scheme.tile, rounding=rounding, seed=seed,
                              scheme=scheme.name)
    if scheme.kind == "tensor":
        return quantize_per_tensor(x, scheme.element, rounding=rounding, seed=seed,
                                   scheme=scheme.name)
    return quantize_cast(x, scheme.element, rounding=rounding, seed=seed, scheme=scheme.name)
