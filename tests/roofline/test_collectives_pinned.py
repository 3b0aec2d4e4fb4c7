"""``collectives.py`` pinned where the mutation run of issue 42 found no test: a group of one in
every field, empty messages, the faster algorithm of a group laid out by hand, a tie between
ring and tree, and the refusals of a malformed ``ranks_per_node``.  Every figure is worked out
by hand beside it from the H100 entry's topology: 8 devices a node, NVLink 450 GB/s with a
0.6 µs hop, a 50 GB/s NIC a device with a 2.7 µs hop."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.roofline.collectives import (
    Algorithm,
    CollectiveKind,
    CollectiveTime,
    algorithm_bandwidth,
    collective_time,
)

AR, AG = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER
US = 1e-6
H100 = get_hardware("h100")  # its id: "h100-sxm"


def test_a_group_of_one_has_no_algorithm_bandwidth() -> None:
    # bus factor 2·0/1 = 0: nothing moves, so the algbw that a busbw means is 0 (no division)
    assert algorithm_bandwidth(AR, 1, 5e9) == 0.0
    assert algorithm_bandwidth(AG, 1, 0.0) == 0.0


def test_a_group_of_one_in_every_field() -> None:
    t = collective_time(AG, 3e6, 1, H100, algorithm=Algorithm.RING)
    assert t == CollectiveTime(kind=AG, algorithm=Algorithm.RING, hardware="h100-sxm", ranks=1,
                               ranks_per_node=1, nodes=1, size_bytes=3e6, bus_factor=0.0,
                               sent_bytes_per_rank=0.0, link="none", link_bytes_per_s=0.0,
                               steps=0, inter_node_steps=0, latency_time_s=0.0,
                               bandwidth_time_s=0.0, time_s=0.0, algbw_bytes_per_s=0.0,
                               busbw_bytes_per_s=0.0)


def test_an_empty_message_costs_its_hops_alone() -> None:
    # 0 bytes are a valid size: 8 ranks on one node, 2·7 = 14 hops of 0.6 µs, nothing to move
    t = collective_time(AR, 0.0, 8, H100)
    assert t.latency_time_s == pytest.approx(14 * 0.6 * US)
    assert (t.bandwidth_time_s, t.algbw_bytes_per_s) == (0.0, 0.0)
    # half a byte is a size too (a mean over ranks can be fractional): 7 hops + 0.5·7/8 / 450e9
    half = collective_time(AG, 0.5, 8, H100)
    assert half.time_s == pytest.approx(7 * 0.6 * US + 0.5 * 7 / 8 / 450e9)


def test_an_exact_tie_keeps_the_ring() -> None:
    # 2 ranks on one node, 0 bytes: the ring's 2 hops of 0.6 µs (2·(2−1) steps, none across
    # nodes) and the tree's 2·(1 hop inside + ⌊log₂ 1⌋ = 0 between) are both 1.2 µs; the tree
    # is taken only when strictly faster
    best = collective_time(AR, 0.0, 2, H100, algorithm=Algorithm.BEST)
    assert best.algorithm is Algorithm.RING
    assert best.time_s == pytest.approx(1.2 * US)


def test_best_prices_both_algorithms_on_the_given_layout() -> None:
    # 16 ranks, one on each of 16 nodes: every link is a device's own NIC, 50 GB/s.
    # ring: 30 steps, all crossing (min(2·15, 30)), 30 · 2.7 = 81 µs + 2·15/16·S / 50 GB/s
    # tree: no hop inside a node, ⌊log₂ 16⌋ = 4 between: 2·4·2.7 = 21.6 µs + 2·S / 50 GB/s
    small = collective_time(AR, 1e3, 16, H100, ranks_per_node=1, algorithm=Algorithm.BEST)
    # 21.6 µs + 2e3 / 50e9 = 21.64 µs against 81.04 µs: the tree
    assert small.algorithm is Algorithm.TREE
    assert (small.ranks_per_node, small.nodes) == (1, 16)
    assert small.time_s == pytest.approx(21.6 * US + 2e3 / 50e9)
    large = collective_time(AR, 1e10, 16, H100, ranks_per_node=1, algorithm=Algorithm.BEST)
    # ring 81 µs + 1.875e10 / 50e9 = 0.375081 s against the tree's 0.4000216 s: the ring
    assert large.algorithm is Algorithm.RING
    assert (large.ranks_per_node, large.nodes, large.link_bytes_per_s) == (1, 16, 50e9)
    assert large.time_s == pytest.approx(30 * 2.7 * US + 2 * 15 / 16 * 1e10 / 50e9)


@pytest.mark.parametrize("per_node", [0, -2, True, 2.0])
def test_a_malformed_ranks_per_node_is_refused(per_node: object) -> None:
    # 0 and −2 lie outside 1..4 (−2 divides 4, and lies below a node's 8, so only the range
    # refuses it); True and 2.0 are not whole numbers of ranks, though 4 % True and 4 % 2.0 are 0
    with pytest.raises(InputError, match="whole number from 1 to 4"):
        collective_time(AR, 1e6, 4, H100, ranks_per_node=per_node)  # type: ignore[arg-type]


def test_a_group_with_one_rank_a_node_needs_no_intra_node_keys() -> None:
    # 4 ranks on 4 nodes never use NVLink: a chip listing only its NICs prices them, 3 hops of
    # 2.7 µs and 3/4 · 4·10⁸ bytes at 50 GB/s
    nics_only = replace(H100, intra_node_bytes_per_s=None, intra_node_latency_s=None)
    t = collective_time(AG, 4e8, 4, nics_only, ranks_per_node=1)
    assert t.time_s == pytest.approx(3 * 2.7 * US + 0.75 * 4e8 / 50e9)


def test_a_group_with_several_ranks_a_node_needs_both_intra_node_keys() -> None:
    no_bandwidth = replace(H100, intra_node_bytes_per_s=None)
    with pytest.raises(InputError, match=r"^h100-sxm lists no intra_node_bandwidth, which a "
                                          r"group with several ranks on a node uses; add it"):
        collective_time(AG, 1e6, 2, no_bandwidth)
    no_latency = replace(H100, intra_node_latency_s=None)
    with pytest.raises(InputError, match=r"^h100-sxm lists no intra_node_latency, which a "
                                          r"group with several ranks on a node uses; add it"):
        collective_time(AG, 1e6, 2, no_latency)


def test_a_group_spanning_nodes_needs_the_inter_node_latency() -> None:
    no_latency = replace(H100, inter_node_latency_s=None)
    with pytest.raises(InputError, match=r"^h100-sxm lists no inter_node_latency, which a "
                                          r"group of 16 ranks spanning 2 nodes uses; add it"):
        collective_time(AR, 1e6, 16, no_latency)


@pytest.mark.parametrize("ranks", [True, 2.0])
def test_ranks_must_be_a_whole_number(ranks: object) -> None:
    with pytest.raises(InputError, match="a group needs a whole number of ranks >= 1"):
        collective_time(AR, 1e6, ranks, H100)  # type: ignore[arg-type]


def test_two_ranks_a_node_take_nvlink_when_their_nics_are_faster() -> None:
    # 4 ranks, 2 on each of 2 nodes, NICs of 300 GB/s: the network share of a node is 2 · 300
    # = 600 GB/s, above NVLink's 450: the ring's slowest link is NVLink
    fast = replace(H100, inter_node_bytes_per_s=300e9)
    t = collective_time(AG, 1e9, 4, fast, ranks_per_node=2)
    assert (t.nodes, t.link, t.link_bytes_per_s) == (2, "intra-node", 450e9)


def test_a_collective_of_no_time_has_no_algorithm_bandwidth() -> None:
    # hops of no latency and no bytes: 0 s, and the algbw of nothing in no time is 0
    instant = replace(H100, intra_node_latency_s=0.0)
    t = collective_time(AR, 0.0, 8, instant)
    assert (t.time_s, t.algbw_bytes_per_s, t.busbw_bytes_per_s) == (0.0, 0.0, 0.0)


def test_a_group_spanning_nodes_in_every_field() -> None:
    # 16 ranks packed on 2 nodes of 8 (the first test of test_collectives.py): bus factor
    # 2 · 15/16 = 1.875; the network share 8 · 50 = 400 GB/s below NVLink's 450; 30 steps, 2
    # crossing: 28 · 0.6 + 2 · 2.7 = 22.2 µs; 1.875e9 / 400e9 = 4.6875 ms
    t = collective_time(AR, 1e9, 16, H100)
    time = 22.2 * US + 1.875e9 / 400e9
    assert t == CollectiveTime(kind=AR, algorithm=Algorithm.RING, hardware="h100-sxm",
                               ranks=16, ranks_per_node=8, nodes=2, size_bytes=1e9,
                               bus_factor=1.875, sent_bytes_per_rank=1.875e9,
                               link="inter-node (NIC)", link_bytes_per_s=400e9, steps=30,
                               inter_node_steps=2, latency_time_s=pytest.approx(22.2 * US),
                               bandwidth_time_s=pytest.approx(1.875e9 / 400e9),
                               time_s=pytest.approx(time),
                               algbw_bytes_per_s=pytest.approx(1e9 / time),
                               busbw_bytes_per_s=pytest.approx(1.875e9 / time))


def test_a_network_share_equal_to_nvlink_is_named_the_network() -> None:
    # 2 ranks a node, NICs of 225 GB/s: 2 · 225 = 450 GB/s, NVLink's own: the same figure
    # either way, and the link named is the network's (NVLink is taken only when slower)
    even = replace(H100, inter_node_bytes_per_s=225e9)
    t = collective_time(AG, 1e9, 4, even, ranks_per_node=2)
    assert (t.link, t.link_bytes_per_s) == ("inter-node (NIC)", 450e9)
