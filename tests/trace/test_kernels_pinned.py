"""trace.kernels pinned: flash pads a head size to a multiple of 8 and cuts the output back,
as PyTorch's CUDA entry does; the recorded shapes are worked out by hand."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


class _Calls(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """The aten calls made inside, with their arguments, as the kernel receives them."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        self.calls.append((str(func), tuple(args), dict(kwargs or {})))
        return func(*args, **(kwargs or {}))

    def kernel(self, op: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        (found,) = [(a, k) for name, a, k in self.calls if name == op]
        return found


FLASH = "aten._scaled_dot_product_flash_attention.default"
EFFICIENT = "aten._scaled_dot_product_efficient_attention.default"


def test_flash_is_given_the_scale_of_the_unpadded_head() -> None:
    q, k, v = (torch.ones(2, 4, 8, 10, dtype=torch.bfloat16, device="meta") for _ in range(3))
    with target_program(H100), _Calls() as calls:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    _, kwargs = calls.kernel(FLASH)
    # the head is padded from 10 to 16, but softmax scales by 1/sqrt(10), not 1/sqrt(16)
    assert kwargs["scale"] == pytest.approx(10 ** -0.5)  # 0.3162..., not 0.25


def test_flash_and_memory_efficient_attention_pass_a_given_scale_on() -> None:
    bf16 = [torch.ones(2, 4, 8, 10, dtype=torch.bfloat16, device="meta") for _ in range(3)]
    fp32 = [torch.ones(2, 4, 8, 16, device="meta") for _ in range(3)]  # fp32: not flash
    with target_program(H100), _Calls() as calls:
        torch.nn.functional.scaled_dot_product_attention(*bf16, scale=0.3)
        torch.nn.functional.scaled_dot_product_attention(*fp32, scale=0.3)
    assert calls.kernel(FLASH)[1]["scale"] == 0.3  # as given, not 1/sqrt(10)
    assert calls.kernel(EFFICIENT)[1]["scale"] == 0.3


@pytest.mark.parametrize(("dtype", "op"), [(torch.bfloat16, FLASH), (torch.float32, EFFICIENT)])
def test_a_causal_call_reaches_the_kernel_causal(dtype: torch.dtype, op: str) -> None:
    # on an H100, bf16 without a mask runs flash, fp32 memory-efficient attention
    q, k, v = (torch.ones(2, 4, 8, 16, dtype=dtype, device="meta") for _ in range(3))
    with target_program(H100), Recorder() as recorder:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    causal, full = [r for r in recorder.trace.records if r.op == op]
    # 2 matmuls of 2 * S * S * D per head: 2 * 2 * 8 * 8 * 16 * (2 * 4) = 32768
    assert causal.flops == full.flops == 32768
    assert causal.flops_causal_halved == 32768 // 2   # the causal one is halved
    assert isinstance(causal.flops_causal_halved, int)  # a count, written as an integer
    assert full.flops_causal_halved == 32768          # the other is not


def test_flash_writes_no_debug_mask_and_cuts_nothing_from_a_head_of_16() -> None:
    q, k, v = (torch.ones(2, 4, 8, 16, dtype=torch.bfloat16, device="meta") for _ in range(3))
    with target_program(H100), Recorder() as recorder:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    (flash,) = [r for r in recorder.trace.records if r.op == FLASH]
    # no debug mask: an empty tensor in its place (one would be B x H x S_q x the keys
    # rounded up to 128, (2, 4, 8, 128), written out)
    assert flash.output_shapes[-1] == (0,)
    # 16 is a multiple of 8: the kernel's output is the result, no slice of it
    assert tuple(out.shape) == (2, 4, 8, 16)
    assert not any(r.op.startswith("aten.slice") for r in recorder.trace.records)


def test_the_math_kernel_repeats_grouped_key_heads() -> None:
    from tensorledger.trace.kernels import sdpa_on

    v100 = Target("v100-sxm", "cuda", (7, 0))  # bf16 on a V100: the math kernel
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 5, 8, generator=gen).to(torch.bfloat16)  # 4 query heads
    k, v = (torch.randn(1, 2, 6, 8, generator=gen).to(torch.bfloat16) for _ in range(2))
    out = sdpa_on(v100, q, k, v, enable_gqa=True)
    assert out is not None and tuple(out.shape) == (1, 4, 5, 8)
    # the second code path: each key head serves two query heads (0, 0, 1, 1)
    kf, vf = (t.float().repeat_interleave(2, dim=1) for t in (k, v))
    expected = torch.softmax(q.float() @ kf.transpose(-1, -2) * 8 ** -0.5, dim=-1) @ vf
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)


def test_cuda_autocast_casts_fp32_inputs_of_cuda_tensors() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # CUDA tensors without a GPU
        q, k, v = (torch.ones(2, 4, 8, 16, device="cuda") for _ in range(3))
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    # CUDA's autocast, set directly: torch.autocast("cuda") turns itself off without a GPU
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        with target_program(H100), Recorder() as recorder:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])
    # fp32 cast to bf16 (CUDA autocast's, not the CPU's, which is off): flash, in bf16
    assert out.dtype == torch.bfloat16
    (flash,) = [r for r in recorder.trace.records if r.op == FLASH]
    assert flash.input_dtypes[:3] == ("bf16",) * 3


def test_autocast_leaves_fp64_inputs_in_fp64() -> None:
    # as PyTorch's autocast does: it casts floating tensors but fp64
    q, k, v = (torch.ones(2, 4, 8, 16, dtype=torch.float64, device="meta") for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16), target_program(H100):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.float64


L4 = Target("l4", "cuda", (8, 9))
MI300X = Target("mi300x", "rocm")


def _kernel(target: Target, *args: torch.Tensor, **kwargs: Any) -> str:
    with target_program(target), Recorder() as recorder:
        torch.nn.functional.scaled_dot_product_attention(*args, **kwargs)
    ((_, kernel, _),) = recorder.trace.attention_kernels
    return kernel


def test_a_gradient_through_a_head_of_256_keeps_an_l4_off_flash() -> None:
    # compute capability 8.9: flash's backward takes heads of at most 192
    plain = torch.ones(1, 2, 8, 256, dtype=torch.bfloat16, device="meta")
    learnt = plain.clone().requires_grad_()
    assert _kernel(L4, plain, plain, plain) == "flash"  # no gradient: 256 is allowed
    assert _kernel(L4, learnt, plain, plain) == "efficient"
    with torch.no_grad():  # a gradient is asked for only where autograd records
        assert _kernel(L4, learnt, plain, plain) == "flash"


def test_causal_attention_with_fewer_queries_than_keys_is_not_flash() -> None:
    q = torch.ones(1, 2, 4, 16, dtype=torch.bfloat16, device="meta")  # 4 queries
    kv = torch.ones(1, 2, 8, 16, dtype=torch.bfloat16, device="meta")  # 8 keys
    assert _kernel(H100, q, kv, kv) == "flash"
    assert _kernel(H100, q, kv, kv, is_causal=True) == "efficient"


def test_grouped_keys_keep_rocm_off_memory_efficient_attention() -> None:
    q = torch.ones(1, 4, 8, 16, device="meta")  # fp32: not flash; 4 query heads
    kv = torch.ones(1, 2, 8, 16, device="meta")  # 2 key heads
    assert _kernel(MI300X, q, q, q) == "efficient"
    assert _kernel(MI300X, q, kv, kv, enable_gqa=True) == "math"


def test_calls_the_kernels_cannot_take_are_left_to_pytorch() -> None:
    from tensorledger.trace.kernels import sdpa_on

    four = torch.ones(2, 4, 8, 16, device="meta")
    three = torch.ones(4, 8, 16, device="meta")
    # a 3-d query, key or value: None, whichever it is
    assert sdpa_on(H100, three, four, four) is None
    assert sdpa_on(H100, four, three, four) is None
    assert sdpa_on(H100, four, four, three) is None
    # grouped key heads (2 of 4) without enable_gqa: PyTorch's own error, not a kernel
    grouped = torch.ones(2, 2, 8, 16, device="meta")
    assert sdpa_on(H100, four, grouped, grouped) is None


def test_meta_attention_off_target_runs_the_cpu_kernel_with_its_mask_and_scale() -> None:
    q = torch.ones(2, 4, 8, 16, device="meta")
    mask = torch.zeros(8, 8, device="meta")  # an additive mask, 8 queries x 8 keys
    with Recorder() as recorder, _Calls() as calls:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask, scale=0.3)
    cpu = "aten._scaled_dot_product_flash_attention_for_cpu.default"
    (record,) = [r for r in recorder.trace.records if r.op == cpu]
    assert record.input_shapes == ((2, 4, 8, 16),) * 3 + ((8, 8),)  # the mask read too
    assert calls.kernel(cpu)[1]["scale"] == 0.3
    ((module, kernel, reason),) = recorder.trace.attention_kernels
    assert (module, kernel) == ("", "cpu-flash")  # the root: no module ran it
    # the reason says where (meta) and which kernel's shapes (the CPU's fused one)
    assert reason.startswith("meta:") and "CPU fused kernel" in reason


def test_a_boolean_mask_becomes_an_additive_one_in_the_inputs_dtype_and_device() -> None:
    q = torch.ones(2, 4, 8, 16, dtype=torch.bfloat16, device="meta")
    mask = torch.ones(8, 8, dtype=torch.bool, device="meta")  # a mask: memory-efficient
    with target_program(H100), Recorder() as recorder:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    # the additive mask's zeros are made first, on the inputs' device (meta), in bf16
    first = recorder.trace.records[0]
    assert (first.op, first.output_dtypes) == ("aten.zeros.default", ("bf16",))
    assert recorder.trace.device == "meta"
    (kernel,) = [r for r in recorder.trace.records if r.op == EFFICIENT]
    assert kernel.input_dtypes == ("bf16",) * 4  # q, k, v and the mask, not an fp32 mask
