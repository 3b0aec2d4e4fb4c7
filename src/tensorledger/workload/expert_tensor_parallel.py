"""Expert tensor parallelism (torchtitan's ETP = TP): beside ``--ep`` and ``--tp``, each tp rank
keeps 1/TP of every local routed expert's hidden width, the way Megatron splits a dense MLP.

The reference experts' ``gate`` and ``up`` (E/EP, d, f) are cut along their output, the hidden
width (column-parallel), ``down`` (E/EP, f, d) along its input (row-parallel): tp rank t keeps
hidden features t·f/TP … (t + 1)·f/TP − 1, as plain tensors (as expert parallelism keeps its
experts: FSDP2 may shard them further over ``fsdp``).

The tp ranks of one ep rank hold the same block input (replicated over tp) and route it alike,
so they receive the same token-slots by the ep all-to-all.  Each runs its slice of every
expert on them:

- forward, its output slots are a partial sum over its hidden features: one all-reduce over
  the tp group of the (slots, d) output before the combine (Megatron's *g*);
- backward, the gradient of the experts' input slots is a partial sum the same way: one
  all-reduce over tp of the (slots, d) gradient (Megatron's *f*, the identity in forward).

Both are ``all_reduce`` calls of torch's functional collectives on the tp group, inside small
autograd functions, so the recorder sees them as collectives of the experts' module.  A rank
holds, of each block of routed experts, E/EP experts × 1/ETP of each: its parameters,
gradients and optimizer state are 1/(EP · ETP) of the block's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from tensorledger.errors import InputError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["from_expert_shards", "split_expert_width", "to_expert_shards"]

#: The reference experts' matrices and the dimension of each that is the hidden width.
_HIDDEN_DIM = (("gate", 2), ("up", 2), ("down", 1))


def _all_reduce(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    from torch.distributed import _functional_collectives as funcol

    return funcol.wait_tensor(  # type: ignore[no-untyped-call, no-any-return]
        funcol.all_reduce(tensor, "sum", group))


class _ToShards(torch.autograd.Function):
    """x ↦ x in forward; its gradient, partial on each tp rank, all-reduced in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _all_reduce(grad.contiguous(), ctx.group), None


class _FromShards(torch.autograd.Function):
    """The tp ranks' partial sums all-reduced in forward; the gradient as given in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        return _all_reduce(x.contiguous(), group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def to_expert_shards(slots: torch.Tensor, group: Any) -> torch.Tensor:
    """The experts' input slots, whose gradient is all-reduced over the tp ``group``."""
    return cast(torch.Tensor, _ToShards.apply(slots, group))  # type: ignore[no-untyped-call]


def from_expert_shards(slots: torch.Tensor, group: Any) -> torch.Tensor:
    """The experts' output slots, all-reduced over the tp ``group``."""
    return cast(torch.Tensor, _FromShards.apply(slots, group))  # type: ignore[no-untyped-call]


def split_expert_width(module: nn.Module, name: str, mesh: DeviceMesh) -> None:
    """Keep this tp rank's 1/TP of the hidden width of every expert of the reference experts
    ``module`` (``mesh``: the 1-D tp mesh), in place; refused in one line when TP does not
    divide the width.

    >>> from tensorledger.models.moe import RoutedExperts
    >>> from tensorledger.napkin.transformer import get_preset
    >>> from tensorledger.workload.parallel import fake_process_group
    >>> with fake_process_group(2):
    ...     from torch.distributed.device_mesh import init_device_mesh
    ...     experts = RoutedExperts(64, get_preset("tiny-moe").moe)
    ...     split_expert_width(experts, "experts", init_device_mesh("cpu", (2,)))
    >>> tuple(experts.gate.shape), tuple(experts.down.shape)  # tiny-moe: 6 experts, f = 32
    ((6, 64, 16), (6, 16, 64))
    """
    ranks = mesh.size()
    rank = mesh.get_local_rank()
    width = int(cast(torch.Tensor, module.gate).shape[2])
    if width % ranks:
        raise InputError(f"--etp {ranks} does not divide the expert width {width:,} of {name}; "
                         f"use --etp 1 or a --tp dividing {width:,}")
    piece = width // ranks
    for key, dim in _HIDDEN_DIM:
        param = cast(nn.Parameter, module._parameters[key])
        with torch.no_grad():
            kept = param.detach().narrow(dim, rank * piece, piece).clone()
        module._parameters[key] = nn.Parameter(kept, requires_grad=param.requires_grad)
