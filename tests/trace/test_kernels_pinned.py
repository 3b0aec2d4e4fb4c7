"""trace.kernels pinned: flash pads a head size to a multiple of 8 and cuts the output back,
as PyTorch's CUDA entry does; the recorded shapes are worked out by hand."""

from __future__ import annotations

import torch

from tensorledger.hardware.target import Target
from tensorledger.trace.kernels import target_program
from tensorledger.trace.recorder import Recorder
from tensorledger.trace.records import OpRecord

H100 = Target("h100-sxm", "cuda", (9, 0))


def test_flash_pads_a_head_of_10_to_16_and_cuts_the_output_back() -> None:
    q, k, v = (torch.ones(2, 4, 8, 10, dtype=torch.bfloat16, device="meta") for _ in range(3))
    with target_program(H100), Recorder() as recorder:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert tuple(out.shape) == (2, 4, 8, 10)  # cut back from 16
    (flash,) = [r for r in recorder.trace.records
                if r.op == "aten._scaled_dot_product_flash_attention.default"]
    # -10 mod 8 = 6: each of q, k, v padded on the right to 16
    assert flash.input_shapes == ((2, 4, 8, 16),) * 3
    pads = [r for r in recorder.trace.records if r.op.startswith("aten.constant_pad_nd")]
    assert len(pads) == 3


def test_flash_leaves_a_head_of_16_unpadded() -> None:
    q, k, v = (torch.ones(2, 4, 8, 16, dtype=torch.bfloat16, device="meta") for _ in range(3))
    with target_program(H100), Recorder() as recorder:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    ops = [r.op for r in recorder.trace.records]
    assert "aten._scaled_dot_product_flash_attention.default" in ops
    assert not any(op.startswith("aten.constant_pad_nd") for op in ops)


def test_the_math_kernel_computes_causal_attention_with_the_scale_given() -> None:
    from tensorledger.trace.kernels import sdpa_on

    v100 = Target("v100-sxm", "cuda", (7, 0))  # bf16: no flash, no memory-efficient: math
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(3))
    half = [t.to(torch.bfloat16) for t in (q, k, v)]
    out = sdpa_on(v100, *half, is_causal=True, scale=0.5)
    assert out is not None and out.dtype == torch.bfloat16
    # the second code path: softmax(q·kᵀ · 0.5 with the upper triangle at -inf) · v, in fp32
    # from the same bf16 inputs
    qf, kf, vf = (t.float() for t in half)
    scores = qf @ kf.transpose(-1, -2) * 0.5
    scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ vf
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)


def _efficient_record(grad: bool) -> tuple[OpRecord, ...]:
    # fp32 with a mask on an H100: not flash (a mask), memory-efficient; batch 3, heads 2
    q = torch.ones(3, 2, 8, 8, device="meta", requires_grad=grad)
    k, v = torch.ones(3, 2, 10, 8, device="meta"), torch.ones(3, 2, 10, 8, device="meta")
    mask = torch.ones(8, 10, dtype=torch.bool, device="meta")
    with target_program(H100), Recorder() as recorder:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert tuple(out.shape) == (3, 2, 8, 8)
    return recorder.trace.records


def test_memory_efficient_attention_pads_the_mask_to_16_keys() -> None:
    records = _efficient_record(grad=False)
    (pad,) = [r for r in records if r.op.startswith("aten.constant_pad_nd")]
    # 10 keys: -10 mod 16 = 6 more, 16 in all (on the right only)
    assert pad.output_shapes == ((8, 16),)
    (kernel,) = [r for r in records
                 if r.op == "aten._scaled_dot_product_efficient_attention.default"]
    # q, k, v and the mask cut back to 10 keys and expanded to (batch, heads, queries, keys)
    assert kernel.input_shapes == ((3, 2, 8, 8), (3, 2, 10, 8), (3, 2, 10, 8), (3, 2, 8, 10))
    # no gradient: no log-sum-exp kept (0 per head)
    assert kernel.output_shapes[:2] == ((3, 2, 8, 8), (3, 2, 0))
    # as many key heads as query heads: nothing repeated (repeat_interleave on meta runs as
    # unsqueeze, expand, clone, view: no clone here)
    assert not any(r.op == "aten.clone.default" for r in records)


def test_memory_efficient_attention_keeps_the_log_sum_exp_for_a_gradient() -> None:
    records = _efficient_record(grad=True)
    (kernel,) = [r for r in records
                 if r.op == "aten._scaled_dot_product_efficient_attention.default"]
    # the log-sum-exp of 8 queries, kept in blocks of 32: 32 per head
    assert kernel.output_shapes[1] == (3, 2, 32)
