"""Normalisations, softmax and the cross-entropy pieces, counted per element.

Derivations (n = elements normalised, x̂ the normalised input, g the incoming gradient):

- layer norm forward: mean (1), centre (1), square (1), sum (1), scale by 1/σ (1) = 5, plus
  1 for the weight and 1 for the bias when present;
- layer norm backward: dx = (g·w − mean(g·w) − x̂·mean(g·w·x̂))/σ: g·w, sum, ·x̂, sum, x̂·m,
  two subtractions, /σ = 8; dw = Σ g·x̂ (2); db = Σ g (1), each when requested;
- RMS norm forward: square, sum, scale = 3, plus 1 for the weight; backward:
  dx = (g·w − x̂·mean(g·w·x̂))/rms: g·w, ·x̂, sum, x̂·m, subtract, /rms = 6; dw = 2;
- softmax forward: max, subtract, exp, sum, divide = 5; log-softmax: max, subtract, exp,
  sum, subtract the log = 5; softmax backward y·(g − Σg·y): multiply, sum, subtract,
  multiply = 4; log-softmax backward g − exp(y)·Σg: exp, sum, multiply, subtract = 4;
- negative log-likelihood: one add per target (forward) and one write per target (backward).

>>> LAYER_NORM_FLOPS["forward"], RMS_NORM_FLOPS["forward"], SOFTMAX_FLOPS["_softmax"]
(5, 3, 5)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from tensorledger.costs.registry import numel, register

__all__ = ["LAYER_NORM_FLOPS", "RMS_NORM_FLOPS", "SOFTMAX_FLOPS"]

LAYER_NORM_FLOPS = {"forward": 5, "weight": 1, "bias": 1,
                    "grad_input": 8, "grad_weight": 2, "grad_bias": 1}
RMS_NORM_FLOPS = {"forward": 3, "weight": 1, "grad_input": 6, "grad_weight": 2}
SOFTMAX_FLOPS = {"_softmax": 5, "_safe_softmax": 5, "_log_softmax": 5,
                 "_softmax_backward_data": 4, "_log_softmax_backward_data": 4}


def _present(args: Sequence[Any], index: int) -> bool:
    return len(args) > index and args[index] is not None


def _mask(args: Sequence[Any], index: int) -> tuple[bool, ...]:
    if len(args) > index and args[index] is not None:
        return tuple(bool(m) for m in args[index])
    return (True, True, True)


def _layer_norm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (input, normalized_shape, weight, bias, eps)
    per_element = (LAYER_NORM_FLOPS["forward"] + LAYER_NORM_FLOPS["weight"] * _present(args, 2)
                   + LAYER_NORM_FLOPS["bias"] * _present(args, 3))
    return per_element * numel(args[0])


register("aten.native_layer_norm", category="normalization")(_layer_norm)


def _layer_norm_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    grad_input, grad_weight, grad_bias = _mask(args, 7)
    per_element = (LAYER_NORM_FLOPS["grad_input"] * grad_input
                   + LAYER_NORM_FLOPS["grad_weight"] * (grad_weight and _present(args, 5))
                   + LAYER_NORM_FLOPS["grad_bias"] * (grad_bias and _present(args, 6)))
    return per_element * numel(args[1])


register("aten.native_layer_norm_backward", category="normalization")(_layer_norm_backward)


def _batch_or_group_norm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (input, weight, bias, ...): the statistics run over other axes, the arithmetic is the
    # layer norm's
    per_element = (LAYER_NORM_FLOPS["forward"] + LAYER_NORM_FLOPS["weight"] * _present(args, 1)
                   + LAYER_NORM_FLOPS["bias"] * _present(args, 2))
    return per_element * numel(args[0])


register("aten.native_group_norm", "aten.native_batch_norm", "aten._native_batch_norm_legit",
         "aten._native_batch_norm_legit_no_training",
         category="normalization")(_batch_or_group_norm)


def _statistics_norm_backward(args: Sequence[Any], weight: int, mask: int) -> int:
    # the layer norm's backward arithmetic, each gradient when requested (the weight's and the
    # bias's only for an affine norm)
    grad_input, grad_weight, grad_bias = _mask(args, mask)
    affine = _present(args, weight)
    per_element = (LAYER_NORM_FLOPS["grad_input"] * grad_input
                   + LAYER_NORM_FLOPS["grad_weight"] * (grad_weight and affine)
                   + LAYER_NORM_FLOPS["grad_bias"] * (grad_bias and affine))
    return per_element * numel(args[1])


def _batch_norm_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
    #  output_mask)
    return _statistics_norm_backward(args, weight=2, mask=9)


register("aten.native_batch_norm_backward", category="normalization")(_batch_norm_backward)


def _group_norm_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
    return _statistics_norm_backward(args, weight=4, mask=9)


register("aten.native_group_norm_backward", category="normalization")(_group_norm_backward)


def _rms_norm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (input, normalized_shape, weight, eps)
    per_element = RMS_NORM_FLOPS["forward"] + RMS_NORM_FLOPS["weight"] * _present(args, 2)
    return per_element * numel(args[0])


register("aten._fused_rms_norm", "aten.rms_norm", category="normalization")(_rms_norm)


def _rms_norm_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    # (grad_out, input, normalized_shape, rstd, weight, output_mask)
    grad_input, grad_weight = _mask(args, 5)[:2]
    per_element = (RMS_NORM_FLOPS["grad_input"] * grad_input
                   + RMS_NORM_FLOPS["grad_weight"] * (grad_weight and _present(args, 4)))
    return per_element * numel(args[1])


register("aten._fused_rms_norm_backward", category="normalization")(_rms_norm_backward)


def _softmax_flops(name: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return SOFTMAX_FLOPS[name] * numel(args[0])


for _name in SOFTMAX_FLOPS:
    # bound with partial, not a closure: the count runs at call time, where mutmut sees it
    register(f"aten.{_name}", category="normalization")(partial(_softmax_flops, _name))


def _nll_loss(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return numel(args[1])  # one add per target


register("aten.nll_loss_forward", "aten.nll_loss2d_forward", category="reduction")(_nll_loss)


def _nll_loss_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return numel(args[2])  # (grad_out, self, target, ...): one write per target


register("aten.nll_loss_backward", "aten.nll_loss2d_backward",
         category="reduction")(_nll_loss_backward)
