"""Checkpointing policies applied to modules: the wrapping, unchanged numbers, refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.models import DeepNetwork
from tensorledger.plan.checkpoint import (
    CheckpointPolicy,
    Segment,
    every_kth_block,
    selective,
    sqrt_segments,
)
from tensorledger.workload import resolve_workload
from tensorledger.workload.checkpointing import (
    CheckpointedSegment,
    apply_policy,
    keeps_output,
    trace_workload_with_policy,
)


def test_segments_replace_their_blocks() -> None:
    net = apply_policy(DeepNetwork(4, 7, device="meta"), CheckpointPolicy(
        "mixed", 7, (Segment(1, 3), Segment(4, 5, "selective"))))
    kinds = [type(b).__name__ for b in net.blocks]
    assert kinds == ["MatmulBlock", "CheckpointedSegment", "Identity", "MatmulBlock",
                     "CheckpointedSegment", "MatmulBlock", "MatmulBlock"]
    first, second = net.blocks[1], net.blocks[4]
    assert isinstance(first, CheckpointedSegment) and isinstance(second, CheckpointedSegment)
    assert (len(first.segment), first.mode, len(second.segment), second.mode) == (
        2, "full", 1, "selective")
    assert sum(p.numel() for p in net.parameters()) == 4 * 4 * 7  # nothing lost or added


@pytest.mark.parametrize("policy", [sqrt_segments(6), every_kth_block(6, 2), selective(6)],
                         ids=lambda p: p.name)
def test_a_checkpointed_network_computes_the_same(policy: CheckpointPolicy) -> None:
    torch.manual_seed(0)
    plain = DeepNetwork(5, 6, "gelu")
    checkpointed = DeepNetwork(5, 6, "gelu")
    checkpointed.load_state_dict(plain.state_dict())
    apply_policy(checkpointed, policy)
    x = torch.randn(3, 5)
    plain(x).square().mean().backward()  # type: ignore[no-untyped-call]
    checkpointed(x).square().mean().backward()  # type: ignore[no-untyped-call]
    for a, b in zip(plain.parameters(), checkpointed.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad)


def test_selective_keeps_matmul_and_attention_outputs_only() -> None:
    aten = torch.ops.aten
    assert keeps_output(aten.mm.default) and keeps_output(aten.addmm.default)
    assert keeps_output(aten._scaled_dot_product_flash_attention_for_cpu.default)
    assert not keeps_output(aten.gelu.default)
    assert not keeps_output(aten.add.Tensor)
    assert not keeps_output(aten.view.default)


def test_refusals() -> None:
    with pytest.raises(InputError, match=r"no \.blocks list"):
        apply_policy(nn.Linear(2, 2), sqrt_segments(2))
    with pytest.raises(InputError, match="for 4 blocks; DeepNetwork has 3"):
        apply_policy(DeepNetwork(2, 3, device="meta"), sqrt_segments(4))
    net = apply_policy(DeepNetwork(2, 3, device="meta"), selective(3))
    with pytest.raises(InputError, match="already checkpointed"):
        apply_policy(net, selective(3))
    work = resolve_workload("tiny", batch=1, seq=8, checkpoint=True)
    with pytest.raises(InputError, match="already checkpointed"):
        trace_workload_with_policy(work, selective(2))
    on_meta = resolve_workload("tiny", batch=1, seq=8, precision="fp32", device="meta")
    with pytest.raises(InputError, match="not meta; use device='fake'"):
        trace_workload_with_policy(on_meta, selective(2))
