"""Activation checkpointing as the step runs it: the reference model's blocks wrapped in
``torch.utils.checkpoint`` (non-reentrant), and transformers' own checkpointing of every layer,
each recomputed inside the forward's target program and marked as a recomputation
(:func:`tensorledger.trace.recorder.recomputation`), so MFU can leave it out and HFU count it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tensorledger.errors import InputError
from tensorledger.hardware.target import Target
from tensorledger.trace.kernels import active_target, target_program
from tensorledger.trace.recorder import recomputation

__all__ = ["CheckpointedBlock", "checkpoint_blocks", "checkpoint_hf_layers",
           "checkpoint_in_target"]


class CheckpointedBlock(nn.Module):
    """A block whose insides are recomputed in backward (``torch.utils.checkpoint``,
    non-reentrant): only its input is kept.

    The recomputation runs inside autograd's backward, where no torch-function mode of the
    forward is active: the target's program (:func:`target_program`) is entered again inside
    the recomputed function, so the recomputation dispatches attention as the forward did."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def _run(self, x: torch.Tensor, target: Target | None) -> torch.Tensor:
        with recomputation():
            if target is None:
                return cast(torch.Tensor, self.block(x))
            with target_program(target):
                return cast(torch.Tensor, self.block(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, checkpoint(self._run, x, active_target(),
                                             use_reentrant=False))


def checkpoint_in_target(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``torch.utils.checkpoint`` (non-reentrant) of ``function`` whose recomputation enters
    the forward's target program again, as :class:`CheckpointedBlock` does: what transformers'
    layers call as their checkpointing function under ``--checkpoint``."""
    target = active_target()

    def run(*inner: Any, **named: Any) -> Any:
        with recomputation():
            if target is None:
                return function(*inner, **named)
            with target_program(target):
                return function(*inner, **named)

    return checkpoint(run, *args, use_reentrant=False, **kwargs)


def checkpoint_hf_layers(model: nn.Module) -> nn.Module:
    """transformers' own activation checkpointing of every layer, recomputed in the target's
    program (:func:`checkpoint_in_target`)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise InputError(f"--checkpoint: transformers' {type(model).__name__} does not support "
                         "activation checkpointing")
    enable: Callable[[], None] = getattr(model, "activation_checkpointing_enable", None) or \
        getattr(model, "gradient_checkpointing_enable")  # noqa: B009  # transformers < 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enable()
    for module in model.modules():
        if hasattr(module, "_gradient_checkpointing_func"):
            setattr(module, "_gradient_checkpointing_func", checkpoint_in_target)  # noqa: B010
    return model


def checkpoint_blocks(model: nn.Module) -> nn.Module:
    """Wrap every entry of ``model.blocks`` in :class:`CheckpointedBlock`, in place."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise InputError(f"{type(model).__name__} has no .blocks list to checkpoint")
    for i, block in enumerate(blocks):
        blocks[i] = CheckpointedBlock(block)
    return model
