"""Matrix products and convolutions: one multiply and one add per term.

A product (M×K)·(K×N) costs 2·M·N·K FLOPs; every rule here is built from :func:`mm_flops`.
A bias added by ``addmm``/``baddbmm`` is not counted (it is M·N, below 1/K of the product),
which keeps the counts equal to ``torch.utils.flop_counter.FlopCounterMode``.

>>> mm_flops(4, 5, 6)  # 2 * 4 * 5 * 6
240
>>> conv_flops(batch=2, weight=(8, 3, 3, 3), spatial=(5, 5))  # 2 * 2 * (8*3*3*3) * 25
21600
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tensorledger.costs.registry import register, shape

__all__ = ["conv_flops", "grouped_mm_flops", "mm_flops"]


def mm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """FLOPs of ``batch`` products (m×k)·(k×n): one multiply and one add per term."""
    return 2 * batch * m * n * k


def _mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    (m, k), (_, n) = shape(args[0]), shape(args[1])
    return mm_flops(m, n, k)


register("aten.mm", "aten._int_mm", category="matmul")(_mm)


def _addmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return _mm(args[1:], kwargs, out)


register("aten.addmm", "aten._addmm_activation", category="matmul")(_addmm)


#: The packed fp4 dtype: two e2m1 values per element, so a packed axis holds twice its size.
_FP4_PACKED = "float4_e2m1fn_x2"


def _packs_fp4(tensor: Any) -> bool:
    """Whether ``tensor`` holds two fp4 values per element: the scaled kernels' NVFP4 and MXFP4
    operands are packed along K, so the contracted size is twice the shape's."""
    return str(getattr(tensor, "dtype", "")).endswith(_FP4_PACKED)


def _scaled_mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (self, mat2, scale_a, scale_b, ...) for v1 and v2 alike: the scales add no product
    (m, k), (_, n) = shape(args[0]), shape(args[1])
    return mm_flops(m, n, 2 * k if _packs_fp4(args[0]) else k)


register("aten._scaled_mm", "aten._scaled_mm_v2", category="matmul")(_scaled_mm)


def grouped_mm_flops(a: Sequence[int], b: Sequence[int], fp4_packed: bool = False) -> int:
    """FLOPs of a grouped matrix product of operands shaped ``a`` and ``b``: 2·Σ_g M_g·N_g·K_g.

    The group sizes live in ``offs`` (cumulative ends along the one jagged axis), whose values
    fake and meta tensors do not have; the sum over groups does not need them, because the
    groups tile the jagged axis and the product is linear in it:

    ====================  ==========================  ================  =====================
    a · b                 jagged axis (``offs``)      output            FLOPs
    ====================  ==========================  ================  =====================
    (ΣM, K) · (G, K, N)   rows of a (MoE forward)     (ΣM, N)           2·ΣM·K·N
    (M, ΣK) · (ΣK, N)     K (MoE weight gradient)     (G, M, N)         2·M·ΣK·N
    (G, M, K) · (K, ΣN)   columns of b                (M, ΣN)           2·M·K·ΣN
    (G, M, K) · (G, K, N) none: a batched product     (G, M, N)         2·G·M·K·N
    ====================  ==========================  ================  =====================

    Rows past ``offs[-1]`` belong to no group: the kernel neither computes nor writes them
    (CUDA's grouped kernel and its per-group ``mm`` fallback alike; ``torch.nn.functional.
    grouped_mm`` documents them as ignored).  The count takes the whole axis, so it is exact
    when ``offs[-1]`` is the axis's length, as transformers' MoE routing makes it (every
    token's top-k slots sorted by expert), and an upper bound when the tail holds padding or
    expert-parallel sentinel rows.  ``fp4_packed``: K is stored two values per element.

    >>> grouped_mm_flops((24, 5), (4, 5, 7))       # 2 · 24 · 5 · 7, over 4 groups of rows
    1680
    >>> grouped_mm_flops((3, 20), (20, 7))         # 2 · 3 · 20 · 7, over groups of K
    840
    >>> grouped_mm_flops((4, 3, 5), (4, 5, 7))     # 4 · (2 · 3 · 5 · 7)
    840
    """
    k = a[-1] * (2 if fp4_packed else 1)
    if len(a) == 3 and len(b) == 3:
        return mm_flops(a[1], b[2], k, batch=a[0])
    # One axis is jagged and the groups tile it: the product over the whole of it
    m = a[0] if len(a) == 2 else a[1]
    n = b[-1]
    return mm_flops(m, n, k)


def _grouped_mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (self, mat2, offs, bias, out_dtype); the scaled forms put their scales between
    a, b = args[0], args[1]
    return grouped_mm_flops(shape(a), shape(b), _packs_fp4(a))


register("aten._grouped_mm", "aten._scaled_grouped_mm", "aten._scaled_grouped_mm_v2",
         category="matmul")(_grouped_mm)


def _bmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    (b, m, k), (_, _, n) = shape(args[0]), shape(args[1])
    return mm_flops(m, n, k, batch=b)


register("aten.bmm", category="matmul")(_bmm)


def _baddbmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return _bmm(args[1:], kwargs, out)


register("aten.baddbmm", category="matmul")(_baddbmm)


def _dot(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return mm_flops(1, 1, shape(args[0])[0])


register("aten.dot", "aten.vdot", category="matmul")(_dot)


def _mv(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    m, k = shape(args[0])
    return mm_flops(m, 1, k)


register("aten.mv", category="matmul")(_mv)


def _addmv(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return _mv(args[1:], kwargs, out)


register("aten.addmv", category="matmul")(_addmv)


def _matmul(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # Composite ops: the recorder normally sees the mm/bmm they decompose into.  The count is
    # the general one: every output element is a dot product over the contracted axis.
    a = shape(args[0])
    k = a[-1]
    return 2 * math.prod(shape(out)) * k


register("aten.matmul", "aten.linear", category="matmul")(_matmul)


def conv_flops(batch: int, weight: Sequence[int], spatial: Sequence[int]) -> int:
    """FLOPs of a convolution: each weight element meets every point of ``spatial`` once per
    batch element (the output grid; the input grid for a transposed convolution)."""
    return 2 * batch * math.prod(weight) * math.prod(spatial)


def _conv_spatial(x: Any, out: Any, transposed: bool) -> tuple[int, ...]:
    return shape(x)[2:] if transposed else shape(out)[2:]


def _convolution(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (input, weight, bias, stride, padding, dilation, transposed, ...)
    x, w = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else bool(kwargs.get("transposed", False))
    result = out[0] if isinstance(out, tuple | list) else out
    return conv_flops(shape(x)[0], shape(w), _conv_spatial(x, result, transposed))


register("aten.convolution", "aten._convolution", "aten.convolution_overrideable",
         category="matmul")(_convolution)


def _forward_convolution(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # Kernels with no `transposed` argument (cudnn's position 6 is `benchmark`): never
    # transposed, so the weight meets the output grid.
    x, w = args[0], args[1]
    result = out[0] if isinstance(out, tuple | list) else out
    return conv_flops(shape(x)[0], shape(w), _conv_spatial(x, result, False))


register("aten.cudnn_convolution", "aten._slow_conv2d_forward",
         category="matmul")(_forward_convolution)


def _convolution_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # The input gradient is a (transposed) convolution of grad_out with the weight, the weight
    # gradient a convolution of the input with grad_out: each costs what the forward did.
    grad_out, x, w = args[0], args[1], args[2]
    transposed = bool(args[7])
    output_mask = args[10]
    forward = conv_flops(shape(x)[0], shape(w), _conv_spatial(x, grad_out, transposed))
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


register("aten.convolution_backward", category="matmul")(_convolution_backward)
