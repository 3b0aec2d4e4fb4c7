"""Expert parallelism: each rank of the ``ep`` mesh dimension holds E / EP of every mixture of
experts' routed experts, and the token-slots travel to the rank of their expert and back in two
``all_to_all_single`` calls with explicit split sizes (the way torchtitan lays experts out).

**Which modules are experts.**  A module is a block of routed experts when it has an integer
``num_experts`` (E), every parameter of its own leads with E, and at least one is a stacked
matrix (E, d_in, d_out): transformers' grouped-GEMM experts (``MixtralExperts``,
``Qwen2MoeExperts``, ``DeepseekV3Experts``, ``GptOssExperts`` with its (E, d) biases) and any
module written the same way.  It is called as those are, ``experts(hidden (T, d), index (T, k),
weights (T, k)) -> (T, d)``: the T tokens' k expert ids and their routing weights.  A router
has E rows too, but no stacked matrix.  The reference models' experts
(:class:`~tensorledger.models.moe.RoutedExperts`: ``gate``, ``up`` (E, d, f), ``down`` (E, f,
d)) are the second kind, called with the token-slots already sorted by expert:
``experts(slots (n, d), counts (E,)) -> (n, d)`` dropless, ``experts(buffer (E, C, d)) -> (E,
C, d)`` with a capacity; their :class:`~tensorledger.models.moe.MoE` routes, weighs and sums.

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

For the reference experts the slots come sorted, so the dispatch sends each rank its
experts' run of them (the counts' all-to-all as above); the slots arrive by source rank, and
are regrouped by local expert (each expert's slots from rank 0, then rank 1, …) for the grouped
GEMM, and put back in arrival order before the combine returns them, in the order they came.
With a capacity C every expert's buffer is C slots from each rank: one all-to-all of E/EP · C
slots to each rank, whose experts then run EP · C slots each.

Autograd runs both token all-to-alls again with the splits swapped in backward; activation
checkpointing runs the forward's again when it recomputes.  The routing weights multiply after
the combine, so the module multiplies its outputs by ones (one elementwise product of the
received slots more than on one device).

**Which ranks an ep group spans.**  ``ep`` is a dimension of its own in the layout's mesh
(``pp``, ``dp``, ``fsdp``, ``cp``, ``ep``, ``tp``, outermost first): an ep group is the ranks
that differ in their ep coordinate alone, in the same pipeline stage (its own stage's experts:
each stage's MoE layers are laid out over its ep ranks, and the stage's all-to-alls stay
within them), the same data-parallel replica and shard, and the same tensor-parallel rank.
Beside ``tp`` the experts are not split further by default (torchtitan's ETP = 1): the tp
ranks of one ep rank hold the same experts whole and each routes the whole sequence the
block's replicated input holds, so each ep group moves what it would without ``tp`` (the
attention and the shared experts are split over ``tp``:
:func:`~.tensor_parallel.reference_tp_plan`).  With ``etp`` = ``tp`` (torchtitan's ETP = TP,
the reference experts only) each tp rank keeps 1/TP of every local expert's hidden width, and
the experts' output slots are all-reduced over ``tp`` in forward, their input slots' gradient
in backward (:mod:`.expert_tensor_parallel`); the all-to-alls stay as they are.

**On the fake process group** nothing moves: the counts a rank would receive are those of the
stated routing (:mod:`.routing`), by which every rank routes its tokens alike; so rank r
receives, from each of the EP ranks, the counts of its own experts.  On a real group they are
read from the counts' all-to-all.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from weakref import WeakKeyDictionary

import torch
from torch import nn

from tensorledger.errors import InputError, TraceError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["ExpertShard", "apply_expert_parallel", "expert_modules", "expert_parameters",
           "global_numel", "is_experts", "whole_params"]


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
    if _sorted_slots(module):
        return True
    experts = getattr(module, "num_experts", None)
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        return False
    own = [p for p in module._parameters.values() if p is not None]
    return (bool(own) and all(p.dim() >= 1 and p.shape[0] == experts for p in own)
            and any(p.dim() == 3 for p in own))


def _sorted_slots(module: nn.Module) -> bool:
    """The reference models' routed experts, called with their token-slots sorted by expert."""
    from tensorledger.models.moe import RoutedExperts

    return isinstance(module, RoutedExperts)


def _expert_count(module: nn.Module) -> int:
    if _sorted_slots(module):
        return int(cast(torch.Tensor, module.gate).shape[0])
    return int(module.num_experts)  # type: ignore[arg-type]


def expert_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every block of routed experts in ``model``, by qualified name, in module order."""
    return [(name, module) for name, module in model.named_modules() if is_experts(module)]


@dataclass
class _Dispatched:
    """What the combine needs of one dispatch: the slots' order and splits."""

    order: torch.Tensor | None  # slot positions sorted by expert (None: the slots' own order)
    weights: torch.Tensor | None  # (T, k) routing weights (None: the caller weighs them)
    tokens: int
    chosen: int
    sent: list[int]  # slots to each rank
    received: list[int]  # slots from each rank
    # the reference experts' buffer of each expert's capacity: its (E, C, d) shape
    padded: tuple[int, ...] | None = None


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
    sorted_slots: bool = False  # called as the reference experts are (see the module's doc)
    tp_group: Any = None  # the tp ProcessGroup each expert's hidden width is split over (ETP)
    tp_ranks: int = 1  # ETP: the ranks of that group (1: the experts whole on each tp rank)

    @property
    def ranks(self) -> int:
        return self.experts // self.local

    def _per_rank(self, counts: list[int]) -> list[int]:
        return [sum(counts[r * self.local:(r + 1) * self.local]) for r in range(self.ranks)]

    def _exchange(self, counts_tensor: torch.Tensor
                  ) -> tuple[torch.Tensor, list[int], list[int]]:
        """The counts' all-to-all: the slots each rank sends each of this rank's experts (an
        (EP · local) tensor by source rank), and the slots sent to and received from each
        rank."""
        from torch.distributed import _functional_collectives as funcol

        from tensorledger.workload.routed import known_values

        try:
            counts = [int(c) for c in known_values(counts_tensor) or counts_tensor.tolist()]
        except Exception as error:  # a fake tensor the routing does not answer
            raise TraceError(f"the token counts of {self.name}'s experts have no values "
                             f"({type(error).__name__}); expert parallelism on fake tensors "
                             "needs the stated routing (--routing)") from None
        # every rank learns the slots each other rank sends its experts
        received_counts = funcol.all_to_all_single(counts_tensor, None, None, self.group)
        received_counts = funcol.wait_tensor(received_counts)  # type: ignore[no-untyped-call]
        if self.fake:  # every rank routes alike: each sends this rank's experts as it does
            mine = counts_tensor[self.first:self.first + self.local]
            received_counts = mine.repeat(self.ranks)
            by_source = counts[self.first:self.first + self.local] * self.ranks
        else:
            by_source = [int(c) for c in received_counts.tolist()]
        received = [sum(by_source[r * self.local:(r + 1) * self.local])
                    for r in range(self.ranks)]
        return received_counts, self._per_rank(counts), received

    def dispatch(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], _Dispatched]:
        if self.sorted_slots:
            return self._dispatch_sorted(args)
        if len(args) < 3:
            raise TraceError(f"expert parallelism calls {self.name} as experts(hidden, index, "
                             f"weights); it was called with {len(args)} positional arguments")
        hidden, index, weights = args[0], args[1], args[2]
        tokens, chosen = index.shape[0], index.shape[-1]
        flat = index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        slots = hidden[order // chosen]
        received_counts, sent, received = self._exchange(
            torch.bincount(flat, minlength=self.experts))
        arrived = _all_to_all(slots, received, sent, self.group)
        local_ids = torch.arange(self.local, device=index.device).repeat(self.ranks)
        ids = torch.repeat_interleave(local_ids, received_counts.reshape(-1),
                                      output_size=sum(received)).unsqueeze(-1)
        ones = torch.ones(ids.shape, dtype=weights.dtype, device=weights.device)
        return (arrived, ids, ones, *args[3:]), _Dispatched(
            order=order, weights=weights, tokens=tokens, chosen=chosen, sent=sent,
            received=received)

    def _dispatch_sorted(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], _Dispatched]:
        """The reference experts' slots, sorted by expert (with their counts), or their
        capacity buffer (E, C, d)."""
        if len(args) == 1 or (len(args) > 1 and args[1] is None):  # the capacity buffer
            buffer = args[0]
            capacity = buffer.shape[1]
            rows = [self.local * capacity] * self.ranks
            arrived = _all_to_all(buffer.reshape(-1, buffer.shape[-1]), rows, rows, self.group)
            # (source rank, local expert, slot) → each local expert's slots from every rank
            mine = arrived.view(self.ranks, self.local, capacity, -1).transpose(0, 1).reshape(
                self.local, self.ranks * capacity, -1)
            return (mine,), _Dispatched(order=None, weights=None, tokens=0, chosen=0,
                                        sent=rows, received=rows, padded=tuple(buffer.shape))
        slots, counts_tensor = args[0], args[1]
        received_counts, sent, received = self._exchange(counts_tensor)
        arrived = _all_to_all(slots, received, sent, self.group)
        by_source = received_counts.reshape(self.ranks, self.local)
        order = None if self.local == 1 else _by_expert(by_source, sum(received))
        mine = arrived if order is None else arrived[order]
        return (mine, by_source.sum(0), *args[2:]), _Dispatched(
            order=order, weights=None, tokens=0, chosen=0, sent=sent, received=received)

    def combine(self, output: torch.Tensor, done: _Dispatched) -> torch.Tensor:
        if done.padded is not None:  # back to (source rank, local expert, slot), and home
            experts, capacity, width = done.padded
            rows = output.view(self.local, self.ranks, capacity, width).transpose(0, 1)
            back = _all_to_all(rows.reshape(-1, width), done.sent, done.received, self.group)
            return back.view(experts, capacity, width)
        if done.weights is None:  # the sorted slots: arrival order again, then home
            if done.order is not None:
                arrival = torch.empty_like(output)
                arrival[done.order] = output
                output = arrival
            return _all_to_all(output, done.sent, done.received, self.group)
        back = _all_to_all(output, done.sent, done.received, self.group)
        slots = torch.empty_like(back)
        assert done.order is not None
        slots[done.order] = back  # token order again
        weighted = slots.view(done.tokens, done.chosen, -1) * done.weights.unsqueeze(-1).to(
            slots.dtype)
        return weighted.sum(dim=1)


def _all_to_all(tensor: torch.Tensor, output_splits: list[int], input_splits: list[int],
                group: Any) -> torch.Tensor:
    from torch.distributed import _functional_collectives as funcol

    return funcol.wait_tensor(  # type: ignore[no-untyped-call, no-any-return]
        funcol.all_to_all_single(tensor, output_splits, input_splits, group))


def _by_expert(by_source: torch.Tensor, total: int) -> torch.Tensor:
    """The rows of slots that arrived by source rank (``by_source[r, e]`` of local expert e
    from rank r, in that order) regrouped by expert: each expert's from rank 0, then rank 1, …

    >>> _by_expert(torch.tensor([[1, 2], [3, 0]]), 6).tolist()  # rows 0 | 1 2 ; 3 4 5 |
    [0, 3, 4, 5, 1, 2]
    """
    flat = by_source.reshape(-1)
    starts = flat.cumsum(0) - flat  # each (rank, expert) run's first row as they arrived
    runs = by_source.t().reshape(-1)  # the runs in (expert, rank) order
    run_starts = starts.view(by_source.shape).t().reshape(-1)
    placed = runs.cumsum(0) - runs  # and where each goes
    return torch.repeat_interleave(run_starts - placed, runs, output_size=total) + torch.arange(
        total, device=by_source.device)


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
        if shard.tp_group is None:
            return shard.combine(forward(*arrived, **kwargs), done)
        from tensorledger.workload.expert_tensor_parallel import (
            from_expert_shards,
            to_expert_shards,
        )

        # each tp rank runs its slice of the hidden width on the same slots: partial sums
        inputs = (to_expert_shards(arrived[0], shard.tp_group), *arrived[1:])
        output = from_expert_shards(forward(*inputs, **kwargs), shard.tp_group)
        return shard.combine(output, done)

    module.forward = routed


#: Each laid-out block of experts and its shard (the whole model's count needs the ep degree).
_SHARDS: WeakKeyDictionary[nn.Module, ExpertShard] = WeakKeyDictionary()


def global_numel(param: torch.Tensor) -> int:
    """The elements of the whole tensor ``param`` is of: a DTensor's global shape; a tensor
    DDP beside tensor parallelism made local (torch's ``_pre_dp_module_transform`` keeps the
    DTensor's spec as ``_st_info``), that spec's shape; else its own.

    >>> global_numel(torch.zeros(2, 3))
    6
    """
    spec = getattr(param, "_st_info", None)
    shape = getattr(spec, "shape", None)
    return math.prod(shape) if shape is not None else param.numel()


def whole_params(model: nn.Module, params: Iterable[torch.Tensor] | None = None) -> int:
    """The parameters of the whole model, all ranks' shards together: each expert-parallel
    block's counted EP · ETP times (a DTensor already counts its global shape).  ``params``:
    the model's parameters as its step holds them, where the module's own list lacks some
    (DDP beside tensor parallelism leaves its DTensors as plain attributes after a forward)."""
    listed = model.parameters() if params is None else params
    total = sum(global_numel(p) for p in dict.fromkeys(listed))
    for module in model.modules():
        shard = _SHARDS.get(module)
        if shard is not None:
            own = sum(p.numel() for p in module.parameters(recurse=False))
            total += (shard.ranks * shard.tp_ranks - 1) * own
    return total


def apply_expert_parallel(model: nn.Module, mesh: DeviceMesh, required: bool = True,
                          tp: DeviceMesh | None = None) -> list[ExpertShard]:
    """Shard every block of routed experts of ``model`` over the 1-D ``mesh`` (``ep``) and
    route its token-slots to their experts' ranks (see the module's docstring); in place.
    Refused in one line when EP does not divide a block's experts, or when the model has no
    such block and one is ``required`` (a pipeline stage of dense layers alone has none).
    ``tp``: the 1-D tp mesh each local expert's hidden width is split over (ETP = TP; the
    reference experts only, :mod:`.expert_tensor_parallel`), None to keep them whole.

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
    if not found and required:
        raise InputError(f"--ep {ranks} shards routed experts, and {type(model).__name__} has "
                         "none (a module with num_experts and stacked (E, d_in, d_out) "
                         "weights); drop --ep")
    if tp is not None:  # refused before any block is cut
        other = next(((name, module) for name, module in found if not _sorted_slots(module)),
                     None)
        if other is not None:
            raise InputError(f"--etp {tp.size()} splits the reference models' routed experts; "
                             f"{other[0] or 'the model'} ({type(other[1]).__name__}) is not "
                             "one: drop --etp")
    shards = []
    for name, module in found:
        experts = _expert_count(module)
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
        sorted_slots = _sorted_slots(module)
        if not sorted_slots:  # its forward runs its local experts
            setattr(module, "num_experts", local)  # noqa: B010
        label = name or type(module).__name__
        if tp is not None:
            from tensorledger.workload.expert_tensor_parallel import split_expert_width

            split_expert_width(module, label, tp)
        shard = ExpertShard(name=label, experts=experts, local=local, first=first, group=group,
                            fake=fake, sorted_slots=sorted_slots,
                            tp_group=None if tp is None else tp.get_group(),
                            tp_ranks=1 if tp is None else tp.size())
        _SHARDS[module] = shard
        _route_through(module, shard)
        shards.append(shard)
    return shards


def expert_parameters(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """The parameters of every block of routed experts, by qualified name."""
    for name, module in expert_modules(model):
        for key, param in module.named_parameters(recurse=False):
            yield (f"{name}.{key}" if name else key), param
