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

__all__ = ["conv_flops", "mm_flops"]


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


def _scaled_mm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return _mm(args[:2], kwargs, out)


register("aten._scaled_mm", category="matmul")(_scaled_mm)


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
