"""Attention as the target runs it: scaled-dot-product attention sent to the kernel PyTorch
would pick on the chip the step is predicted for, whatever device the trace runs on.

On fake tensors of this CPU, ``F.scaled_dot_product_attention`` would take the CPU's path (its
math path with dropout or some masks: every B·H·S² score saved for backward); on meta it is
decomposed.  Inside :func:`target_program`, each call is decided by
:meth:`~tensorledger.hardware.target.Target.attention_kernel` and run as that kernel's aten op
(``_scaled_dot_product_flash_attention``, ``_scaled_dot_product_efficient_attention``, or
``_scaled_dot_product_attention_math``: in fp32 for half inputs, or in their own dtype when the
target is told to run attention ``eager``), whose meta functions give the shapes on any device.
What PyTorch's CUDA entry does around the kernel is done here too, so it is recorded: under
autocast, fp32 inputs cast to the autocast dtype; a boolean mask turned into an additive one
in the inputs' dtype; for flash, head sizes padded to a multiple of 8; for memory-efficient
attention, the mask padded to a multiple of 16 keys, and grouped keys and values repeated to
the query heads (the meta function of its backward takes no grouped heads).

A target that chooses for itself (:attr:`Target.native`: the CPU, real CUDA tensors) is left
alone, except on meta, where attention goes to the CPU fused kernel's meta function so that
meta, fake and real CPU tensors record the same ops.  Every decision is told to the recorders
that listen (:func:`listen`), with the module it ran in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from tensorledger.dtypes import resolve_dtype
from tensorledger.hardware.target import Target

__all__ = ["KERNEL_OPS", "active_target", "listen", "sdpa_on", "target_program"]

_SDPA = F.scaled_dot_product_attention
_TARGET: ContextVar[Target | None] = ContextVar("tensorledger_target", default=None)
_LISTENERS: list[Callable[[str, str], None]] = []

#: The aten op each decision runs (``cpu-flash``: the CPU's fused kernel, used on meta).
KERNEL_OPS = {
    "flash": "aten._scaled_dot_product_flash_attention",
    "efficient": "aten._scaled_dot_product_efficient_attention",
    "math": "aten._scaled_dot_product_attention_math",
    "eager": "aten._scaled_dot_product_attention_math",  # in the inputs' dtype
    "cpu-flash": "aten._scaled_dot_product_flash_attention_for_cpu",
}


def active_target() -> Target | None:
    """The target of the innermost :func:`target_program`, if any."""
    return _TARGET.get()


@contextmanager
def listen(tell: Callable[[str, str], None]) -> Iterator[None]:
    """Call ``tell(kernel, reason)`` for every attention call decided inside."""
    _LISTENERS.append(tell)
    try:
        yield
    finally:
        _LISTENERS.remove(tell)


def _tell(kernel: str, reason: str) -> None:
    for tell in list(_LISTENERS):
        tell(kernel, reason)


def _autocast(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """What CUDA autocast does to SDPA's inputs (it is on its lower-precision list)."""
    device = tensors[0].device.type
    kind = device if device in ("cpu", "cuda") else "cpu"
    if not torch.is_autocast_enabled(kind):
        return list(tensors)
    dtype = torch.get_autocast_dtype(kind)
    return [t.to(dtype) if t.is_floating_point() and t.dtype == torch.float32 else t
            for t in tensors]


def _repeat_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    group = heads // t.shape[-3]
    return t.repeat_interleave(group, dim=-3) if group > 1 else t


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
           is_causal: bool, scale: float | None) -> torch.Tensor:
    head = q.shape[-1]
    pad = -head % 8
    if pad:
        q, k, v = (F.pad(t, (0, pad)) for t in (q, k, v))
    scale = scale if scale is not None else head ** -0.5
    out: torch.Tensor = torch.ops.aten._scaled_dot_product_flash_attention.default(
        q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    return out[..., :head] if pad else out


def _efficient(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               dropout_p: float, is_causal: bool, scale: float | None) -> torch.Tensor:
    heads = q.shape[-3]
    k, v = _repeat_heads(k, heads), _repeat_heads(v, heads)
    if mask is not None:
        keys = k.shape[-2]
        pad = -keys % 16
        if pad:
            mask = F.pad(mask, (0, pad))[..., :keys]
        mask = mask.expand(q.shape[0], heads, q.shape[-2], keys)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    out: torch.Tensor = torch.ops.aten._scaled_dot_product_efficient_attention.default(
        q, k, v, mask, grad, dropout_p, is_causal, scale=scale)[0]
    return out


@contextmanager
def _half_reduction(on: bool) -> Iterator[None]:
    """The math kernel in the inputs' half dtype (``on``); otherwise as PyTorch's switch is set
    (by default: half inputs computed in fp32).  Only the forward is run inside: it decomposes
    into the ops whose gradients backward runs."""
    if not on:
        yield
        return
    before = bool(torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed())  # type: ignore[no-untyped-call]
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


def _math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          dropout_p: float, is_causal: bool, scale: float | None, gqa: bool,
          half: bool = False) -> torch.Tensor:
    with _half_reduction(half):
        out: torch.Tensor = torch.ops.aten._scaled_dot_product_attention_math.default(
            q, k, v, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=gqa)[0]
    return out


def sdpa_on(target: Target, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
            attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
            is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False
            ) -> torch.Tensor | None:
    """``F.scaled_dot_product_attention`` as ``target`` runs it; None to leave the call to
    PyTorch (a target that chooses for itself, off meta; an input that is not 4-d)."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return None
    grouped = key.shape[-3] != query.shape[-3]
    if grouped and not enable_gqa:
        return None  # PyTorch's own error
    if target.native:
        if not query.is_meta or value.shape[-1] != query.shape[-1]:
            # off meta, or values narrower than queries (latent attention), which the CPU's
            # fused kernel refuses: PyTorch's own choice, its math path
            return None
        _tell("cpu-flash", "meta: the CPU fused kernel's meta function")
        out: torch.Tensor = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return out
    query, key, value = _autocast((query, key, value))
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    dtype = resolve_dtype(str(query.dtype).removeprefix("torch.")).name
    kernel, reason = target.attention_kernel(
        dtype, head_dims=(query.shape[-1], key.shape[-1], value.shape[-1]),
        mask=attn_mask is not None, causal=is_causal, queries=query.shape[-2],
        keys=key.shape[-2], grouped=grouped, grad=grad)
    _tell(kernel, reason)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # as PyTorch's entry does for every kernel: True keeps a score, False adds -inf
        attn_mask = torch.zeros((), dtype=query.dtype, device=query.device).masked_fill(
            attn_mask.logical_not(), float("-inf"))
    if kernel == "flash":
        return _flash(query, key, value, dropout_p, is_causal, scale)
    if kernel == "efficient":
        return _efficient(query, key, value, attn_mask, dropout_p, is_causal, scale)
    return _math(query, key, value, attn_mask, dropout_p, is_causal, scale, grouped,
                 half=kernel == "eager")


class _TargetAttention(TorchFunctionMode):
    def __init__(self, target: Target) -> None:
        super().__init__()
        self.target = target

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _SDPA and args:
            out = sdpa_on(self.target, *args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


@contextmanager
def target_program(target: Target) -> Iterator[None]:
    """Run attention inside as ``target`` would (see the module's docstring)."""
    token = _TARGET.set(target)
    try:
        with _TargetAttention(target):
            yield
    finally:
        _TARGET.reset(token)
