"""Collective time from the ring and tree formulas, bandwidths as nccl-tests define them, and a
cross-check against torch._inductor.comm_analysis (see docs/collectives.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.roofline.collectives import (
    Algorithm,
    CollectiveKind,
    algorithm_bandwidth,
    bus_bandwidth,
    bus_factor,
    collective_time,
    ring_steps,
)

AR, AG, RS = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
A2A = CollectiveKind.ALL_TO_ALL
US = 1e-6
H100 = get_hardware("h100")  # 8 per node, 450 GB/s NVLink and 50 GB/s NIC per direction


# nccl-tests doc/PERFORMANCE.md, "Summary": busbw = algbw × factor
@pytest.mark.parametrize(("kind", "ranks", "factor"), [
    (AR, 8, 2 * 7 / 8), (AR, 2, 2 * 1 / 2), (AR, 64, 2 * 63 / 64),
    (AG, 8, 7 / 8), (RS, 8, 7 / 8), (A2A, 8, 7 / 8), (AG, 3, 2 / 3),
    (CollectiveKind.BROADCAST, 8, 1.0), (CollectiveKind.REDUCE, 8, 1.0),
    (CollectiveKind.SEND_RECV, 2, 1.0), (AR, 1, 0.0), (AG, 1, 0.0),
])
def test_bus_factor_is_nccl_tests(kind: CollectiveKind, ranks: int, factor: float) -> None:
    assert bus_factor(kind, ranks) == pytest.approx(factor)
    assert bus_bandwidth(kind, ranks, 100e9) == pytest.approx(100e9 * factor)
    if factor:
        assert algorithm_bandwidth(kind, ranks, bus_bandwidth(kind, ranks, 3e9)) == (
            pytest.approx(3e9))


@pytest.mark.parametrize(("kind", "ranks", "steps"), [
    (AR, 8, 14), (AG, 8, 7), (RS, 5, 4), (A2A, 4, 3), (CollectiveKind.BROADCAST, 6, 5),
    (CollectiveKind.SEND_RECV, 2, 1), (AR, 1, 0),
])
def test_ring_steps(kind: CollectiveKind, ranks: int, steps: int) -> None:
    assert ring_steps(kind, ranks) == steps


def test_all_reduce_on_one_node() -> None:
    t = collective_time(AR, 1e9, 8, H100)
    assert (t.nodes, t.ranks_per_node, t.link) == (1, 8, "intra-node")
    assert t.sent_bytes_per_rank == pytest.approx(1.75e9)  # 2 · 7/8 · 1e9
    assert t.bandwidth_time_s == pytest.approx(1.75e9 / 450e9)  # 3.889 ms
    assert t.latency_time_s == pytest.approx(14 * 0.6 * US)  # 2 · 7 hops
    assert t.time_s == pytest.approx(1.75e9 / 450e9 + 8.4 * US)
    assert t.algbw_bytes_per_s == pytest.approx(1e9 / t.time_s)
    assert t.busbw_bytes_per_s == pytest.approx(1.75 * 1e9 / t.time_s)


def test_bus_bandwidth_approaches_the_link_for_large_messages() -> None:
    # nccl-tests' point: busbw is the hardware bottleneck, whatever the collective and N
    for kind in (AR, AG, RS, A2A):
        for ranks in (2, 4, 8):
            t = collective_time(kind, 1e13, ranks, H100)
            assert t.busbw_bytes_per_s == pytest.approx(450e9, rel=1e-6)


def test_all_gather_of_the_whole_array() -> None:
    # S is the gathered array: 4 ranks each holding 1 MB gather S = 4 MB, and send 3 MB each
    t = collective_time(AG, 4e6, 4, H100)
    assert t.sent_bytes_per_rank == pytest.approx(3e6)
    assert t.time_s == pytest.approx(3 * 0.6 * US + 3e6 / 450e9)


def test_a_group_spanning_nodes_packed() -> None:
    # 16 ranks on 2 nodes of 8: the ring's network share is 8 NICs × 50 GB/s = 400 GB/s,
    # below NVLink's 450 GB/s; 2 of the 30 steps cross the network
    t = collective_time(AR, 1e9, 16, H100)
    assert (t.nodes, t.ranks_per_node, t.link) == (2, 8, "inter-node (NIC)")
    assert t.link_bytes_per_s == pytest.approx(8 * 50e9)
    assert (t.steps, t.inter_node_steps) == (30, 2)
    assert t.latency_time_s == pytest.approx(28 * 0.6 * US + 2 * 2.7 * US)  # 22.2 us
    assert t.bandwidth_time_s == pytest.approx(2 * 15 / 16 * 1e9 / 400e9)


def test_a_part_full_last_node_has_fewer_nics() -> None:
    # 12 ranks packed on nodes of 8: 8 + 4; the second node's 4 NICs carry the ring
    t = collective_time(AG, 1e9, 12, H100)
    assert (t.nodes, t.ranks_per_node, t.link_bytes_per_s) == (2, 8, 4 * 50e9)
    assert t.bandwidth_time_s == pytest.approx(11 / 12 * 1e9 / 200e9)


def test_a_group_with_one_rank_per_node_has_one_nic() -> None:
    # data parallelism beside tensor parallelism of 8: 4 ranks, one on each of 4 nodes
    t = collective_time(RS, 4e8, 4, H100, ranks_per_node=1)
    assert (t.nodes, t.link, t.link_bytes_per_s) == (4, "inter-node (NIC)", 50e9)
    assert t.latency_time_s == pytest.approx(3 * 2.7 * US)
    assert t.bandwidth_time_s == pytest.approx(3 / 4 * 4e8 / 50e9)


def test_nvlink_is_the_slower_link_when_nics_are_many() -> None:
    fast_network = replace(H100, inter_node_bytes_per_s=100e9)  # 8 × 100 > 450
    t = collective_time(AG, 1e9, 32, fast_network)
    assert (t.nodes, t.link, t.link_bytes_per_s) == (4, "intra-node", 450e9)
    assert t.inter_node_steps == 3  # nodes − 1 crossings of 31 steps


def test_tree_all_reduce() -> None:
    # chain of 8 inside each node, a tree of 2 nodes: 2 · (7 · 0.6 + 1 · 2.7) us; 2·S / B
    t = collective_time(AR, 1e6, 16, H100, algorithm=Algorithm.TREE)
    assert t.latency_time_s == pytest.approx(2 * (7 * 0.6 + 2.7) * US)  # 13.8 us
    assert t.bandwidth_time_s == pytest.approx(2e6 / 400e9)
    assert (t.steps, t.inter_node_steps) == (16, 2)


def test_best_takes_tree_for_small_and_ring_for_large_messages() -> None:
    small = collective_time(AR, 1e3, 16, H100, algorithm=Algorithm.BEST)
    large = collective_time(AR, 1e10, 16, H100, algorithm=Algorithm.BEST)
    # small: tree 13.8 us + 5 ns < ring 22.2 us + 4.7 ns; large: 2·S > 2·15/16·S
    assert small.algorithm is Algorithm.TREE and large.algorithm is Algorithm.RING
    assert collective_time(AG, 1e3, 16, H100, algorithm=Algorithm.BEST).algorithm is (
        Algorithm.RING)


def test_a_group_of_one_moves_nothing() -> None:
    t = collective_time(AR, 1e9, 1, get_hardware("rtx-4090"))
    assert (t.time_s, t.sent_bytes_per_rank, t.link) == (0.0, 0.0, "none")


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda: collective_time(AR, 1e6, 16, get_hardware("h100-pcie")),
     "h100-pcie lists no inter_node_bandwidth, which a group of 16 ranks spanning 2 nodes"),
    (lambda: collective_time(AR, 1e6, 2, get_hardware("tpu-v5e")),
     "tpu-v5e lists no devices_per_node"),
    (lambda: collective_time(AG, 1e6, 8, H100, algorithm=Algorithm.TREE),
     "tree algorithm applies to all-reduce only"),
    (lambda: collective_time(AR, 1e6, 12, H100, ranks_per_node=8),
     "divides the group's 12 ranks"),
    (lambda: collective_time(AR, 1e6, 32, H100, ranks_per_node=16),
     "16 ranks per node do not fit a node of 8"),
    (lambda: collective_time(AR, -1.0, 8, H100), "size must be a finite number"),
    (lambda: collective_time(AR, 1e6, 0, H100), "ranks >= 1"),
])
def test_refusals(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=fragment):
        call()


# ------------------------------------------------- the oracle: torch._inductor.comm_analysis

@pytest.fixture
def comm_analysis(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """comm_analysis with a Hopper GPU and our H100 link figures in its GB/s; on CPU it
    assumes 8 GPUs per node, as our catalog does."""
    ca = pytest.importorskip("torch._inductor.comm_analysis")
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(ca, "get_gpu_type", lambda: ca.NVIDIA_GPU_TYPE.HOPPER)
    monkeypatch.setattr(ca, "_has_nvlink", lambda: True)
    with inductor_config.patch(intra_node_bw=450.0, inter_node_bw=50.0):
        yield ca


def _their_seconds(ca, kind: CollectiveKind, size: int, ranks: int) -> float:  # type: ignore[no-untyped-def]
    coll = {AR: ca.NCCL_COLL.ALL_REDUCE, AG: ca.NCCL_COLL.ALL_GATHER,
            RS: ca.NCCL_COLL.REDUCE_SCATTER}[kind]
    return float(ca.estimate_nccl_collective_runtime_impl(size, ranks, coll)) / 1e3  # ms → s


@pytest.mark.parametrize("kind", [AR, AG, RS])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_one_node_bandwidth_term_equals_comm_analysis(comm_analysis, kind: CollectiveKind,  # type: ignore[no-untyped-def]
                                                      ranks: int) -> None:
    # Large messages: both price ring / Simple at the same bus bandwidth, so the slope of time
    # against size is the same, factor / 450 GB/s; the intercepts differ by NCCL's base
    # latency 8.4 us and its Simple-protocol hop 3.4 us against our LL hop 0.6 us.
    s1, s2 = 2**30, 2**31
    theirs = [_their_seconds(comm_analysis, kind, s, ranks) for s in (s1, s2)]
    ours = [collective_time(kind, s, ranks, H100).time_s for s in (s1, s2)]
    slope = bus_factor(kind, ranks) / 450e9
    assert (theirs[1] - theirs[0]) / (s2 - s1) == pytest.approx(slope, rel=1e-9)
    assert (ours[1] - ours[0]) / (s2 - s1) == pytest.approx(slope, rel=1e-9)
    steps = ring_steps(kind, ranks)
    assert theirs[0] - ours[0] == pytest.approx((8.4 + steps * (3.4 - 0.6)) * US, rel=1e-6)


@pytest.mark.parametrize("kind", [AR, AG, RS])
def test_two_nodes_comm_analysis_prices_one_nic(comm_analysis, kind: CollectiveKind) -> None:  # type: ignore[no-untyped-def]
    # 16 ranks on 2 nodes of 8.  comm_analysis prices the ring on one device's NIC times its
    # calibrated efficiency 0.77 + 0.23 · (nodes − 1)/7; that is our figure for a group with
    # one rank per node.  A packed group gets the node's 8 NICs here (docs/collectives.md).
    s1, s2 = 2**30, 2**31
    theirs = [_their_seconds(comm_analysis, kind, s, 16) for s in (s1, s2)]
    their_slope = (theirs[1] - theirs[0]) / (s2 - s1)
    efficiency = 0.77 + 0.23 * 1 / 7
    one_nic = [collective_time(kind, s, 16, H100, ranks_per_node=1).time_s for s in (s1, s2)]
    packed = [collective_time(kind, s, 16, H100).time_s for s in (s1, s2)]
    assert their_slope * efficiency == pytest.approx((one_nic[1] - one_nic[0]) / (s2 - s1),
                                                     rel=1e-9)
    assert their_slope * efficiency == pytest.approx(8 * (packed[1] - packed[0]) / (s2 - s1),
                                                     rel=1e-9)
