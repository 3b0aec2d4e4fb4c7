"""One rank's time under a layout: its collectives priced on the links by the ring formulas
(written out here by hand as the second code path), the serial and overlapped bounds of the
step, and the group placement read from where its ranks lie."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.ledger.roofline import RooflineRun, roofline_report
from tensorledger.roofline.model import predict, ranks_per_node
from tensorledger.trace import Trace
from tensorledger.trace.aggregate import communication
from tensorledger.workload import Workload, resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout

H100 = get_hardware("h100")  # 8 per node; NVLink 450 GB/s, 0.6 µs; NIC 50 GB/s, 2.7 µs


@pytest.mark.parametrize(("group", "stride", "per_node", "expected"), [
    (8, 1, 8, 8),  # tensor parallel inside a node
    (8, 8, 8, 1),  # the data-parallel group beside TP 8: one rank on each node
    (16, 4, 8, 2),  # ranks 0, 4, 8, ...: two on each 8-device node
    (4, 1, 8, 4),  # a small group packed on one node
    (6, 4, 8, 2),  # 2 divides 6
    (3, 4, 8, 1),  # 2 does not divide 3: one per node
])
def test_ranks_per_node(group: int, stride: int, per_node: int, expected: int) -> None:
    assert ranks_per_node(group, stride, per_node) == expected


def _work(**layout: int) -> Workload:
    return resolve_workload("tiny", batch=2, seq=16, precision="fp32",
                            layout=resolve_layout(**layout))


# each layout traced once for the module
@pytest.fixture(scope="module")
def fsdp4() -> RooflineRun:
    return roofline_report(_work(fsdp=4), H100)


@pytest.fixture(scope="module")
def fsdp4_trace() -> Trace:
    return trace_workload(_work(fsdp=4)).trace


@pytest.fixture(scope="module")
def piped() -> RooflineRun:
    return roofline_report(resolve_workload("tiny", batch=4, seq=16, precision="fp32",
                                            layout=resolve_layout(pp=2, microbatches=2)), H100)


def test_fsdp_collectives_take_the_ring_time_on_nvlink(fsdp4: RooflineRun,
                                                        fsdp4_trace: Trace) -> None:
    run = fsdp4
    p = run.prediction
    lat, bandwidth = 0.6e-6, 450e9  # the H100 catalog's NVLink figures, per direction
    by_hand = 0.0
    collectives = [o for o in p.ops if o.category == "communication" and o.link_time_s > 0]
    assert {o.bound for o in collectives} == {"link"}
    assert len(collectives) == 3 + 2 + 3  # gathers: 3 forward, 2 backward; 3 reduce-scatters
    # the records' own S: ring all-gather and reduce-scatter, N = 4 on one node: N − 1 steps
    # of latency and (N − 1)/N · S over the link
    for row in communication(fsdp4_trace):
        by_hand += row.calls * 3 * lat + 3 / 4 * row.size_bytes / bandwidth
    assert p.communication_s == pytest.approx(by_hand, rel=1e-12)
    assert sum(o.time_s for o in collectives) == pytest.approx(by_hand, rel=1e-12)
    # the bounds: serial ≥ overlapped ≥ each of compute and communication
    compute = p.time_s - p.communication_s
    assert p.overlapped_time_s <= p.time_s
    assert p.overlapped_time_s >= max(compute, p.communication_s)
    assert run.ranks == 4 and run.cluster is not None and run.cluster.data_parallel == 4


def test_hsdp_replicas_cross_nodes_on_the_nic() -> None:
    # 16 ranks: each shard group fills one node; replicas are 8 apart
    traced = list(trace_workload(_work(dp=2, fsdp=8)).trace.records)
    replicas = [o for o in predict(traced, H100).ops if o.category == "communication"
                and o.op.startswith("c10d.allreduce")]
    assert replicas, "HSDP all-reduces the reduce-scattered gradients over its replicas"
    sizes = [r.collective.size_bytes for r in traced if r.collective is not None
             and r.collective.kind == "all-reduce"]
    strides = {r.collective.rank_stride for r in traced if r.collective is not None
               and r.collective.kind == "all-reduce"}
    assert strides == {8}
    # 2 ranks on 2 nodes: ring all-reduce of 2·(N − 1) = 2 steps, both crossing the network
    # (2.7 µs each), and 2·(N − 1)/N · S = S bytes through one NIC of 50 GB/s
    by_hand = [2 * 2.7e-6 + s / 50e9 for s in sizes]
    assert [o.time_s for o in replicas] == pytest.approx(by_hand, rel=1e-12)


def test_a_chip_without_topology_is_refused_for_a_layout(fsdp4_trace: Trace
                                                          ) -> None:
    chip = parse_hardware_toml('name = "bare"\nmemory = "80GB"\nmemory_bandwidth = "3TB/s"\n'
                               '[dense]\nfp32 = "60TFLOP/s"\n', "bare.toml")
    with pytest.raises(InputError, match="lists no devices_per_node"):
        predict(fsdp4_trace.records, chip)


def test_pipeline_rank_time_with_its_bubble_and_sends(piped: RooflineRun) -> None:
    run = piped
    # 2 stages, 2 micro-batches: (p − 1)/(m + p − 1) = 1/3 of the step idles
    assert run.cluster is not None and run.cluster.pipeline_bubble == pytest.approx(1 / 3)
    # from 1F1B's own action lists; the first of 2 stages runs p = 2 forwards before its
    # first backward
    assert run.cluster.bubble_source == "1f1b's action lists" and run.cluster.in_flight == 2
    assert run.step_s == pytest.approx(run.prediction.time_s * 3 / 2)
    # stage 0 sends each micro-batch's activation (2 · 16 · 64 fp32 = 8,192 bytes) and
    # receives its gradient: 4 transfers, each one hop on NVLink (0.6 µs) plus 8,192 B / 450 GB/s
    assert run.prediction.communication_s == pytest.approx(4 * (0.6e-6 + 8_192 / 450e9),
                                                           rel=1e-12)


def test_cluster_tokens_per_s_by_hand(fsdp4: RooflineRun, piped: RooflineRun) -> None:
    assert fsdp4.cluster is not None and piped.cluster is not None
    run = fsdp4.cluster
    p = fsdp4.prediction
    # 4 data-parallel ranks, each 2 × 16 tokens per step, over the serial and overlapped step
    assert run.tokens_per_s == pytest.approx((4 * 32 / p.time_s, 4 * 32 / p.overlapped_time_s))
    assert run.exposed_communication_s == pytest.approx(p.time_s - p.overlapped_time_s)
    # one pipeline (no data parallelism), 64 tokens, the step stretched by 1 / (1 − 1/3)
    assert piped.cluster.tokens_per_s[0] == pytest.approx(64 / (piped.prediction.time_s * 1.5))
    # the cluster's MFU: the rank's FLOPs over the stretched step and the dense peak
    peak = p.flops / (p.mfu * p.time_s)
    assert piped.cluster.mfu == pytest.approx(
        piped.prediction.flops / (piped.prediction.time_s * 1.5 * peak), rel=1e-9)
