"""trace.collectives pinned on a fake process group: the group's stride, a send's two ends,
and an all-to-all's uneven splits, each figure worked by hand from the ranks and the bytes."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from tensorledger.costs.collectives import CollectiveRule
from tensorledger.trace import Recorder
from tensorledger.trace.collectives import _ends, collective_info, group_stride
from tensorledger.trace.records import CollectiveInfo
from tensorledger.workload.parallel import fake_process_group


def _arg(position: int) -> Any:
    return lambda args, kwargs: args[position]


def _size(value: int) -> Any:
    return lambda args, kwargs, out, ranks: value


def test_the_stride_of_groups_evenly_and_unevenly_spaced() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    with fake_process_group(8, rank=1):
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("fsdp", "tp"))
        fsdp = mesh.get_group("fsdp")
        assert dist.get_process_group_ranks(fsdp) == [1, 5]
        assert group_stride(fsdp) == 4  # 5 - 1 (not 5 + 1)
    with fake_process_group(8) as world:
        uneven = dist.new_group([0, 3, 5])  # gaps 3 and 2: not evenly spaced, so 1
        assert group_stride(uneven) == 1
    # the group is gone with its world: its ranks cannot be asked, so 1
    assert group_stride(world) == 1


def test_a_send_knows_both_ends_in_the_world() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    send = CollectiveRule("send-recv", _arg(3), _size(40), direction="send", peer=1)
    tensor = torch.ones(10, device="meta")  # 10 · 4 = 40 bytes
    with fake_process_group(8, rank=1):
        fsdp = init_device_mesh("cpu", (2, 4), mesh_dim_names=("fsdp", "tp")).get_group("fsdp")
        # the group's rank 0 is world rank 1 (this one), its rank 1 is world rank 5
        info = collective_info(send, (tensor, 1, 0, fsdp), {}, None)
        assert info == CollectiveInfo("send-recv", 2, 40, 40, 0, rank_stride=4, ends=(1, 5))
        assert _ends(fsdp, 0) == (1, 1)
        assert _ends(fsdp, 5) == ()  # no rank 5 in a group of 2
        assert _ends(fsdp, True) == () and _ends(fsdp, "1") == () and _ends(fsdp, None) == ()
        assert _ends(2, 1) == ()  # a bare size: no ranks to name
        recv = CollectiveRule("send-recv", _arg(3), _size(40), direction="recv")  # no peer
        assert collective_info(recv, (tensor, 1, 0, fsdp), {}, None) == CollectiveInfo(
            "send-recv", 2, 40, 0, 40, rank_stride=4, ends=())


def test_a_rule_is_given_the_call_s_keyword_arguments_and_output() -> None:
    rule = CollectiveRule("all-reduce", lambda args, kwargs: kwargs["group"],
                          lambda args, kwargs, out, ranks: kwargs["scale"] * out.numel())
    out = torch.ones(6, device="meta")
    with fake_process_group(4) as world:
        info = collective_info(rule, (), {"group": world, "scale": 10}, out)
    # S = 10 · 6 = 60 over 4 ranks: 2 · 60 · 3 / 4 = 90 each way
    assert info == CollectiveInfo("all-reduce", 4, 60, 90, 90)


def _all_to_all(kind: str = "all-to-all") -> CollectiveRule:
    return CollectiveRule(kind, _arg(3), lambda args, kwargs, out, ranks: (
        args[0].numel() * args[0].element_size()))


def test_an_uneven_all_to_all_moves_all_but_its_own_rows() -> None:
    rows = torch.ones(10, 3, device="meta")  # a row: 3 · 4 = 12 bytes; S = 120
    with fake_process_group(4, rank=1) as world:
        name = world.group_name
        # rows sent to ranks 0..3: 1, 2, 3, 4; received from them: 4, 3, 2, 1
        info = collective_info(_all_to_all(), (rows, [4, 3, 2, 1], [1, 2, 3, 4], name), {},
                               None)
        # rank 1 keeps its own 2 rows: sends (10 - 2) · 12 = 96; receives (10 - 3) · 12 = 84
        assert info == CollectiveInfo("all-to-all", 4, 120, 96, 84)
        flat = torch.ones(10, dtype=torch.float64, device="meta")  # a row: one 8-byte element
        info = collective_info(_all_to_all(), (flat, [4, 3, 2, 1], [1, 2, 3, 4], name), {},
                               None)
        assert info == CollectiveInfo("all-to-all", 4, 80, 64, 56)  # 8 · 8, 7 · 8
    with fake_process_group(2) as world:
        # a permutation: rank 0 sends its 10 rows to rank 1 and gets rank 1's: all 120 bytes
        # each way, where even splits would say 120 · 1/2 = 60
        info = collective_info(_all_to_all(), (rows, [0, 10], [0, 10], world.group_name), {},
                               None)
        assert info == CollectiveInfo("all-to-all", 2, 120, 120, 120)


def test_even_splits_where_the_split_sizes_cannot_be_read() -> None:
    rows = torch.ones(10, 3, device="meta")  # S = 120; even: 120 · 3/4 = 90 each way
    even = CollectiveInfo("all-to-all", 4, 120, 90, 90)
    splits = ([4, 3, 2, 1], [1, 2, 3, 4])
    with fake_process_group(4, rank=1) as world:
        name = world.group_name
        assert collective_info(_all_to_all(), (rows, [], [], name), {}, None) == even
        assert collective_info(_all_to_all(), (rows, [], splits[1], name), {}, None) == even
        assert collective_info(_all_to_all(), (rows, splits[0], [], name), {}, None) == even
        # one split size fewer than ranks, on either side
        assert collective_info(_all_to_all(), (rows, [4, 3, 3], splits[1], name), {},
                               None) == even
        assert collective_info(_all_to_all(), (rows, splits[0], [1, 2, 7], name), {},
                               None) == even
        # a dim (an int) where one list of split sizes should be, on either side
        assert collective_info(_all_to_all(), (rows, 1, splits[1], name), {}, None) == even
        assert collective_info(_all_to_all(), (rows, splits[0], 1, name), {}, None) == even
        # three arguments: the group read from elsewhere, no split sizes
        three = CollectiveRule("all-to-all", lambda args, kwargs: name,
                               lambda args, kwargs, out, ranks: 120)
        assert collective_info(three, (rows, *splits), {}, None) == even
        # not a tensor first: no row to size
        assert collective_info(CollectiveRule("all-to-all", _arg(3), _size(120)),
                               ([rows], *splits, name), {}, None) == even
        # another kind with the same arguments: its own convention (all-gather: 90 each way)
        assert collective_info(_all_to_all("all-gather"), (rows, *splits, name), {},
                               None) == CollectiveInfo("all-gather", 4, 120, 90, 90)
        # one row: this rank's row size read from row 0, the only one (12 bytes); rank 1 sends
        # its row to rank 0 and receives rank 3's
        one = torch.ones(1, 3, device="meta")
        assert collective_info(_all_to_all(), (one, [0, 0, 0, 1], [1, 0, 0, 0], name), {},
                               None) == CollectiveInfo("all-to-all", 4, 12, 12, 12)
    # a bare group size: no rank to tell which rows are this rank's own
    assert collective_info(_all_to_all(), (rows, *splits, 4), {}, None) == even


def test_dtensor_s_all_to_all_of_two_dimensions_is_an_even_split() -> None:
    # shard_dim_alltoall(input, gather_dim, shard_dim, group): two dims where the functional
    # op has split sizes.  S = 8 · 4 · 4 · 4 bytes = 512; even: 512 · 3/4 = 384 each way.
    # (Both dims nonzero used to reach len() of an int: the op was listed as uncovered.)
    x = torch.ones(8, 4, 4, device="meta")
    with fake_process_group(4) as world, Recorder() as recorder:
        torch.ops._dtensor.shard_dim_alltoall(x, 1, 2, world.group_name)
    (record,) = recorder.trace.records
    assert record.covered
    assert record.collective == CollectiveInfo("all-to-all", 4, 512, 384, 384)
