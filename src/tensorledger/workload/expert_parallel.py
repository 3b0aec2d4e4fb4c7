"""Expert parallelism: each rank of the ``ep`` mesh dimension holds E / EP of every mixture of
experts' routed experts, and the token-slots travel to the rank of their expert and back in two
``all_to_all_single`` calls with explicit split sizes (the way torchtitan lays experts out).

**Which modules are experts.**  A module is a block of routed experts when it has an integer
``num_experts`` (E), every parameter of its own leads with E, and at least one is a stacked
matrix (E, d_in, d_out): transformers' grouped-GEMM experts (``MixtralExperts``,
``Qwen2MoeExperts``, ``DeepseekV3Experts``, ``GptOssExperts`` with its (E, d) biases) and any
module written the same way.  It is called as those are, ``experts(hidden (T, d), index (T, k),
weights (T, k)) -> (T, d)``: the T tokens' k expert ids and their routing weights.  A router
has E rows too, but no stacked matrix.

**What a rank holds.**  Rank r of ``ep`` keeps experts r·L … r·L + L − 1 (L = E / EP) of every
such module: its parameters become plain tensors of L rows (no DTensor: FSDP2 may then shard
them further over ``fsdp``), and ``num_experts`` becomes L, so the module's own forward runs
its local experts unchanged.

**One forward of the experts, per rank** (inside the module's call, around its forward):

1. *dispatch*: the T · k token-slots are sorted by expert id (a stable sort, so each expert's
   slots keep the tokens' order) and the hidden state of each gathered; the slots each expert
   receives are counted (``bincount``); one ``all_to_all_single`` of those E counts (E / EP to
   each rank) tells every rank how many slots each other rank sends each of its experts; then
   ``all_to_all_single`` of the (T·k, d) slots with input splits = the slots bound for each
   rank's experts and output splits = the slots coming from each rank;
2. the module's forward on the received slots, each with its local expert id and weight 1;
3. *combine*: ``all_to_all_single`` back with the splits swapped, the slots put back in token
   order, weighted by the router's weights and summed over the k choices.

Autograd runs both token all-to-alls again with the splits swapped in backward; activation
checkpointing runs the forward's again when it recomputes.  The routing weights multiply after
the combine, so the module multiplies its outputs by ones (one elementwise product of the
received slots more than on one device).

**On the fake process group** nothing moves: the counts a rank would receive are those of the
stated routing (:mod:`.routing`), by which every rank routes its tokens alike; so rank r
receives, from each of the EP ranks, the counts of its own experts.  On a real group they are
read from the counts' all-to-all.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import torch
from torch import nn

from tensorledger.errors import InputError, TraceError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["ExpertShard", "apply_expert_parallel", "expert_modules", "expert_parameters",
           "is_experts", "whole_params"]


def is_experts(module: nn.Module) -> bool:
    """A block of routed experts, stacked (see the module's docstring).

    >>> class Experts(nn.Module):
    ...     def __init__(self) -> None:
    ...         super().__init__()
    ...         self.num_experts = 4
    ...         self.up = nn.Parameter(torch.zeros(4, 8, 6))
    ...         self.bias = nn.Parameter(torch.zeros(4, 6))
    >>> is_experts(Experts()), is_experts(nn.Linear(4, 4))
    (True, False)
    """
    experts = getattr(module, "num_experts", None)
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        return False
    own = [p for p in module._parameters.values() if p is not None]
    return (bool(own) and all(p.dim() >= 1 and p.shape[0] == experts for p in own)
            and any(p.dim() == 3 for p in own))


def expert_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every block of routed experts in ``model``, by qualified name, in module order."""
    return [(name, module) for name, module in model.named_modules() if is_experts(module)]


@dataclass
class _Dispatched:
    """What the combine needs of one dispatch: the slots' order and splits."""

    order: torch.Tensor  # slot positions sorted by expert
    weights: torch.Tensor  # (T, k) routing weights
    tokens: int
    chosen: int
    sent: list[int]  # slots to each rank
    received: list[int]  # slots from each rank


@dataclass
class ExpertShard:
    """One block of experts laid out over ``ep`` ranks: this rank's ``first`` expert onward,
    ``local`` of the ``experts`` in all."""

    name: str
    experts: int
    local: int
    first: int
    group: Any  # the ep ProcessGroup
    fake: bool  # the group is torch's fake backend: the counts come from the stated routing

    @property
    def ranks(self) -> int:
        return self.experts // self.local

    def _per_rank(self, counts: list[int]) -> list[int]:
        return [sum(counts[r * self.local:(r + 1) * self.local]) for r in range(self.ranks)]

    def dispatch(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], _Dispatched]:
        from torch.distributed import _functional_collectives as funcol

        if len(args) < 3:
            raise TraceError(f"expert parallelism calls {self.name} as experts(hidden, index, "
                             f"weights); it was called with {len(args)} positional arguments")
        hidden, index, weights = args[0], args[1], args[2]
        tokens, chosen = index.shape[0], index.shape[-1]
        flat = index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        slots = hidden[order // chosen]
        counts_tensor = torch.bincount(flat, minlength=self.experts)
        try:
            counts = [int(c) for c in counts_tensor.tolist()]
        except Exception as error:  # a fake tensor the routing does not answer
            raise TraceError(f"the token counts of {self.name}'s experts have no values "
                             f"({type(error).__name__}); expert parallelism on fake tensors "
                             "needs the stated routing (--routing)") from None
        # every rank learns the slots each other rank sends its experts
        received_counts = funcol.all_to_all_single(counts_tensor, None, None, self.group)
        received_counts = funcol.wait_tensor(received_counts)  # type: ignore[no-untyped-call]
        mine = counts_tensor[self.first:self.first + self.local]
        if self.fake:  # every rank routes alike: each sends this rank's experts as it does
            received_counts = mine.repeat(self.ranks)
            by_source = counts[self.first:self.first + self.local] * self.ranks
        else:
            by_source = [int(c) for c in received_counts.tolist()]
        sent = self._per_rank(counts)
        received = [sum(by_source[r * self.local:(r + 1) * self.local])
                    for r in range(self.ranks)]
        arrived = funcol.all_to_all_single(slots, received, sent, self.group)
        arrived = funcol.wait_tensor(arrived)  # type: ignore[no-untyped-call]
        local_ids = torch.arange(self.local, device=index.device).repeat(self.ranks)
        ids = torch.repeat_interleave(local_ids, received_counts.reshape(-1),
                                      output_size=sum(received)).unsqueeze(-1)
        ones = torch.ones(ids.shape, dtype=weights.dtype, device=weights.device)
        return (arrived, ids, ones, *args[3:]), _Dispatched(
            order=order, weights=weights, tokens=tokens, chosen=chosen, sent=sent,
            received=received)

    def combine(self, output: torch.Tensor, done: _Dispatched) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol

        back = funcol.wait_tensor(  # type: ignore[no-untyped-call]
            funcol.all_to_all_single(output, done.sent, done.received, self.group))
        slots = torch.empty_like(back)
        slots[done.order] = back  # token order again
        weighted = slots.view(done.tokens, done.chosen, -1) * done.weights.unsqueeze(-1).to(
            slots.dtype)
        return weighted.sum(dim=1)


def _route_through(module: nn.Module, shard: ExpertShard) -> None:
    """Run ``module``'s forward between the dispatch and the combine, inside its own call (so
    the all-to-alls are the experts' in the trace, and hooks around the call, FSDP2's, stay
    outside them)."""
    forward = module.forward
    signature = inspect.signature(forward)

    def routed(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 3:  # called by keyword: (hidden, index, weights) by the forward's names
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                pass
            else:
                args, kwargs = tuple(bound.arguments.values()), {}
        arrived, done = shard.dispatch(args)
        return shard.combine(forward(*arrived, **kwargs), done)

    module.forward = routed


#: Each laid-out block of experts and its shard (the whole model's count needs the ep degree).
_SHARDS: WeakKeyDictionary[nn.Module, ExpertShard] = WeakKeyDictionary()


def whole_params(model: nn.Module) -> int:
    """The parameters of the whole model, all ranks' shards together: each expert-parallel
    block's counted EP times (a DTensor already counts its global shape)."""
    total = sum(p.numel() for p in dict.fromkeys(model.parameters()))
    for module in model.modules():
        shard = _SHARDS.get(module)
        if shard is not None:
            own = sum(p.numel() for p in module.parameters(recurse=False))
            total += (shard.ranks - 1) * own
    return total


def apply_expert_parallel(model: nn.Module, mesh: DeviceMesh) -> list[ExpertShard]:
    """Shard every block of routed experts of ``model`` over the 1-D ``mesh`` (``ep``) and
    route its token-slots to their experts' ranks (see the module's docstring); in place.
    Refused in one line when the model has no such block or EP does not divide its experts.

    >>> from tensorledger.workload.parallel import fake_process_group
    >>> class Experts(nn.Module):
    ...     def __init__(self) -> None:
    ...         super().__init__()
    ...         self.num_experts = 4
    ...         self.up = nn.Parameter(torch.zeros(4, 8, 6))
    >>> with fake_process_group(2):
    ...     from torch.distributed.device_mesh import init_device_mesh
    ...     model = nn.Sequential(Experts())
    ...     shards = apply_expert_parallel(model, init_device_mesh("cpu", (2,)))
    ...     model[0].up.shape, model[0].num_experts, shards[0].first
    (torch.Size([2, 8, 6]), 2, 0)
    """
    import torch.distributed as dist

    ranks = mesh.size()
    rank = mesh.get_local_rank()
    group = mesh.get_group()
    fake = dist.get_backend(group) == "fake"
    found = expert_modules(model)
    if not found:
        raise InputError(f"--ep {ranks} shards routed experts, and {type(model).__name__} has "
                         "none (a module with num_experts and stacked (E, d_in, d_out) "
                         "weights); drop --ep")
    shards = []
    for name, module in found:
        experts = int(module.num_experts)  # type: ignore[arg-type]
        if experts % ranks:
            raise InputError(f"--ep {ranks} does not divide the {experts} experts of {name}; "
                             f"use an --ep that divides {experts}")
        local = experts // ranks
        first = rank * local
        for key, param in list(module._parameters.items()):
            if param is None:
                continue
            with torch.no_grad():
                piece = param.detach()[first:first + local].clone()
            module._parameters[key] = nn.Parameter(piece, requires_grad=param.requires_grad)
        setattr(module, "num_experts", local)  # noqa: B010 (its forward runs its local experts)
        shard = ExpertShard(name=name or type(module).__name__, experts=experts, local=local,
                            first=first, group=group, fake=fake)
        _SHARDS[module] = shard
        _route_through(module, shard)
        shards.append(shard)
    return shards


def expert_parameters(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """The parameters of every block of routed experts, by qualified name."""
    for name, module in expert_modules(model):
        for key, param in module.named_parameters(recurse=False):
            yield (f"{name}.{key}" if name else key), param
