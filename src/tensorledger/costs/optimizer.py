"""Fused optimizer kernels, counted per parameter element.

AdamW per element: decoupled decay p·(1 − lr·λ) (2), m ← β₁m + (1−β₁)g (3),
v ← β₂v + (1−β₂)g² (4), the step lr·m̂/(√v̂ + ε) with bias corrections folded into scalars:
square root, add, divide, multiply, subtract (5): 14.  Adam: the same without the decay
but with coupled L2 decay g + λp (2) when ``weight_decay`` is set: 12 or 14.
SGD: p − lr·g (2); coupled decay adds 2, momentum μb + g adds 2, Nesterov g + μb adds 2.
Adagrad: s ← s + g² (2), p − lr·g/(√s + ε) (4): 6, and 2 more with weight decay.
The per-tensor step counters and bias corrections are scalars and left out.

>>> ADAMW_FLOPS_PER_ELEMENT, SGD_FLOPS_PER_ELEMENT, ADAGRAD_FLOPS_PER_ELEMENT
(14, 2, 6)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorledger.costs.registry import numel, register

__all__ = ["ADAGRAD_FLOPS_PER_ELEMENT", "ADAMW_FLOPS_PER_ELEMENT", "SGD_FLOPS_PER_ELEMENT"]

ADAMW_FLOPS_PER_ELEMENT = 14
ADAM_FLOPS_PER_ELEMENT = 12
SGD_FLOPS_PER_ELEMENT = 2
ADAGRAD_FLOPS_PER_ELEMENT = 6
WEIGHT_DECAY_FLOPS = 2  # coupled decay: g + λ·p
MOMENTUM_FLOPS = 2  # μ·b + g


def _elements(args: Sequence[Any]) -> int:
    return sum(numel(p) for p in args[0])


def _fused_adamw(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return ADAMW_FLOPS_PER_ELEMENT * _elements(args)


register("aten._fused_adamw_", category="elementwise")(_fused_adamw)


def _fused_adam(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    decay = WEIGHT_DECAY_FLOPS if kwargs.get("weight_decay", 0.0) else 0
    return (ADAM_FLOPS_PER_ELEMENT + decay) * _elements(args)


register("aten._fused_adam_", category="elementwise")(_fused_adam)


def _fused_sgd(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    per_element = SGD_FLOPS_PER_ELEMENT
    per_element += WEIGHT_DECAY_FLOPS if kwargs.get("weight_decay", 0.0) else 0
    per_element += MOMENTUM_FLOPS if kwargs.get("momentum", 0.0) else 0
    per_element += MOMENTUM_FLOPS if kwargs.get("nesterov", False) else 0
    return per_element * _elements(args)


register("aten._fused_sgd_", category="elementwise")(_fused_sgd)


def _fused_adagrad(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    decay = WEIGHT_DECAY_FLOPS if kwargs.get("weight_decay", 0.0) else 0
    return (ADAGRAD_FLOPS_PER_ELEMENT + decay) * _elements(args)


register("aten._fused_adagrad_", category="elementwise")(_fused_adagrad)
