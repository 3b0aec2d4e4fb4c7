"""A collective op's record: its process group resolved to a size, its bytes between ranks.

The cost rules (:mod:`tensorledger.costs.collectives`) say where the group is among an op's
arguments; what is found there depends on the op: an ``int`` group size (the functional
all-gather and reduce-scatter), a group *name* (the other functional collectives; resolved
through ``torch.distributed``'s registry of live groups), or a ``ProcessGroup``, boxed as a
``torch.ScriptObject`` when a c10d op is dispatched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tensorledger.costs.collectives import CollectiveRule, per_rank_bytes
from tensorledger.trace.records import CollectiveInfo

__all__ = ["collective_info", "group_size"]


def group_size(group: Any) -> int:
    """The number of ranks of a process group given as a size, a name or a ProcessGroup;
    ``ValueError`` when it is none of them."""
    if isinstance(group, int) and not isinstance(group, bool):
        return group
    if not torch.distributed.is_available():
        raise ValueError("torch.distributed is not available to resolve a process group")
    from torch.distributed import distributed_c10d

    ProcessGroup = distributed_c10d.ProcessGroup
    if isinstance(group, str):
        resolve: Any = distributed_c10d._resolve_process_group  # type: ignore[attr-defined]
        return int(resolve(group).size())
    if isinstance(group, ProcessGroup):
        return int(group.size())
    if isinstance(group, torch.ScriptObject):
        return int(ProcessGroup.unbox(group).size())
    raise ValueError(f"not a process group: {type(group).__name__}")


def collective_info(rule: CollectiveRule, args: Sequence[Any], kwargs: dict[str, Any],
                    out: Any) -> CollectiveInfo:
    """The record of one collective call under ``rule``."""
    ranks = group_size(rule.group(args, kwargs))
    size = int(rule.size_bytes(args, kwargs, out, ranks))
    sent, received = per_rank_bytes(rule.kind, size, ranks, rule.direction)
    return CollectiveInfo(kind=rule.kind, group_size=ranks, size_bytes=size, bytes_sent=sent,
                          bytes_received=received)
