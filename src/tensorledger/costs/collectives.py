"""Collective communication: what each c10d op sends and receives per rank.

A collective costs no FLOP here (a reduction's adds run at the speed of the link); its cost is
the bytes it moves between ranks.  Each rule names the collective's *kind*, where its process
group is among the arguments (a group size, a group name or a ``ProcessGroup``; the recorder
turns it into a size) and its size ``S`` in the nccl-tests convention that
:mod:`tensorledger.roofline.collectives` prices: the all-reduced (or broadcast, reduced)
buffer; the *whole* gathered array of an all-gather (N × each rank's input); the whole array a
reduce-scatter reduces (N × each rank's output); one rank's whole send buffer of an all-to-all;
the message of a send or receive.

**Bytes per rank, ring convention** (what NCCL's ring moves; every rank alike):

- all-reduce: sends and receives 2·S·(N−1)/N (a reduce-scatter, then an all-gather);
- all-gather, reduce-scatter, all-to-all: sends and receives S·(N−1)/N (all-to-all: even splits;
  the rank's own chunk stays home);
- broadcast, reduce: S in and S out (a middle rank of NCCL's chain, the busiest one; the
  nccl-tests bus factor 1);
- send: S sent; receive: S received.

A group of one moves nothing.  Fractions of a byte are rounded down.  The rule's ``flops``
function is 0 for every collective; the synchronisations (``wait_tensor``, ``barrier``) are
covered with no collective and no bytes between ranks.

>>> per_rank_bytes("all-reduce", 8000, 8)        # 2 · 8000 · 7/8
(14000, 14000)
>>> per_rank_bytes("all-gather", 8000, 8)        # 8000 · 7/8
(7000, 7000)
>>> lookup("c10d._allgather_base_").collective.kind
'all-gather'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tensorledger.costs.registry import lookup, numel, register  # noqa: F401 (doctest)

__all__ = ["COLLECTIVE_KINDS", "CollectiveRule", "per_rank_bytes"]

#: The kinds a collective record names; the values of roofline's ``CollectiveKind``.
COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast",
                    "reduce", "send-recv")

#: ``both``: a collective every rank sends and receives in; ``send`` / ``recv``: one direction.
Direction = Literal["both", "send", "recv"]

#: ``(args, kwargs) -> group``: the group argument (an int size, a name, a ProcessGroup).
GroupRule = Callable[[Sequence[Any], dict[str, Any]], Any]
#: ``(args, kwargs, out, ranks) -> S``: the collective's size in bytes, nccl-tests convention.
SizeRule = Callable[[Sequence[Any], dict[str, Any], Any, int], int]


@dataclass(frozen=True)
class CollectiveRule:
    """How one collective op moves bytes: its kind, its group, its size S."""

    kind: str  # one of COLLECTIVE_KINDS
    group: GroupRule
    size_bytes: SizeRule
    direction: Direction = "both"
    peer: int | None = None  # a send's or receive's argument: the other rank, in the group


def per_rank_bytes(kind: str, size_bytes: int, ranks: int, direction: Direction = "both"
                   ) -> tuple[int, int]:
    """(bytes sent, bytes received) by one rank for a collective of ``size_bytes`` = S over
    ``ranks`` ranks, in the ring convention of the module docstring."""
    if kind not in COLLECTIVE_KINDS:
        raise ValueError(f"unknown collective kind {kind!r}; known: {', '.join(COLLECTIVE_KINDS)}")
    if ranks < 1 or size_bytes < 0:
        raise ValueError(f"a collective needs ranks >= 1 and bytes >= 0, got {ranks}, {size_bytes}")
    if kind == "send-recv" and direction == "both":
        raise ValueError("a send-recv moves one way: give direction send or recv")
    if ranks == 1:
        return 0, 0
    if direction == "send":
        return size_bytes, 0
    if direction == "recv":
        return 0, size_bytes
    if kind == "all-reduce":
        moved = 2 * size_bytes * (ranks - 1) // ranks
    elif kind in ("all-gather", "reduce-scatter", "all-to-all"):
        moved = size_bytes * (ranks - 1) // ranks
    else:  # broadcast, reduce
        moved = size_bytes
    return moved, moved


def _bytes(value: Any) -> int:
    """Bytes of a tensor, or of every tensor in a (nested) list of them."""
    if isinstance(value, list | tuple):
        return sum(_bytes(item) for item in value)
    return numel(value) * int(value.element_size())


def _zero(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return 0


def _at(position: int) -> GroupRule:
    def group(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        return args[position]
    return group


def _whole(position: int) -> SizeRule:
    """S is the argument at ``position`` (all-reduce, reduce-scatter input, broadcast, ...)."""
    def size(args: Sequence[Any], kwargs: dict[str, Any], out: Any, ranks: int) -> int:
        return _bytes(args[position])
    return size


def _times_ranks(position: int) -> SizeRule:
    """S is N × the argument at ``position`` (an all-gather's input, a reduce-scatter's output)."""
    def size(args: Sequence[Any], kwargs: dict[str, Any], out: Any, ranks: int) -> int:
        return ranks * _bytes(args[position])
    return size


def _collective(*ops: str, kind: str, group: int, size: SizeRule,
                direction: Direction = "both", peer: int | None = None) -> None:
    register(*ops, category="communication",
             collective=CollectiveRule(kind, _at(group), size, direction, peer))(_zero)


F = "_c10d_functional"
# functional collectives (DTensor, torchtitan, compiled code): the group is a name or a size
_collective(f"{F}.all_reduce", f"{F}.all_reduce_coalesced", kind="all-reduce", group=2,
            size=_whole(0))
_collective(f"{F}.all_gather_into_tensor", f"{F}.all_gather_into_tensor_out",
            f"{F}.all_gather_into_tensor_coalesced",
            f"{F}_autograd.all_gather_into_tensor", kind="all-gather", group=2,
            size=_times_ranks(0))
_collective(f"{F}.reduce_scatter_tensor", f"{F}.reduce_scatter_tensor_out",
            f"{F}.reduce_scatter_tensor_coalesced", f"{F}_autograd.reduce_scatter_tensor",
            kind="reduce-scatter", group=2, size=_whole(0))
_collective(f"{F}.all_to_all_single", f"{F}_autograd.all_to_all_single",
            "_dtensor.shard_dim_alltoall", kind="all-to-all", group=3, size=_whole(0))
_collective(f"{F}.broadcast", kind="broadcast", group=2, size=_whole(0))
_collective(f"{F}.isend", kind="send-recv", group=3, size=_whole(0), direction="send", peer=1)
_collective(f"{F}.irecv", kind="send-recv", group=3, size=_whole(0), direction="recv", peer=1)

# the c10d ops a ProcessGroup dispatches (torch.distributed's eager API, DDP, FSDP2)
_collective("c10d.allreduce_", "c10d.allreduce_coalesced_", kind="all-reduce", group=1,
            size=_whole(0))
_collective("c10d.allgather_", "c10d._allgather_base_", "c10d.allgather_coalesced_",
            "c10d.allgather_into_tensor_coalesced_", kind="all-gather", group=2,
            size=_times_ranks(1))
_collective("c10d.reduce_scatter_", kind="reduce-scatter", group=2, size=_times_ranks(0))
_collective("c10d._reduce_scatter_base_", "c10d.reduce_scatter_tensor_coalesced_",
            kind="reduce-scatter", group=2, size=_whole(1))
_collective("c10d.alltoall_", "c10d.alltoall_base_", kind="all-to-all", group=2,
            size=_whole(1))
_collective("c10d.broadcast_", kind="broadcast", group=1, size=_whole(0))
_collective("c10d.reduce_", kind="reduce", group=1, size=_whole(0))
_collective("c10d.send", kind="send-recv", group=1, size=_whole(0), direction="send", peer=2)
_collective("c10d.recv_", kind="send-recv", group=1, size=_whole(0), direction="recv", peer=2)
_collective("c10d.recv_any_source_", kind="send-recv", group=1, size=_whole(0),
            direction="recv")

# synchronisation: covered, nothing sent between ranks; an asynchronous result wrapped for
# autograd (real process groups) moves nothing at all
register(f"{F}.wait_tensor", "c10d.barrier", category="communication", moves="none")(_zero)
register(f"{F}._wrap_tensor_autograd", category="communication", moves="none")(_zero)

# FSDP2's copies around its collectives: packing the all-gather input, unpacking its output,
# and packing the reduce-scatter input
register("fsdp.all_gather_copy_in", "fsdp.split_with_sizes_copy", "fsdp.chunk_cat",
         category="copy")(_zero)
register("fsdp.copy_", category="copy", write_only_self=True)(_zero)
