"""What autograd keeps for backward: saved tensors per module, each storage counted once.

:func:`saved_activations` runs a forward pass under ``torch.autograd.graph.saved_tensors_hooks``
and sees every tensor an op saves for its backward.  Several ops often save one storage (the
input of the Q, K and V projections; the output of ReLU, which is also the next matmul's
input; views of one buffer): it is counted once, at the full size of its storage, under the
module that saved it first.  Parameters and buffers that ops save are not activations (they
exist anyway) and are reported apart.  Works on any device, meta and fake included, because it
only reads sizes.

>>> from tensorledger.models import DeepNetwork
>>> net = DeepNetwork(8, 3, "relu", device="meta")
>>> saved, _ = saved_activations(net, lambda: net(torch.ones(2, 8, device="meta")))
>>> saved.total_bytes                   # ReLU: (L + 1)·B·D fp32 values = 4 · 2 · 8 · 4
256
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

from tensorledger.trace.storage import storage_bytes, storage_key

__all__ = ["ModuleSaved", "SavedActivations", "SavedTensor", "saved_activations"]

T = TypeVar("T")

#: Module path of tensors saved outside every submodule (the loss, glue code).
ROOT = ""


@dataclass(frozen=True)
class SavedTensor:
    """One storage kept for backward: who saved it first, its size, and the view that did."""

    module: str
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    saves: int  # how many times ops saved a view of this storage


@dataclass(frozen=True)
class ModuleSaved:
    """Saved bytes attributed to one module (its own ops, not its children's)."""

    module: str
    saved_bytes: int
    storages: int


@dataclass(frozen=True)
class SavedActivations:
    """Everything a forward pass saved for backward, storages counted once."""

    total_bytes: int
    storages: int
    saves: int  # saved-tensor events, before de-duplication
    params_saved_bytes: int  # parameters and buffers that ops saved: no extra memory
    by_module: tuple[ModuleSaved, ...]
    tensors: tuple[SavedTensor, ...]


@dataclass
class _Entry:
    module: str
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    saves: int = 1


def saved_activations(model: nn.Module, forward: Callable[[], T]
                      ) -> tuple[SavedActivations, T]:
    """Run ``forward()`` and account what it saves for backward; return the accounting and
    whatever ``forward`` returned (so the caller can run backward on it)."""
    names = {id(m): name for name, m in model.named_modules()}
    stack: list[str] = [ROOT]
    hooks = []
    for module in model.modules():
        name = names[id(module)]

        def enter(_m: nn.Module, _args: object, name: str = name) -> None:
            stack.append(name)

        def leave(_m: nn.Module, _args: object, _out: object) -> None:
            stack.pop()

        hooks.append(module.register_forward_pre_hook(enter))
        hooks.append(module.register_forward_hook(leave, always_call=True))
    resident = {storage_key(t): storage_bytes(t)
                for t in (*model.parameters(), *model.buffers())}
    found: dict[int, _Entry] = {}
    keep: list[torch.Tensor] = []  # holds each storage so its key cannot be reused meanwhile
    params_saved: set[int] = set()
    saves = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saves
        saves += 1
        key = storage_key(tensor)
        if key in resident:
            params_saved.add(key)
        elif key in found:
            found[key].saves += 1
        else:
            found[key] = _Entry(stack[-1], storage_bytes(tensor), tuple(tensor.shape),
                                str(tensor.dtype).removeprefix("torch."))
            keep.append(tensor)
        return tensor

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            result = forward()
    finally:
        for hook in hooks:
            hook.remove()
    tensors = tuple(SavedTensor(module=e.module, nbytes=e.nbytes, shape=e.shape, dtype=e.dtype,
                                saves=e.saves) for e in found.values())
    per_module: dict[str, list[int]] = {}
    for t in tensors:
        entry = per_module.setdefault(t.module, [0, 0])
        entry[0] += t.nbytes
        entry[1] += 1
    by_module = tuple(ModuleSaved(module=m, saved_bytes=b, storages=n)
                      for m, (b, n) in per_module.items())
    return SavedActivations(total_bytes=sum(t.nbytes for t in tensors), storages=len(tensors),
                            saves=saves,
                            params_saved_bytes=sum(resident[k] for k in params_saved),
                            by_module=by_module, tensors=tensors), result
