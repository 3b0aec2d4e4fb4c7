"""One test per matrix-product and convolution rule: FLOPs, bytes and category by hand, and
torch's FlopCounterMode where it has a formula.

Shapes: M = 3, K = 5, N = 7, batch 2 (all different, so a swapped index changes the count).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

from tests.costs.rules_support import aten, direct, meta, record_op, record_with_oracle, rule

M, K, N, BATCH = 3, 5, 7, 2
F32 = 4


def test_rule_aten_mm() -> None:
    record, oracle = record_with_oracle("aten.mm", lambda: meta(M, K) @ meta(K, N))
    assert record.flops == oracle == 2 * 3 * 7 * 5 == 210
    assert record.bytes_read == F32 * (3 * 5 + 5 * 7) == 200
    assert record.bytes_written == F32 * 3 * 7 == 84
    assert record.category == "matmul"


def test_rule_aten__int_mm() -> None:
    # the int8 kernel wants M > 16 and K, N multiples of 8: 17 × 24 · 24 × 40
    a, b = meta(17, 24, dtype=torch.int8), meta(24, 40, dtype=torch.int8)
    record = record_op("aten._int_mm", lambda: aten._int_mm(a, b))
    assert record.flops == 2 * 17 * 40 * 24 == 32640
    assert record.bytes_read == 1 * (17 * 24 + 24 * 40) == 1368  # int8 in
    assert record.bytes_written == 4 * 17 * 40 == 2720  # int32 out
    assert record.category == "matmul"


def test_rule_aten_addmm() -> None:
    bias = meta(N)
    record, oracle = record_with_oracle(
        "aten.addmm", lambda: torch.addmm(bias, meta(M, K), meta(K, N)))
    assert record.flops == oracle == 2 * 3 * 7 * 5 == 210  # the bias add is not counted
    assert record.bytes_read == F32 * (7 + 3 * 5 + 5 * 7) == 228
    assert record.bytes_written == F32 * 3 * 7 == 84
    assert record.category == "matmul"


def test_rule_aten__addmm_activation() -> None:
    record = record_op("aten._addmm_activation", lambda: aten._addmm_activation(
        meta(N), meta(M, K), meta(K, N), use_gelu=True))
    assert record.flops == 2 * 3 * 7 * 5 == 210
    assert record.bytes_read == F32 * (7 + 3 * 5 + 5 * 7) == 228
    assert record.category == "matmul"


def test_rule_aten__scaled_mm() -> None:
    # fp8 operands in multiples of 16: (16 × 32) · (32 × 48), fp32 scalar scales, bf16 out
    a = meta(16, 32, dtype=torch.float8_e4m3fn)
    b = meta(48, 32, dtype=torch.float8_e4m3fn).t()
    scale_a, scale_b = meta(), meta()
    record, oracle = record_with_oracle("aten._scaled_mm", lambda: aten._scaled_mm(
        a, b, scale_a, scale_b, out_dtype=torch.bfloat16))
    assert record.flops == oracle == 2 * 16 * 48 * 32 == 49152
    assert record.bytes_read == 16 * 32 + 48 * 32 + 4 + 4 == 2056
    assert record.bytes_written == 2 * 16 * 48 == 1536
    assert record.category == "matmul"


def test_rule_aten_bmm() -> None:
    record, oracle = record_with_oracle("aten.bmm", lambda: meta(BATCH, M, K) @ meta(BATCH, K, N))
    assert record.flops == oracle == 2 * 2 * 3 * 7 * 5 == 420
    assert record.bytes_read == F32 * 2 * (3 * 5 + 5 * 7) == 400
    assert record.bytes_written == F32 * 2 * 3 * 7 == 168
    assert record.category == "matmul"


def test_rule_aten_baddbmm() -> None:
    record, oracle = record_with_oracle("aten.baddbmm", lambda: torch.baddbmm(
        meta(BATCH, M, N), meta(BATCH, M, K), meta(BATCH, K, N)))
    assert record.flops == oracle == 2 * 2 * 3 * 7 * 5 == 420
    assert record.bytes_read == F32 * 2 * (3 * 7 + 3 * 5 + 5 * 7) == 568
    assert record.category == "matmul"


def test_rule_aten_dot() -> None:
    # one multiply and one add per term: 2n, not the lecture's 2n − 1 (FlopCounterMode's rule)
    record = record_op("aten.dot", lambda: torch.dot(meta(11), meta(11)))
    assert record.flops == 2 * 11 == 22
    assert record.bytes_read == F32 * (11 + 11) == 88
    assert record.bytes_written == F32
    assert record.category == "matmul"


def test_rule_aten_vdot() -> None:
    record = record_op("aten.vdot", lambda: torch.vdot(meta(11), meta(11)))
    assert record.flops == 2 * 11 == 22
    assert record.category == "matmul"


def test_rule_aten_mv() -> None:
    record = record_op("aten.mv", lambda: torch.mv(meta(M, K), meta(K)))
    assert record.flops == 2 * 3 * 5 == 30
    assert record.bytes_read == F32 * (3 * 5 + 5) == 80
    assert record.bytes_written == F32 * 3 == 12
    assert record.category == "matmul"


def test_rule_aten_addmv() -> None:
    record = record_op("aten.addmv", lambda: torch.addmv(meta(M), meta(M, K), meta(K)))
    assert record.flops == 2 * 3 * 5 == 30
    assert record.bytes_read == F32 * (3 + 3 * 5 + 5) == 92
    assert record.category == "matmul"


def test_rule_aten_matmul() -> None:
    # a composite: the dispatcher shows the mm it becomes, so the rule is called directly;
    # (2, 3, 5) @ (5, 7) → (2, 3, 7): 2 · 42 outputs · K 5 = 420, FlopCounterMode agrees
    a, b = meta(BATCH, M, K), meta(K, N)
    with FlopCounterMode(display=False) as counter:
        out = torch.matmul(a, b)
    assert direct("aten.matmul", (a, b), out=out) == counter.get_total_flops() == 420
    # a vector on the right: (3, 5) @ (5,) → (3,): 2 · 3 · 5 = 30
    assert direct("aten.matmul", (meta(M, K), meta(K)), out=meta(M)) == 30
    assert (rule("aten.matmul").category, rule("aten.matmul").moves) == ("matmul", "io")


def test_rule_aten_linear() -> None:
    # x (2, 3, 5) · weightᵀ (7, 5) + bias → (2, 3, 7): 2 · 42 · 5 = 420; the bias is not counted
    x, weight, bias = meta(BATCH, M, K), meta(N, K), meta(N)
    with FlopCounterMode(display=False) as counter:
        out = torch.nn.functional.linear(x, weight, bias)
    assert direct("aten.linear", (x, weight, bias), out=out) == counter.get_total_flops() == 420
    assert (rule("aten.linear").category, rule("aten.linear").moves) == ("matmul", "io")


# ---- convolutions: x (2, 3, 7, 5), weight (4, 3, 3, 2) → out (2, 4, 5, 4)
X, W, OUT = (2, 3, 7, 5), (4, 3, 3, 2), (2, 4, 5, 4)
CONV_FLOPS = 2 * 2 * (4 * 3 * 3 * 2) * (5 * 4)  # 2 · batch · weight 72 · output grid 20 = 5760
# transposed: x (2, 4, 5, 4), weight (C_in 4, C_out 3, 3, 2) → out (2, 3, 7, 5); the weight
# meets the *input* grid 5 · 4 = 20 points (the output grid 7 · 5 = 35 would give 10080)
TX = (2, 4, 5, 4)
TRANSPOSED_FLOPS = 2 * 2 * (4 * 3 * 3 * 2) * (5 * 4)


def _convolution(transposed: bool) -> torch.Tensor:
    x, w = (meta(*TX), meta(4, 3, 3, 2)) if transposed else (meta(*X), meta(*W))
    return aten.convolution(x, w, None, [1, 1], [0, 0], [1, 1], transposed, [0, 0], 1)


def test_rule_aten_convolution() -> None:
    record, oracle = record_with_oracle("aten.convolution", lambda: _convolution(False))
    assert record.flops == oracle == CONV_FLOPS == 5760
    assert record.bytes_read == F32 * (2 * 3 * 7 * 5 + 4 * 3 * 3 * 2) == 1128
    assert record.bytes_written == F32 * 2 * 4 * 5 * 4 == 640
    assert record.category == "matmul"
    record, oracle = record_with_oracle("aten.convolution", lambda: _convolution(True))
    assert record.flops == oracle == TRANSPOSED_FLOPS == 5760


def test_rule_aten__convolution() -> None:
    for transposed, x, w, expected in ((False, X, W, CONV_FLOPS),
                                       (True, TX, (4, 3, 3, 2), TRANSPOSED_FLOPS)):
        def step(x: tuple[int, ...] = x, w: tuple[int, ...] = w,
                 transposed: bool = transposed) -> object:
            return aten._convolution(meta(*x), meta(*w), None, [1, 1], [0, 0], [1, 1],
                                     transposed, [0, 0], 1, False, False, True, True)

        record, oracle = record_with_oracle("aten._convolution", step)
        assert record.flops == oracle == expected == 5760
        assert record.category == "matmul"
    # grouped: 6 input channels in 2 groups of 3 and the same weight (4, 3, 3, 2); each weight
    # element still meets 20 output points per batch element: 2 · 2 · 72 · 20 = 5760
    grouped = aten._convolution(meta(2, 6, 7, 5), meta(4, 3, 3, 2), None, [1, 1], [0, 0],
                                [1, 1], False, [0, 0], 2, False, False, True, True)
    assert direct("aten._convolution", (meta(2, 6, 7, 5), meta(4, 3, 3, 2), None, [1, 1],
                                        [0, 0], [1, 1], False, [0, 0], 2), out=grouped) == 5760


def test_rule_aten_cudnn_convolution() -> None:
    # (self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32):
    # no `transposed` argument; position 6 is `benchmark`, which must not turn the count into
    # a transposed one (FlopCounterMode reads it as `transposed`: 2·2·72·35 = 10080 there)
    x, w, out = meta(*X), meta(*W), meta(*OUT)
    for benchmark in (False, True):
        args = (x, w, [0, 0], [1, 1], [1, 1], 1, benchmark, False, True)
        assert direct("aten.cudnn_convolution", args, out=out) == CONV_FLOPS == 5760
    assert conv_flop_count(list(X), list(W), list(OUT)) == 5760  # torch's own formula
    assert (rule("aten.cudnn_convolution").category,
            rule("aten.cudnn_convolution").moves) == ("matmul", "io")


def test_rule_aten__slow_conv2d_forward() -> None:
    # CPU only (no meta kernel): small real tensors; (self, weight, kernel_size, bias, ...).
    # FlopCounterMode's formula for this op expects a `transposed` argument it does not have
    # and raises, so torch's conv_flop_count is the oracle here.
    x, w = torch.zeros(X), torch.zeros(W)
    record = record_op("aten._slow_conv2d_forward", lambda: (
        aten._slow_conv2d_forward(x, w, [3, 2], None, [1, 1], [0, 0])))
    oracle = conv_flop_count(list(X), list(W), list(OUT))
    assert record.flops == oracle == CONV_FLOPS == 5760
    assert record.bytes_read == F32 * (2 * 3 * 7 * 5 + 4 * 3 * 3 * 2) == 1128
    assert record.bytes_written == F32 * 2 * 4 * 5 * 4 == 640
    assert record.category == "matmul"


def test_rule_aten_convolution_overrideable() -> None:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    args = (meta(*X), meta(*W), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert direct("aten.convolution_overrideable", args, out=meta(*OUT)) == 5760
    args = (meta(*TX), meta(4, 3, 3, 2), None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1)
    assert direct("aten.convolution_overrideable", args, out=meta(*X)) == 5760  # input grid
    assert rule("aten.convolution_overrideable").category == "matmul"


@pytest.mark.parametrize(("mask", "products"), [
    ([True, True, False], 2),    # input and weight gradients: the forward twice
    ([True, False, False], 1),   # frozen weight: the input gradient only
    ([False, True, False], 1),   # first layer: the weight gradient only
    ([False, False, True], 0),   # the bias gradient is a sum, not a product
])
@pytest.mark.parametrize("transposed", [False, True])
def test_rule_aten_convolution_backward(mask: list[bool], products: int,
                                        transposed: bool) -> None:
    x, w, grad = ((meta(*TX), meta(4, 3, 3, 2), meta(*X)) if transposed
                  else (meta(*X), meta(*W), meta(*OUT)))
    record, oracle = record_with_oracle("aten.convolution_backward", lambda: (
        aten.convolution_backward(grad, x, w, [grad.shape[1]], [1, 1], [0, 0], [1, 1], transposed,
                                  [0, 0], 1, mask)))
    assert record.flops == oracle == products * 5760
    read = F32 * (grad.numel() + x.numel() + w.numel())  # grad_out, input, weight
    assert record.bytes_read == read == F32 * (160 + 210 + 72) == 1768
    assert record.category == "matmul"


# ---- grouped products: G = 3 groups, ΣM = 10 rows, K = 8, N = 24 (bf16 rows of 16 and 48 bytes,
# as the grouped kernel's 16-byte strides want)
G, SUM_M, GK, GN = 3, 10, 8, 24
BF16 = 2


def _offsets(*ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32)


def _per_group_mm(a: torch.Tensor, b: torch.Tensor, ends: tuple[int, ...]) -> int:
    """FlopCounterMode's count of the same products written as one mm per group of rows."""
    with FlopCounterMode(display=False) as counter:
        start = 0
        for g, end in enumerate(ends):
            a[start:end] @ b[g]
            start = end
    return int(counter.get_total_flops())


def test_rule_aten__grouped_mm() -> None:
    # (ΣM, K) · (G, K, N) → (ΣM, N), bf16 on meta: torch's own meta function
    a, b, offs = meta(SUM_M, GK, dtype=torch.bfloat16), meta(G, GK, GN, dtype=torch.bfloat16), \
        meta(G, dtype=torch.int32)
    record = record_op("aten._grouped_mm", lambda: aten._grouped_mm(a, b, offs))
    assert record.flops == 2 * 10 * 8 * 24 == 3840
    # every expert's weights are read (the house convention: whole input storages), offs too
    assert record.bytes_read == BF16 * (10 * 8 + 3 * 8 * 24) + 4 * 3 == 1324
    assert record.bytes_written == BF16 * 10 * 24 == 480
    assert record.category == "matmul"
    # Real fp32 tensors on the CPU kernel: the count is the same whatever the offsets, and
    # equals FlopCounterMode over one mm per group (it has no rule for _grouped_mm itself)
    x, w = torch.randn(SUM_M, GK), torch.randn(G, GK, GN)
    for ends in ((3, 7, 10), (0, 10, 10), (10, 10, 10)):
        def grouped(ends: tuple[int, ...] = ends) -> torch.Tensor:
            return aten._grouped_mm(x, w, _offsets(*ends))  # type: ignore[no-any-return]

        record = record_op("aten._grouped_mm", grouped)
        assert record.flops == _per_group_mm(x, w, ends) == 3840
    # Rows past offs[-1] belong to no group and are not computed: the rule counts the whole
    # axis, an upper bound there (2 · 7 · 8 · 24 = 2688 ran)
    assert _per_group_mm(x, w, (3, 5, 7)) == 2688 < 3840


def test_grouped_mm_every_layout() -> None:
    # the weight gradient of the forward above: (M, ΣK) · (ΣK, N) → (G, M, N), groups of K;
    # here M = 24 (N above), ΣK = 10, N = 8: 2 · 24 · 10 · 8 = 3840, each group's share summed;
    # the gradient's transpose is column-major (a row of 10 bf16 is no multiple of 16 bytes)
    gt = meta(SUM_M, GN, dtype=torch.bfloat16).t()
    x = meta(SUM_M, GK, dtype=torch.bfloat16)
    offs = meta(G, dtype=torch.int32)
    record = record_op("aten._grouped_mm", lambda: aten._grouped_mm(gt, x, offs))
    assert record.output_shapes == ((3, 24, 8),)
    assert record.flops == 2 * 24 * 10 * 8 == 3840
    # (G, M, K) · (K, ΣN) → (M, ΣN), groups of columns: M = 16, K = 8, ΣN = 24
    record = record_op("aten._grouped_mm", lambda: aten._grouped_mm(
        meta(G, 16, GK, dtype=torch.bfloat16), meta(GK, GN, dtype=torch.bfloat16), offs))
    assert record.output_shapes == ((16, 24),)
    assert record.flops == 2 * 16 * 8 * 24 == 6144
    # (G, M, K) · (G, K, N), no offsets: a batched product, as bmm counts it
    a, b = torch.randn(G, 16, GK), torch.randn(G, GK, GN)
    record = record_op("aten._grouped_mm", lambda: aten._grouped_mm(a, b))
    with FlopCounterMode(display=False) as counter:
        torch.bmm(a, b)
    assert record.flops == counter.get_total_flops() == 3 * 2 * 16 * 8 * 24 == 18432


def test_rule_aten__scaled_grouped_mm() -> None:
    # fp8 (ΣM 16, K 32) row-major · (G 3, K 32, N 48) column-major, rowwise fp32 scales, bf16 out
    f8 = torch.float8_e4m3fn
    a, b = meta(16, 32, dtype=f8), meta(3, 48, 32, dtype=f8).transpose(-2, -1)
    scale_a, scale_b, offs = meta(16), meta(3, 48), meta(3, dtype=torch.int32)
    record = record_op("aten._scaled_grouped_mm", lambda: aten._scaled_grouped_mm(
        a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16))
    assert record.flops == 2 * 16 * 32 * 48 == 49152
    # fp8 operands, fp32 scales, int32 offsets: 512 + 4608 + 64 + 576 + 12
    assert record.bytes_read == 16 * 32 + 3 * 32 * 48 + 4 * 16 + 4 * 3 * 48 + 4 * 3 == 5772
    assert record.bytes_written == 2 * 16 * 48 == 1536
    assert record.category == "matmul"


def test_rule_aten__scaled_grouped_mm_v2() -> None:
    # no meta function (CUDA only): the rule called directly; (self, mat2, scale_a, recipe_a,
    # swizzle_a, scale_b, ...) with the operands first, as v1
    f8 = torch.float8_e4m3fn
    a, b = meta(16, 32, dtype=f8), meta(3, 48, 32, dtype=f8).transpose(-2, -1)
    args = (a, b, [meta(16)], [0], [0], [meta(3, 48)], [0], [0], meta(3, dtype=torch.int32))
    assert direct("aten._scaled_grouped_mm_v2", args) == 2 * 16 * 32 * 48 == 49152
    # NVFP4 packs two values per element along K: (16, 32 packed = 64) · (3, 64, 48)
    fp4 = torch.float4_e2m1fn_x2
    packed = (meta(16, 32, dtype=fp4), meta(3, 48, 32, dtype=fp4).transpose(-2, -1))
    assert direct("aten._scaled_grouped_mm_v2", packed) == 2 * 16 * 64 * 48 == 98304
    assert rule("aten._scaled_grouped_mm_v2").category == "matmul"


def test_rule_aten__scaled_mm_v2() -> None:
    # per-tensor scales (recipe 0), bf16 out: (16 × 32) · (32 × 48) as v1 above
    f8 = torch.float8_e4m3fn
    a, b = meta(16, 32, dtype=f8), meta(48, 32, dtype=f8).t()
    record = record_op("aten._scaled_mm_v2", lambda: aten._scaled_mm_v2(
        a, b, [meta()], [0], [0], [meta()], [0], [0], None, torch.bfloat16))
    assert record.flops == 2 * 16 * 48 * 32 == 49152
    assert record.bytes_read == 16 * 32 + 48 * 32 + 4 + 4 == 2056
    assert record.category == "matmul"
    # fp4 operands hold K = 64 in 32 packed elements: twice the products
    fp4 = torch.float4_e2m1fn_x2
    packed = (meta(16, 32, dtype=fp4), meta(48, 32, dtype=fp4).t())
    assert direct("aten._scaled_mm_v2", packed) == direct("aten._scaled_mm", packed) == 98304
