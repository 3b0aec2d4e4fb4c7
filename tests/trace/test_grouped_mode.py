"""GroupedMMMode: fake and meta tensors get CUDA's dtype rule for ``aten._grouped_mm`` (bf16,
fp16, fp32; the output in ``mat_a``'s dtype), where torch's meta function takes bf16 only.
The second code path is torch's own CPU kernel, which takes fp32 on real tensors: the fake
output has its shape, strides and dtype for every layout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tensorledger.trace import Recorder
from tensorledger.trace.grouped import GroupedMMMode

aten = torch.ops.aten

# G = 3 groups; ΣM = 10, K = 8, N = 12 (fp32 rows of 32 and 48 bytes: 16-byte aligned)
G, SUM_M, K, N = 3, 10, 8, 12
ENDS = (3, 7, 10)

#: layout → (mat_a, mat_b, offsets?) shapes
LAYOUTS: dict[str, tuple[tuple[int, ...], tuple[int, ...], bool]] = {
    "2d-3d": ((SUM_M, K), (G, K, N), True),  # MoE forward: groups of rows
    "2d-2d": ((SUM_M, N), (SUM_M, K), True),  # MoE weight gradient: groups of K (a is
    # the gradient's transpose, column-major: a row of 10 fp32 is no multiple of 16 bytes)
    "3d-2d": ((G, 16, K), (K, N), True),  # groups of columns of b (ΣN = 12: 3, 4, 5)
    "3d-3d": ((G, 16, K), (G, K, N), False),  # batched
}


def _operands(layout: str, make: Callable[..., torch.Tensor]
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    a_shape, b_shape, with_offs = LAYOUTS[layout]
    ends = (3, 7, 12) if layout == "3d-2d" else ENDS
    offs = torch.tensor(ends, dtype=torch.int32) if with_offs else None
    a = make(*a_shape).t() if layout == "2d-2d" else make(*a_shape)
    return a, make(*b_shape), offs


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_fake_fp32_has_the_cpu_kernels_output(layout: str) -> None:
    a, b, offs = _operands(layout, torch.randn)
    real = aten._grouped_mm(a, b, offs)
    with FakeTensorMode() as fake_mode:
        fa, fb = fake_mode.from_tensor(a), fake_mode.from_tensor(b)
        foffs = None if offs is None else fake_mode.from_tensor(offs)
        with pytest.raises(RuntimeError, match="Expected inputs of BF16 type"):
            aten._grouped_mm(fa, fb, foffs)  # torch's meta function alone
        with GroupedMMMode():
            out = aten._grouped_mm(fa, fb, foffs)
    assert (out.shape, out.stride(), out.dtype) == (real.shape, real.stride(), torch.float32)


def test_meta_fp16_and_bf16() -> None:
    def meta(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    offs = torch.empty(G, dtype=torch.int32, device="meta")
    with GroupedMMMode():
        half = aten._grouped_mm(meta(SUM_M, K, dtype=torch.float16),
                                meta(G, K, 16, dtype=torch.float16), offs)
        # bf16 goes on to torch's own meta function
        bf16 = aten._grouped_mm(meta(SUM_M, K, dtype=torch.bfloat16),
                                meta(G, K, 16, dtype=torch.bfloat16), offs)
    assert (tuple(half.shape), half.dtype, half.device.type) == ((10, 16), torch.float16, "meta")
    assert (tuple(bf16.shape), bf16.dtype) == ((10, 16), torch.bfloat16)


def test_real_tensors_are_left_to_pytorch() -> None:
    a, b, offs = _operands("2d-3d", torch.randn)
    with GroupedMMMode():
        out = aten._grouped_mm(a, b, offs)
    expected = torch.cat([a[0:3] @ b[0], a[3:7] @ b[1], a[7:10] @ b[2]])
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(("change", "message"), [
    ({"b_dtype": torch.bfloat16}, "same dtype"),
    ({"k": 6}, "16 bytes"),  # a row of 6 fp32 is 24 bytes
    ({"offs": None}, "Have to provide offsets"),
    ({"bias": True}, "Bias not supported"),
    ({"out_dtype": torch.bfloat16}, "output dtype must match"),
    ({"groups": 2}, "batch sizes have to match"),
    ({"a_dtype": torch.float64}, "Float32, BFloat16 or Float16"),
])
def test_what_cuda_refuses_is_refused(change: dict[str, object], message: str) -> None:
    k = int(change.get("k", K))  # type: ignore[call-overload]
    a_dtype = change.get("a_dtype", torch.float32)
    b_dtype = change.get("b_dtype", a_dtype)
    groups = int(change.get("groups", G))  # type: ignore[call-overload]
    a = torch.empty(SUM_M, k, dtype=a_dtype, device="meta")  # type: ignore[call-overload]
    b = torch.empty(G, k, 16, dtype=b_dtype, device="meta")  # type: ignore[call-overload]
    offs = change.get("offs", torch.empty(groups, dtype=torch.int32, device="meta"))
    bias = torch.empty(G, 16, device="meta") if change.get("bias") else None
    with GroupedMMMode(), pytest.raises(RuntimeError, match=message):
        aten._grouped_mm(a, b, offs, bias, change.get("out_dtype"))


def test_below_the_recorder_the_op_is_recorded_not_its_allocation() -> None:
    with FakeTensorMode(), GroupedMMMode():
        x = torch.empty(SUM_M, K, requires_grad=True)
        w = torch.empty(G, K, N, requires_grad=True)
        offs = torch.empty(G, dtype=torch.int32)
        # not sum()'s gradient: expanded, its stride 0 is refused by the kernels (CPU and CUDA)
        grad = torch.empty(SUM_M, N)
        with Recorder() as recorder:
            aten._grouped_mm(x, w, offs).backward(grad)
    grouped = [r for r in recorder.trace.records if r.op == "aten._grouped_mm.default"]
    # forward, then the two gradients (each its own grouped product of the forward's size):
    # 2 · 10 · 8 · 12 = 1920 FLOPs each
    assert [(r.phase, r.output_shapes, r.output_dtypes, r.flops) for r in grouped] == [
        ("forward", ((10, 12),), ("fp32",), 1920),
        ("backward", ((3, 8, 12),), ("fp32",), 1920),  # the weight's: (8, ΣM)·(ΣM, 12)
        ("backward", ((10, 8),), ("fp32",), 1920),  # the input's: (ΣM, 12)·(3, 12, 8)
    ]
    assert not any(r.op.startswith("aten.empty") for r in recorder.trace.records)
