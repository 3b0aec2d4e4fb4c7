"""The lecture's deep network: L blocks of (D×D matmul, then an activation).

Parameters are exactly D²·L (no biases), so every count about it is easy to derive by hand.
The activation is selectable because what autograd keeps differs: ReLU saves its output, which
is also the next block's input; GELU saves its input, a second tensor per block.  The
checkpointed variant recomputes each block in backward instead of keeping its insides.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Literal, cast, get_args

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tensorledger.errors import ModelError

__all__ = ["Activation", "DeepNetwork", "MatmulBlock"]

Activation = Literal["relu", "gelu"]


class MatmulBlock(nn.Module):
    """x ↦ activation(x · W) with W of D×D and no bias."""

    def __init__(self, d_model: int, activation: Activation) -> None:
        super().__init__()
        self.linear = nn.Linear(d_model, d_model, bias=False)
        self.activation: nn.Module = nn.ReLU() if activation == "relu" else nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.activation(self.linear(x)))


class DeepNetwork(nn.Module):
    """``n_layers`` blocks of D×D Linear + activation; D²·L parameters.

    >>> net = DeepNetwork(16, 3, device="meta")
    >>> sum(p.numel() for p in net.parameters())    # 16² · 3
    768
    """

    def __init__(self, d_model: int, n_layers: int, activation: str = "relu",
                 checkpointed: bool = False, device: str | torch.device | None = None) -> None:
        super().__init__()
        if activation not in get_args(Activation):
            raise ModelError(f"unknown activation {activation!r}; known: relu, gelu")
        for key, value in (("d_model", d_model), ("n_layers", n_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"deep network: {key} must be a whole number >= 1, "
                                 f"got {value!r}")
        self.d_model = d_model
        self.activation_name = activation
        # Checkpointing each block keeps only block inputs for backward and recomputes the rest.
        self.checkpointed = checkpointed
        with torch.device(device) if device is not None else nullcontext():
            self.blocks = nn.ModuleList(
                MatmulBlock(d_model, cast(Activation, activation)) for _ in range(n_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.checkpointed:
                x = cast(torch.Tensor, checkpoint(block, x, use_reentrant=False))
            else:
                x = block(x)
        return x

