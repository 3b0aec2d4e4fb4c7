"""The optimizers of :data:`tensorledger.napkin.OPTIMIZERS` as real ``torch.optim`` objects.

SGD, momentum, Adagrad, RMSprop, Adam and AdamW are PyTorch's own, built with the kernel the
target runs (:data:`~tensorledger.hardware.target.OPTIMIZER_KERNELS`): the per-parameter loop
(``foreach=False``: torch's default on a CPU), the multi-tensor ``_foreach_*`` kernels
(``foreach=True``: its default on a GPU), or one fused kernel (``fused=True``).  Each has meta
kernels, so a step runs on meta (fused: on fake) tensors as well; the fp32 ``step`` counters
stay on the CPU as PyTorch puts them (fused: beside the parameters).  Lion
and 8-bit Adam are not in PyTorch and are written here, small but real: they keep exactly the
state their papers describe, which is what the accounting needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

from tensorledger.napkin.recipes import OPTIMIZERS, QUANTIZATION_BLOCK, resolve_optimizer

__all__ = ["Adam8bit", "Lion", "apart_by_kind", "make_optimizer", "state_tensors"]

Params = Iterable[torch.Tensor]


class Lion(Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): one momentum.

    update = sign(β1·m + (1−β1)·g); p ← p − lr·(update + wd·p); m ← β2·m + (1−β2)·g.
    """

    def __init__(self, params: Params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                update = exp_avg.lerp(p.grad, 1 - beta1).sign_()
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update, alpha=-group["lr"])
                exp_avg.lerp_(p.grad, 1 - beta2)


def _blocks(values: torch.Tensor) -> torch.Tensor:
    """The values as fp32 rows of QUANTIZATION_BLOCK, the last row padded with zeros."""
    flat = values.reshape(-1).float()
    pad = -flat.numel() % QUANTIZATION_BLOCK
    return torch.nn.functional.pad(flat, (0, pad)).reshape(-1, QUANTIZATION_BLOCK)


def _quantize(values: torch.Tensor, signed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise absmax quantisation to 8 bits: codes of values.numel() bytes, one fp32 scale
    per block of QUANTIZATION_BLOCK values."""
    blocks = _blocks(values)
    absmax = blocks.abs().amax(dim=1).clamp_min(1e-12)
    levels = 127.0 if signed else 255.0
    codes = (blocks / absmax[:, None] * levels).round_()
    codes = codes.to(torch.int8 if signed else torch.uint8).reshape(-1)[: values.numel()]
    return codes.reshape(values.shape).clone(), absmax


def _dequantize(codes: torch.Tensor, absmax: torch.Tensor, signed: bool) -> torch.Tensor:
    levels = 127.0 if signed else 255.0
    values = _blocks(codes) * (absmax[:, None] / levels)
    return values.reshape(-1)[: codes.numel()].reshape(codes.shape)


class Adam8bit(Optimizer):
    """Adam(W) with both moments kept in 8 bits (Dettmers et al. 2022, block-wise quantisation).

    State per parameter tensor: the first moment as int8 codes, the second as uint8 codes, one
    fp32 absmax per block of 2048 values for each, and PyTorch's fp32 ``step``.  The codes are
    linear in the block's absmax (the paper uses a dynamic tree map, same bytes, better
    accuracy); the update is computed in fp32 temporaries that do not outlive the step.
    """

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    zeros = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg"], state["exp_avg_absmax"] = _quantize(zeros, True)
                    state["exp_avg_sq"], state["exp_avg_sq_absmax"] = _quantize(zeros, False)
                state["step"] += 1
                step = float(state["step"].item())
                grad = p.grad.float()
                exp_avg = _dequantize(state["exp_avg"], state["exp_avg_absmax"], True)
                exp_avg_sq = _dequantize(state["exp_avg_sq"], state["exp_avg_sq_absmax"], False)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt_().add_(group["eps"])
                update = exp_avg / (1 - beta1 ** step) / denom
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update.to(p.dtype), alpha=-group["lr"])
                state["exp_avg"], state["exp_avg_absmax"] = _quantize(exp_avg, True)
                state["exp_avg_sq"], state["exp_avg_sq_absmax"] = _quantize(exp_avg_sq, False)


def apart_by_kind(params: list[Any]) -> Any:
    """``params``, or where DTensors and plain tensors mix (tensor parallelism with no data
    parallel wrapper: its sharded linears beside its whole norms), two parameter groups, one
    of each: an optimizer's foreach kernels take one kind of tensor a call (AdamW's step over
    both refuses: "got mixed torch.Tensor and DTensor").

    >>> plain = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    >>> apart_by_kind(plain) == plain
    True
    """
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, dict) for p in params):  # groups already
        return params
    dtensors = [p for p in params if isinstance(p, DTensor)]
    if not dtensors or len(dtensors) == len(params):
        return params
    return [{"params": dtensors}, {"params": [p for p in params if not isinstance(p, DTensor)]}]


def make_optimizer(name: str, params: Params, lr: float = 1e-3,
                   kernel: str = "for-loop") -> Optimizer:
    """A real optimizer for a napkin optimizer name or alias (``adamw``, ``sgd-momentum``...),
    running ``kernel`` (``for-loop``, ``foreach`` or ``fused``; Lion and 8-bit Adam: loops).

    >>> p = torch.nn.Parameter(torch.ones(3, device="meta"))
    >>> opt = make_optimizer("adamw", [p], kernel="foreach")
    >>> type(opt).__name__, opt.defaults["foreach"]
    ('AdamW', True)
    """
    key = resolve_optimizer(name).name
    params = apart_by_kind(list(params))
    how: dict[str, Any] = {"foreach": kernel == "foreach"}
    if kernel == "fused":
        how = {"fused": True}
    builders: dict[str, Callable[[], Optimizer]] = {
        "sgd": lambda: torch.optim.SGD(params, lr=lr, **how),
        "momentum": lambda: torch.optim.SGD(params, lr=lr, momentum=0.9, **how),
        "adagrad": lambda: torch.optim.Adagrad(params, lr=lr, **how),
        "rmsprop": lambda: torch.optim.RMSprop(params, lr=lr, **how),
        "adam": lambda: torch.optim.Adam(params, lr=lr, **how),
        "adamw": lambda: torch.optim.AdamW(params, lr=lr, weight_decay=0.1, **how),
        "lion": lambda: Lion(params, lr=lr, weight_decay=0.1),
        "adam8bit": lambda: Adam8bit(params, lr=lr, weight_decay=0.1),
    }
    assert set(builders) == set(OPTIMIZERS), "one builder per napkin optimizer"
    return builders[key]()


def state_tensors(optimizer: Optimizer) -> list[torch.Tensor]:
    """Every tensor in ``optimizer.state`` (moments, step counters, quantisation scales); of
    a ``ZeroRedundancyOptimizer``, its rank's partition (the local optimizer it wraps)."""
    found: list[torch.Tensor] = []
    inner: Optimizer = getattr(optimizer, "optim", optimizer)
    for state in inner.state.values():
        values: dict[str, Any] = state
        found.extend(v for v in values.values() if isinstance(v, torch.Tensor))
    return found
