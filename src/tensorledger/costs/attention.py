"""Fused scaled-dot-product attention kernels, forward and backward.

Counted as the matmuls inside them (softmax and scaling are left out, as torch's
``FlopCounterMode`` does); query heads ``h`` may be a multiple of key/value heads (GQA):

- forward: scores Q·Kᵀ (2·b·h·s_q·s_k·d) and P·V (2·b·h·s_q·s_k·d_v);
- backward of a fused kernel: the scores are recomputed (one product), then dV = Pᵀ·dO,
  dP = dO·Vᵀ, dQ = dS·K and dKᵀ = Qᵀ·dS: five products, 2.5× the forward.

Causal masking: ``flops`` counts every (query, key) pair (the "full" convention of nanoGPT,
Chinchilla and FlopCounterMode); the trace also carries the "causal-halved" count (Megatron-LM)
for ops whose causal flag is set.

>>> attention_flops(batch=1, heads=2, seq_q=4, seq_k=4, dim=8, dim_v=8)  # 2 * (2*1*2*4*4*8)
1024
>>> attention_backward_flops(batch=1, heads=2, seq_q=4, seq_k=4, dim=8, dim_v=8)  # 2.5 * 1024
2560
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorledger.costs.matmul import mm_flops
from tensorledger.costs.registry import register, shape

__all__ = ["attention_backward_flops", "attention_flops"]


def attention_flops(batch: int, heads: int, seq_q: int, seq_k: int, dim: int, dim_v: int) -> int:
    """Forward FLOPs: scores Q·Kᵀ, then probabilities · V."""
    scores = mm_flops(seq_q, seq_k, dim, batch=batch * heads)
    mix = mm_flops(seq_q, dim_v, seq_k, batch=batch * heads)
    return scores + mix


def attention_backward_flops(batch: int, heads: int, seq_q: int, seq_k: int, dim: int,
                             dim_v: int) -> int:
    """Backward FLOPs of a fused kernel: recompute the scores, then four products."""
    n = batch * heads
    recompute = mm_flops(seq_q, seq_k, dim, batch=n)
    grad_v = mm_flops(seq_k, dim_v, seq_q, batch=n)
    grad_p = mm_flops(seq_q, seq_k, dim_v, batch=n)
    grad_q = mm_flops(seq_q, dim, seq_k, batch=n)
    grad_k = mm_flops(seq_k, dim, seq_q, batch=n)
    return recompute + grad_v + grad_p + grad_q + grad_k


def _dims(q: Any, k: Any, v: Any, heads_axis: int) -> tuple[int, int, int, int, int, int]:
    # (batch, heads, seq, dim) for the sdpa kernels; (batch, seq, heads, dim) for the raw ones
    qs, ks, vs = shape(q), shape(k), shape(v)
    seq_axis = 2 if heads_axis == 1 else 1
    return qs[0], qs[heads_axis], qs[seq_axis], ks[seq_axis], qs[3], vs[3]


def _flag(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str) -> bool:
    if name in kwargs:
        return bool(kwargs[name])
    return bool(args[index]) if len(args) > index else False


def kwargs_or(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str) -> Any:
    """An argument given by name or position (0 when absent)."""
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index and args[index] is not None else 0


def _forward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return attention_flops(*_dims(args[0], args[1], args[2], heads_axis=1))


def _backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return attention_backward_flops(*_dims(args[1], args[2], args[3], heads_axis=1))


def _raw_forward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return attention_flops(*_dims(args[0], args[1], args[2], heads_axis=2))


def _raw_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return attention_backward_flops(*_dims(args[1], args[2], args[3], heads_axis=2))


register("aten._scaled_dot_product_flash_attention", category="attention",
         causal=lambda a, k: _flag(a, k, 4, "is_causal"))(_forward)
register("aten._scaled_dot_product_flash_attention_for_cpu", category="attention",
         causal=lambda a, k: _flag(a, k, 4, "is_causal"))(_forward)
register("aten._scaled_dot_product_efficient_attention", category="attention",
         causal=lambda a, k: _flag(a, k, 6, "is_causal"))(_forward)
register("aten._scaled_dot_product_cudnn_attention", category="attention",
         causal=lambda a, k: _flag(a, k, 6, "is_causal"))(_forward)
register("aten._scaled_dot_product_fused_attention_overrideable", category="attention",
         causal=lambda a, k: _flag(a, k, 5, "is_causal"))(_forward)
register("aten._scaled_dot_product_flash_attention_backward", category="attention",
         causal=lambda a, k: _flag(a, k, 11, "is_causal"))(_backward)
register("aten._scaled_dot_product_flash_attention_for_cpu_backward", category="attention",
         causal=lambda a, k: _flag(a, k, 7, "is_causal"))(_backward)
register("aten._scaled_dot_product_efficient_attention_backward", category="attention",
         causal=lambda a, k: _flag(a, k, 11, "is_causal"))(_backward)
register("aten._scaled_dot_product_cudnn_attention_backward", category="attention",
         causal=lambda a, k: _flag(a, k, 14, "is_causal"))(_backward)
register("aten._flash_attention_forward", category="attention",
         causal=lambda a, k: _flag(a, k, 8, "is_causal"))(_raw_forward)
register("aten._flash_attention_backward", category="attention",
         causal=lambda a, k: _flag(a, k, 11, "is_causal"))(_raw_backward)
# custom_mask_type: 0 no mask, 1 causal from the top left, 2 causal from the bottom right
_CAUSAL_MASK_TYPES = (1, 2)
register("aten._efficient_attention_forward", category="attention",
         causal=lambda a, k: int(kwargs_or(a, k, 9, "custom_mask_type")) in _CAUSAL_MASK_TYPES,
         )(_raw_forward)
register("aten._efficient_attention_backward", category="attention",
         causal=lambda a, k: int(kwargs_or(a, k, 14, "custom_mask_type")) in _CAUSAL_MASK_TYPES,
         )(_raw_backward)

