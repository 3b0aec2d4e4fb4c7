"""The time of a collective from the ring and tree formulas, on a chip's node topology.

**Sizes and bandwidths as nccl-tests define them** (NVIDIA/nccl-tests, doc/PERFORMANCE.md).
A collective moves ``size_bytes`` = S: the buffer of an all-reduce, broadcast or reduce; the
*whole* gathered array of an all-gather (N × what each rank contributes); the whole array a
reduce-scatter reduces (N × what each rank keeps); one rank's whole send buffer of an
all-to-all; the message of a send/receive.  Algorithm bandwidth is S / t.  Bus bandwidth is
algbw × a factor that makes it comparable with the per-device, per-direction link bandwidth B:
2(N−1)/N for all-reduce, (N−1)/N for all-gather, reduce-scatter and all-to-all, 1 for
broadcast, reduce and send/receive.  At best, t = factor × S / B.

**Ring** (what NCCL uses for every collective but tree all-reduce): 2(N−1) steps for an
all-reduce (reduce-scatter then all-gather), N−1 for the others, each rank sending factor × S
in all; t = α·steps + factor·S / B.

**Tree all-reduce** (NCCL's double binary tree between nodes, a chain inside each): every byte
goes up and comes down, t = 2·S / B plus the latency of 2·((r−1) hops inside a node +
⌊log₂ nodes⌋ hops between nodes), as NCCL's tuning model counts it.

**Groups that span nodes.**  A group of N ranks with r ranks on each node (packed by default:
r = min(N, devices_per_node), the last node holding what is left) crosses the network when it
has more than one node.  NCCL builds one ring through all nodes, one channel per NIC, so the
ring's slowest link is either a device's NVLink (B_intra) or the network share that the r
ranks of a node have together (r × B_inter, each device with its own NIC); a group with one
rank per node has only its own NIC, and a part-full last node only its own ranks' NICs (12
ranks on nodes of 8: 4 on the second).  Both algorithms take B = min(B_intra, r·B_inter),
with r of the least-filled node, once the group spans nodes.  A ring step that crosses the
network costs the inter-node hop latency, the others the intra-node one (2(nodes−1) of the
steps of an all-reduce, nodes−1 of the others, as in NCCL's tuning model).  NCCL has no
two-level reduce-scatter / all-reduce / all-gather by default (only with CollNet/SHARP or
NVLS), so none is modelled.

The latency α is NCCL's per-hop figure for the low-latency protocol (what NCCL picks for small
messages, where α matters) and B the full link rate (what its Simple protocol nearly reaches for
large ones, where B matters): the model follows the lower envelope and is optimistic where the
protocols cross over.  NCCL's fixed launch latency (≈ 6–8 µs) is left out.  docs/collectives.md
sets this against ``torch._inductor.comm_analysis``.

>>> from tensorledger.hardware import get_hardware
>>> t = collective_time(CollectiveKind.ALL_REDUCE, 1e9, 8, get_hardware("h100"))
>>> round(t.bandwidth_time_s * 1e6)            # 2 · 7/8 · 1e9 B / 450 GB/s
3889
>>> t.steps, round(t.latency_time_s * 1e6, 1)  # 2 · 7 hops · 0.6 µs
(14, 8.4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware

__all__ = [
    "Algorithm",
    "CollectiveKind",
    "CollectiveTime",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "bus_factor",
    "collective_time",
    "ring_steps",
]


class CollectiveKind(Enum):
    """A collective, named as in the trace and the CLI."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SEND_RECV = "send-recv"


class Algorithm(Enum):
    """How a collective is carried out: NCCL's ring, its tree (all-reduce only), or the faster."""

    RING = "ring"
    TREE = "tree"
    BEST = "best"


_HALF = (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL)


def _ranks(ranks: int) -> int:
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise InputError(f"a group needs a whole number of ranks >= 1, got {ranks!r}")
    return ranks


def bus_factor(kind: CollectiveKind, ranks: int) -> float:
    """busbw / algbw for ``kind`` on ``ranks`` ranks (nccl-tests): also what each rank sends
    over a ring, per byte of S.

    >>> bus_factor(CollectiveKind.ALL_REDUCE, 8), bus_factor(CollectiveKind.ALL_GATHER, 8)
    (1.75, 0.875)
    """
    n = _ranks(ranks)
    if kind is CollectiveKind.ALL_REDUCE:
        return 2 * (n - 1) / n
    if kind in _HALF:
        return (n - 1) / n
    return 1.0


def bus_bandwidth(kind: CollectiveKind, ranks: int, algbw_bytes_per_s: float) -> float:
    """nccl-tests' bus bandwidth from an algorithm bandwidth S / t."""
    return algbw_bytes_per_s * bus_factor(kind, ranks)


def algorithm_bandwidth(kind: CollectiveKind, ranks: int, busbw_bytes_per_s: float) -> float:
    """The algorithm bandwidth S / t that a bus bandwidth means; 0 for a group of one, which
    moves nothing (nccl-tests reports its algbw as measured, and its busbw as 0)."""
    factor = bus_factor(kind, ranks)
    return busbw_bytes_per_s / factor if factor else 0.0


def ring_steps(kind: CollectiveKind, ranks: int) -> int:
    """Sequential steps of the ring algorithm: 2(N−1) for all-reduce, N−1 for all-gather,
    reduce-scatter, all-to-all (pairwise exchanges), broadcast and reduce (a pipelined chain),
    1 for a send/receive."""
    n = _ranks(ranks)
    if n == 1:
        return 0
    if kind is CollectiveKind.ALL_REDUCE:
        return 2 * (n - 1)
    if kind is CollectiveKind.SEND_RECV:
        return 1
    return n - 1


@dataclass(frozen=True)
class CollectiveTime:
    """One collective priced on a chip's topology: the latency and bandwidth terms apart."""

    kind: CollectiveKind
    algorithm: Algorithm  # RING or TREE: the one priced (BEST resolves to one of them)
    hardware: str
    ranks: int
    ranks_per_node: int
    nodes: int
    size_bytes: float  # S, in the nccl-tests sense
    bus_factor: float
    sent_bytes_per_rank: float  # over a ring: bus_factor × S
    link: str  # "intra-node", "inter-node (NIC)" or "none" (a group of one)
    link_bytes_per_s: float  # B, per device and per direction, of the slowest link priced
    steps: int
    inter_node_steps: int
    latency_time_s: float
    bandwidth_time_s: float
    time_s: float
    algbw_bytes_per_s: float  # S / time_s
    busbw_bytes_per_s: float  # algbw × bus_factor: what nccl-tests would print


def _need(hardware: Hardware, value: float | None, key: str, why: str) -> float:
    if value is None:
        raise InputError(f"{hardware.id} lists no {key}, which {why}; add it to a hardware "
                         "TOML file (see the catalog's topology keys)")
    return value


def collective_time(kind: CollectiveKind, size_bytes: float, ranks: int, hardware: Hardware,
                    *, ranks_per_node: int | None = None,
                    algorithm: Algorithm = Algorithm.RING) -> CollectiveTime:
    """Time of one ``kind`` collective of ``size_bytes`` over ``ranks`` ranks of ``hardware``.

    ``ranks_per_node`` says how the group lies on nodes (default: packed, as many as a node
    holds); a data-parallel group beside tensor parallelism of 8 has 1.  ``algorithm`` TREE
    applies to all-reduce only; BEST takes the faster of ring and tree.
    """
    n = _ranks(ranks)
    if not (math.isfinite(size_bytes) and size_bytes >= 0):
        raise InputError(f"a collective's size must be a finite number of bytes >= 0, got "
                         f"{size_bytes!r}")
    if algorithm is Algorithm.TREE and kind is not CollectiveKind.ALL_REDUCE:
        raise InputError(f"the tree algorithm applies to all-reduce only, not {kind.value}")
    if algorithm is Algorithm.BEST:
        ring = collective_time(kind, size_bytes, n, hardware, ranks_per_node=ranks_per_node)
        if kind is not CollectiveKind.ALL_REDUCE:
            return ring
        tree = collective_time(kind, size_bytes, n, hardware, ranks_per_node=ranks_per_node,
                               algorithm=Algorithm.TREE)
        return tree if tree.time_s < ring.time_s else ring
    factor = bus_factor(kind, n)
    if n == 1:
        return CollectiveTime(kind=kind, algorithm=algorithm, hardware=hardware.id, ranks=1,
                              ranks_per_node=1, nodes=1, size_bytes=size_bytes,
                              bus_factor=factor, sent_bytes_per_rank=0.0, link="none",
                              link_bytes_per_s=0.0, steps=0, inter_node_steps=0,
                              latency_time_s=0.0, bandwidth_time_s=0.0, time_s=0.0,
                              algbw_bytes_per_s=0.0, busbw_bytes_per_s=0.0)
    per_node = _place(hardware, n, ranks_per_node)
    nodes = -(-n // per_node)
    intra_bw = intra_lat = 0.0
    if per_node > 1:
        intra_bw = _need(hardware, hardware.intra_node_bytes_per_s, "intra_node_bandwidth",
                         "a group with several ranks on a node uses")
        intra_lat = _need(hardware, hardware.intra_node_latency_s, "intra_node_latency",
                          "a group with several ranks on a node uses")
    if nodes == 1:
        link, bandwidth = "intra-node", intra_bw
        inter_lat = 0.0
    else:
        nic = _need(hardware, hardware.inter_node_bytes_per_s, "inter_node_bandwidth",
                    f"a group of {n} ranks spanning {nodes} nodes uses")
        inter_lat = _need(hardware, hardware.inter_node_latency_s, "inter_node_latency",
                          f"a group of {n} ranks spanning {nodes} nodes uses")
        # a packed group may leave its last node part full: its fewer NICs are the bottleneck
        network = (n - (nodes - 1) * per_node) * nic
        if per_node > 1 and intra_bw < network:
            link, bandwidth = "intra-node", intra_bw
        else:
            link, bandwidth = "inter-node (NIC)", network
    if algorithm is Algorithm.RING:
        steps = ring_steps(kind, n)
        crossings = 0 if nodes == 1 else (
            2 * (nodes - 1) if kind is CollectiveKind.ALL_REDUCE else nodes - 1)
        crossings = min(crossings, steps)
        latency = (steps - crossings) * intra_lat + crossings * inter_lat
        moved = factor * size_bytes
    else:
        up_intra, up_inter = per_node - 1, int(math.log2(nodes))
        steps, crossings = 2 * (up_intra + up_inter), 2 * up_inter
        latency = 2 * (up_intra * intra_lat + up_inter * inter_lat)
        moved = 2.0 * size_bytes
    bandwidth_time = moved / bandwidth
    time_s = latency + bandwidth_time
    algbw = size_bytes / time_s if time_s > 0 else 0.0
    return CollectiveTime(kind=kind, algorithm=algorithm, hardware=hardware.id, ranks=n,
                          ranks_per_node=per_node, nodes=nodes, size_bytes=size_bytes,
                          bus_factor=factor, sent_bytes_per_rank=factor * size_bytes,
                          link=link, link_bytes_per_s=bandwidth, steps=steps,
                          inter_node_steps=crossings, latency_time_s=latency,
                          bandwidth_time_s=bandwidth_time, time_s=time_s,
                          algbw_bytes_per_s=algbw, busbw_bytes_per_s=algbw * factor)


def _place(hardware: Hardware, ranks: int, ranks_per_node: int | None) -> int:
    """Ranks of the group on each node: given, or packed."""
    per_device = hardware.devices_per_node
    if ranks_per_node is None:
        if per_device is None:
            raise InputError(f"{hardware.id} lists no devices_per_node, which places a group "
                             "of several ranks on nodes; add it to a hardware TOML file")
        return min(ranks, per_device)
    if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or not (
            1 <= ranks_per_node <= ranks) or ranks % ranks_per_node:
        raise InputError(f"ranks_per_node must be a whole number from 1 to {ranks} that "
                         f"divides the group's {ranks} ranks, got {ranks_per_node!r}")
    if per_device is not None and ranks_per_node > per_device:
        raise InputError(f"{ranks_per_node} ranks per node do not fit a node of "
                         f"{per_device} × {hardware.id}")
    return ranks_per_node
