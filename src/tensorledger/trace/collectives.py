"""A collective op's record: its process group resolved to a size, its bytes between ranks.

The cost rules (:mod:`tensorledger.costs.collectives`) say where the group is among an op's
arguments; what is found there depends on the op: an ``int`` group size (the functional
all-gather and reduce-scatter), a group *name* (the other functional collectives; resolved
through ``torch.distributed``'s registry of live groups), or a ``ProcessGroup``, boxed as a
``torch.ScriptObject`` when a c10d op is dispatched.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from tensorledger.costs.collectives import CollectiveRule, per_rank_bytes
from tensorledger.trace.records import CollectiveInfo

__all__ = ["collective_info", "group_size", "group_stride"]


def _process_group(group: Any) -> Any:
    """The ProcessGroup of a name or a (boxed) ProcessGroup; None for a bare size."""
    if isinstance(group, int) and not isinstance(group, bool):
        return None
    if not torch.distributed.is_available():
        raise ValueError("torch.distributed is not available to resolve a process group")
    from torch.distributed import distributed_c10d

    ProcessGroup = distributed_c10d.ProcessGroup
    if isinstance(group, str):
        resolve: Any = distributed_c10d._resolve_process_group  # type: ignore[attr-defined]
        return resolve(group)
    if isinstance(group, ProcessGroup):
        return group
    if isinstance(group, torch.ScriptObject):
        return ProcessGroup.unbox(group)
    raise ValueError(f"not a process group: {type(group).__name__}")


def group_size(group: Any) -> int:
    """The number of ranks of a process group given as a size, a name or a ProcessGroup;
    ``ValueError`` when it is none of them."""
    found = _process_group(group)
    return int(group) if found is None else int(found.size())


def group_stride(group: Any) -> int:
    """How far apart the group's ranks lie in the world: 1 for consecutive ranks (a group
    packed on a node), 8 for the data-parallel group beside 8-way tensor parallelism; 1 where
    it cannot be told (a bare size, ranks not evenly spaced)."""
    found = _process_group(group)
    if found is None:
        return 1
    try:
        ranks = sorted(torch.distributed.get_process_group_ranks(found))
    except (RuntimeError, ValueError, KeyError):  # a group the default world does not know
        return 1
    gaps = {b - a for a, b in itertools.pairwise(ranks)}
    return gaps.pop() if len(gaps) == 1 else 1


def collective_info(rule: CollectiveRule, args: Sequence[Any], kwargs: dict[str, Any],
                    out: Any) -> CollectiveInfo:
    """The record of one collective call under ``rule``."""
    group = rule.group(args, kwargs)
    ranks = group_size(group)
    size = int(rule.size_bytes(args, kwargs, out, ranks))
    sent, received = per_rank_bytes(rule.kind, size, ranks, rule.direction)
    uneven = _uneven_all_to_all(rule, args, group, ranks)
    if uneven is not None:
        sent, received = uneven
    return CollectiveInfo(kind=rule.kind, group_size=ranks, size_bytes=size, bytes_sent=sent,
                          bytes_received=received, rank_stride=group_stride(group),
                          ends=_ends(group, None if rule.peer is None else args[rule.peer]))


def _ends(group: Any, peer: Any) -> tuple[int, ...]:
    """(this rank, ``peer``) in the world: ``peer`` is a rank of ``group``; () where it cannot
    be told (no peer, a bare group size, no default group)."""
    if peer is None or isinstance(peer, bool) or not isinstance(peer, int):
        return ()
    found = _process_group(group)
    if found is None:
        return ()
    try:
        return (int(torch.distributed.get_rank()),
                int(torch.distributed.get_global_rank(found, peer)))
    except (RuntimeError, ValueError, KeyError):
        return ()


def _uneven_all_to_all(rule: CollectiveRule, args: Sequence[Any], group: Any, ranks: int
                       ) -> tuple[int, int] | None:
    """(sent, received) of a functional ``all_to_all_single`` given split sizes (rows of its
    first dimension to each rank and from each rank): all but this rank's own rows.  A
    permutation (``permute_tensor``: ring attention's gradient pass) sends its whole buffer
    to one rank, which the even-split convention would halve at 2 ranks.  None when the op
    has no split sizes (even splits) or the rank cannot be told."""
    if rule.kind != "all-to-all" or len(args) < 4 or ranks < 2:
        return None
    tensor, outputs, inputs = args[0], args[1], args[2]
    if (not isinstance(tensor, torch.Tensor) or not isinstance(inputs, list | tuple)
            or not isinstance(outputs, list | tuple)):
        return None  # no split sizes: DTensor's shard_dim_alltoall passes two dims there
    found = _process_group(group)
    if found is None or len(inputs) != ranks or len(outputs) != ranks:
        return None
    rank = int(found.rank())
    row_bytes = (tensor[0].numel() if tensor.dim() > 1 else 1) * tensor.element_size()
    sent = (sum(int(n) for n in inputs) - int(inputs[rank])) * row_bytes
    received = (sum(int(n) for n in outputs) - int(outputs[rank])) * row_bytes
    return sent, received
