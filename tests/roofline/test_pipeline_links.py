"""A pipeline's send and receive priced on the link between its two ranks: one device's NVLink
when both lie on one node, its own NIC when not — whatever else the pipeline group spans.

H100 (catalog): 8 devices a node; NVLink 450 GB/s and 0.6 µs a hop, the NIC 50 GB/s and
2.7 µs.  Tiny in 2 stages, 4 sequences of 16 tokens in 2 micro-batches: each message is one
micro-batch's residual stream, 2 · 16 · 64 · 4 = 8,192 bytes; stage 0 sends 2 and receives 2.
"""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.models import get_preset
from tensorledger.roofline.model import predict
from tensorledger.trace.records import OpRecord
from tensorledger.workload.layout import Layout
from tensorledger.workload.pipeline import trace_pipeline_step

H100 = get_hardware("h100")
MESSAGE = 2 * 16 * 64 * 4  # 8,192 bytes


def _p2p(within: Layout) -> list[OpRecord]:
    step = trace_pipeline_step(get_preset("tiny"), 4, 16, 2, 2, "1f1b", within=within)
    return [r for r in step.trace.records
            if r.collective is not None and r.collective.kind == "send-recv"]


@pytest.mark.parametrize(("within", "peer", "hop_s", "bytes_per_s"), [
    # FSDP 2 within each stage: the stages' ranks lie 2 apart, 0 and 2 on one node
    (Layout(fsdp=2), 2, 0.6e-6, 450e9),
    # FSDP 8 within each stage fills a node: stage 1's rank is rank 8, on the next node
    (Layout(fsdp=8), 8, 2.7e-6, 50e9),
])
def test_a_send_is_priced_on_the_link_to_its_peer(within: Layout, peer: int, hop_s: float,
                                                  bytes_per_s: float) -> None:
    records = _p2p(within)
    assert len(records) == 4
    assert {r.collective.ends for r in records if r.collective} == {(0, peer)}
    times = [op.time_s for op in predict(records, H100).ops]
    assert times == pytest.approx([hop_s + MESSAGE / bytes_per_s] * 4, rel=1e-12)


def test_a_send_across_nodes_gets_one_nic_not_the_groups() -> None:
    # a 16-stage pipeline packed 8 to a node: rank 7 sends to rank 8 over its own NIC (the
    # group's 8 NICs of the node are not this message's); rank 0 to rank 1 over NVLink
    send = _p2p(Layout(fsdp=2))[0]
    assert send.collective is not None
    wide = dataclasses.replace(send.collective, group_size=16, rank_stride=1)
    across = dataclasses.replace(send, collective=dataclasses.replace(wide, ends=(7, 8)))
    inside = dataclasses.replace(send, collective=dataclasses.replace(wide, ends=(0, 1)))
    times = [op.time_s for op in predict([across, inside], H100).ops]
    assert times == pytest.approx([2.7e-6 + MESSAGE / 50e9, 0.6e-6 + MESSAGE / 450e9],
                                  rel=1e-12)
