"""One row per collective rule: its kind, where its group is, its size S in the nccl-tests
convention (worked out by hand from the op's schema), and one rank's bytes in the ring
convention, held against roofline's bus factor as the second code path."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tensorledger.costs.collectives import COLLECTIVE_KINDS, per_rank_bytes
from tensorledger.roofline.collectives import CollectiveKind, bus_factor
from tests.costs.rules_support import direct, meta, rule

A = meta(3, 5)  # 3 * 5 * 4 = 60 bytes
B = meta(2, 7, dtype=torch.bfloat16)  # 2 * 7 * 2 = 28 bytes
G = object()  # the group argument, wherever the schema puts it
N = 4  # ranks the rule is told the group has
F = "_c10d_functional"

#: op → (kind, direction, arguments as the schema orders them, S by hand for N = 4 ranks)
COLLECTIVES: dict[str, tuple[str, str, tuple[Any, ...], int]] = {
    f"{F}.all_reduce": ("all-reduce", "both", (A, "sum", G), 60),
    f"{F}.all_reduce_coalesced": ("all-reduce", "both", ([A, B], "sum", G), 60 + 28),
    # (input, group_size, group_name): the name is the group (it also says where the ranks lie)
    f"{F}.all_gather_into_tensor": ("all-gather", "both", (A, 4, G), 4 * 60),
    f"{F}.all_gather_into_tensor_out": ("all-gather", "both", (A, 4, G), 4 * 60),
    f"{F}.all_gather_into_tensor_coalesced": ("all-gather", "both", ([A, B], 4, G), 4 * 88),
    f"{F}_autograd.all_gather_into_tensor": ("all-gather", "both", (A, 4, G), 4 * 60),
    f"{F}.reduce_scatter_tensor": ("reduce-scatter", "both", (A, "sum", G, "g"), 60),
    f"{F}.reduce_scatter_tensor_out": ("reduce-scatter", "both", (A, "sum", G, "g"), 60),
    f"{F}.reduce_scatter_tensor_coalesced": ("reduce-scatter", "both",
                                             ([A, B], "sum", G, "g"), 88),
    f"{F}_autograd.reduce_scatter_tensor": ("reduce-scatter", "both", (A, "sum", G, "g"), 60),
    f"{F}.all_to_all_single": ("all-to-all", "both", (A, [], [], G), 60),
    f"{F}_autograd.all_to_all_single": ("all-to-all", "both", (A, [], [], G), 60),
    "_dtensor.shard_dim_alltoall": ("all-to-all", "both", (A, 0, 1, G), 60),
    f"{F}.broadcast": ("broadcast", "both", (A, 0, G), 60),
    f"{F}.isend": ("send-recv", "send", (A, 1, 0, G), 60),
    f"{F}.irecv": ("send-recv", "recv", (A, 1, 0, G), 60),
    "c10d.allreduce_": ("all-reduce", "both", ([A, B], G), 88),
    "c10d.allreduce_coalesced_": ("all-reduce", "both", ([A, B], G), 88),
    "c10d.allgather_": ("all-gather", "both", ([[A] * 4, [B] * 4], [A, B], G), 4 * 88),
    "c10d._allgather_base_": ("all-gather", "both", (meta(12, 5), A, G), 4 * 60),
    "c10d.allgather_coalesced_": ("all-gather", "both", ([[A] * 4, [B] * 4], [A, B], G),
                                  4 * 88),
    "c10d.allgather_into_tensor_coalesced_": ("all-gather", "both",
                                              ([meta(12, 5), meta(8, 7)], [A, B], G), 4 * 88),
    "c10d.reduce_scatter_": ("reduce-scatter", "both", ([A, B], [[A] * 4, [B] * 4], G), 4 * 88),
    "c10d._reduce_scatter_base_": ("reduce-scatter", "both", (meta(3, 5), meta(12, 5), G),
                                   4 * 60),
    "c10d.reduce_scatter_tensor_coalesced_": ("reduce-scatter", "both", ([A, B], [A, B], G), 88),
    "c10d.alltoall_": ("all-to-all", "both", ([A, B], [A, B], G), 88),
    "c10d.alltoall_base_": ("all-to-all", "both", (A, A, G), 60),
    "c10d.broadcast_": ("broadcast", "both", ([A, B], G), 88),
    "c10d.reduce_": ("reduce", "both", ([A, B], G), 88),
    "c10d.send": ("send-recv", "send", ([A], G), 60),
    "c10d.recv_": ("send-recv", "recv", ([A], G), 60),
    "c10d.recv_any_source_": ("send-recv", "recv", ([A], G), 60),
}

#: op → (category, moves, destination written and not read): covered ops that move nothing
#: between ranks
OTHERS: dict[str, tuple[str, str, bool]] = {
    f"{F}.wait_tensor": ("communication", "none", False),  # a wait moves no bytes
    f"{F}._wrap_tensor_autograd": ("communication", "none", False),
    "c10d.barrier": ("communication", "none", False),
    "fsdp.all_gather_copy_in": ("copy", "io", False),
    "fsdp.split_with_sizes_copy": ("copy", "io", False),
    "fsdp.chunk_cat": ("copy", "io", False),
    "fsdp.copy_": ("copy", "io", True),
}


@pytest.mark.parametrize("op", sorted(COLLECTIVES))
def test_rule_collective_table(op: str) -> None:
    kind, direction, args, size = COLLECTIVES[op]
    found = rule(op)
    assert found.category == "communication" and found.collective is not None
    assert (found.collective.kind, found.collective.direction) == (kind, direction)
    assert found.collective.group(args, {}) is G
    assert found.collective.size_bytes(args, {}, None, N) == size
    assert direct(op, args) == 0  # no arithmetic


@pytest.mark.parametrize("op", sorted(OTHERS))
def test_rule_sync_and_copy_table(op: str) -> None:
    found = rule(op)
    assert (found.category, found.moves, found.write_only_self) == OTHERS[op]
    assert found.collective is None
    assert direct(op, (A,)) == 0


def test_kinds_are_roofline_kinds() -> None:
    assert set(COLLECTIVE_KINDS) == {k.value for k in CollectiveKind}


@pytest.mark.parametrize("kind", [k for k in COLLECTIVE_KINDS if k != "send-recv"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_per_rank_bytes_are_the_bus_factor_of_s(kind: str, ranks: int) -> None:
    size = 8 * 9 * 10 * 11  # divisible by 2, 4 and 8
    factor = bus_factor(CollectiveKind(kind), ranks)
    assert per_rank_bytes(kind, size, ranks) == (round(factor * size), round(factor * size))


def test_per_rank_bytes_by_hand() -> None:
    assert per_rank_bytes("all-reduce", 1000, 4) == (1500, 1500)  # 2 * 1000 * 3/4
    assert per_rank_bytes("all-gather", 1000, 4) == (750, 750)  # 1000 * 3/4
    assert per_rank_bytes("reduce-scatter", 1000, 8) == (875, 875)  # 1000 * 7/8
    assert per_rank_bytes("broadcast", 1000, 8) == (1000, 1000)
    assert per_rank_bytes("all-reduce", 1000, 3) == (1333, 1333)  # 2 * 1000 * 2/3, rounded down
    assert per_rank_bytes("send-recv", 1000, 2, "send") == (1000, 0)
    assert per_rank_bytes("send-recv", 1000, 2, "recv") == (0, 1000)
    assert per_rank_bytes("all-reduce", 1000, 1) == (0, 0)  # a group of one moves nothing
    assert per_rank_bytes("send-recv", 1000, 1, "send") == (0, 0)  # nor to itself


def test_per_rank_bytes_refuses_what_is_not_a_collective() -> None:
    with pytest.raises(ValueError, match="unknown collective kind 'gather'"):
        per_rank_bytes("gather", 1000, 4)
    with pytest.raises(ValueError, match="ranks >= 1"):
        per_rank_bytes("all-reduce", 1000, 0)
    with pytest.raises(ValueError, match="moves one way"):
        per_rank_bytes("send-recv", 1000, 2)
