"""Precision recipes as real training steps: what each napkin recipe means for the tensors.

=================  ==============  ============  ===========  ==================================
recipe             parameters      gradients     master       optimizer state
=================  ==============  ============  ===========  ==================================
fp32               fp32            fp32          —            fp32
bf16               bf16            bf16          —            bf16 (PyTorch: zeros_like(param))
mixed-bf16         fp32            fp32          —            fp32; forward under bf16 autocast
bf16-master        bf16            bf16          fp32 copy    fp32, kept for the master copy
bf16-fp32-states   bf16            bf16          —            fp32, applied to the bf16 weights
fp8-tensorwise     fp32            fp32          —            fp32; as mixed-bf16, the linears'
fp8-rowwise                                                   matmuls in fp8 (:mod:`.float8`)
=================  ==============  ============  ===========  ==================================

:class:`RecipeOptimizer` wraps a real optimizer (see :mod:`.optimizers`) so each recipe holds
what it says.  For ``bf16-master`` the inner optimizer updates persistent fp32 copies and the
bf16 weights are copied from them after each step.  For ``bf16-fp32-states`` there is no
persistent fp32 weight: each tensor gets its own inner optimizer over an fp32 *shadow* whose
storage exists only while that tensor is updated (the fp32 parameter and gradient are
temporaries of one tensor's update, the way a fused kernel would hold them in registers).
Optimizer step counters are fp32 0-dim CPU tensors, one per parameter tensor, in every recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn
from torch.optim import Optimizer

from tensorledger.napkin.recipes import Optimizer as OptimizerEntry
from tensorledger.napkin.recipes import Precision, resolve_optimizer, resolve_precision
from tensorledger.workload.optimizers import make_optimizer, state_tensors

__all__ = ["RecipeOptimizer", "param_dtype"]


def param_dtype(precision: str | Precision) -> torch.dtype:
    """The dtype the model's parameters are built in under ``precision``.

    >>> param_dtype("mixed-bf16"), param_dtype("lecture")
    (torch.float32, torch.bfloat16)
    """
    p = resolve_precision(precision) if isinstance(precision, str) else precision
    return torch.float32 if p.param_bytes == 4 else torch.bfloat16


class RecipeOptimizer:
    """An optimizer step under a precision recipe; knows which tensors are master and state.

    >>> model = nn.Linear(4, 4, bias=False, device="meta", dtype=torch.bfloat16)
    >>> opt = RecipeOptimizer(model.parameters(), "adamw", "bf16-master")
    >>> model.weight.grad = torch.zeros_like(model.weight)
    >>> opt.step()
    >>> [(t.dtype, tuple(t.shape)) for t in opt.master_tensors()]
    [(torch.float32, (4, 4))]
    """

    def __init__(self, params: Iterator[nn.Parameter] | list[nn.Parameter],
                 optimizer: str | OptimizerEntry, precision: str | Precision,
                 lr: float = 1e-3,
                 inner: Callable[[list[nn.Parameter]], Optimizer] | None = None,
                 kernel: str = "for-loop") -> None:
        self.precision = (resolve_precision(precision) if isinstance(precision, str)
                          else precision)
        self.optimizer_name = (resolve_optimizer(optimizer) if isinstance(optimizer, str)
                               else optimizer).name
        optimizer = self.optimizer_name
        self.params: list[nn.Parameter] = list(dict.fromkeys(params))  # tied weights once
        self._lr = lr
        self._kernel = kernel  # for-loop, foreach or fused (workload.optimizers)
        self._master: list[nn.Parameter] = []
        self._shadows: list[nn.Parameter] = []
        self._inner: list[Optimizer] = []
        name = self.precision.name
        if name == "bf16-master":
            self._master = [nn.Parameter(p.detach().float()) for p in self.params]
            self._inner = [make_optimizer(optimizer, self._master, lr, kernel)]
        elif name == "bf16-fp32-states":
            # Inner optimizers are made at the first step, when each shadow has its shape
            # (Adagrad makes its state in the constructor).
            self._shadows = [nn.Parameter(torch.empty(0, device=p.device)) for p in self.params]
        else:
            # ``inner``: the optimizer over the parameters, made by the caller (a layout's
            # sharded one); a recipe with master copies or shadows takes none
            self._inner = [make_optimizer(optimizer, self.params, lr, kernel) if inner is None
                           else inner(self.params)]

    def autocast(self, device_type: str) -> AbstractContextManager[object]:
        """The context the forward pass runs in: bf16 autocast for ``mixed-bf16`` (and the fp8
        recipes built on it) only.

        PyTorch has no autocast for the meta device: there the forward runs in fp32, which
        changes the saved activations but not the per-parameter state."""
        if self.precision.autocast and device_type != "meta":
            return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
        return nullcontext()

    @torch.no_grad()
    def step(self) -> None:
        name = self.precision.name
        if name == "bf16-master":
            for p, master in zip(self.params, self._master, strict=True):
                master.grad = None if p.grad is None else p.grad.float()
            self._inner[0].step()
            for p, master in zip(self.params, self._master, strict=True):
                p.copy_(master)
                master.grad = None  # the fp32 gradient is a temporary of the step
        elif name == "bf16-fp32-states":
            first = not self._inner
            for i, (p, shadow) in enumerate(zip(self.params, self._shadows, strict=True)):
                shadow.data = p.detach().float()
                if first:
                    self._inner.append(make_optimizer(self.optimizer_name, [shadow], self._lr,
                                                      self._kernel))
                if p.grad is None:
                    shadow.data = torch.empty(0, device=p.device)
                    continue
                shadow.grad = p.grad.float()
                self._inner[i].step()
                p.copy_(shadow)
                shadow.grad = None
                shadow.data = torch.empty(0, device=p.device)
        else:
            self._inner[0].step()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def master_tensors(self) -> list[torch.Tensor]:
        """The fp32 master copies (``bf16-master`` only)."""
        return list(self._master)

    def state_tensors(self) -> list[torch.Tensor]:
        """Every optimizer state tensor: moments, step counters, quantisation scales."""
        return [t for inner in self._inner for t in state_tensors(inner)]
