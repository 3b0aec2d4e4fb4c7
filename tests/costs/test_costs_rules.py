"""Cost rules: the registry's contract, hand-derived counts, and torch's FlopCounterMode as
an oracle for the matmul family, convolution and attention."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.costs import ELEMENTWISE_FLOPS, lookup, register, rules
from tensorledger.costs.registry import CATEGORIES
from tensorledger.trace import Recorder, Trace

aten = torch.ops.aten


def flops_by_packet(trace: Trace, category: str | None = None) -> Counter[str]:
    counts: Counter[str] = Counter()
    for r in trace.records:
        if r.flops and (category is None or r.category == category):
            counts[r.op.rsplit(".", 1)[0].removeprefix("aten.")] += r.flops
    return counts


def oracle_by_packet(counter: FlopCounterMode) -> Counter[str]:
    return Counter({str(op).removeprefix("aten."): n
                    for op, n in counter.get_flop_counts().get("Global", {}).items()})


def test_register_rejects_duplicates_and_unknown_categories() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register("aten.mm", category="matmul")(lambda a, k, o: 0)
    with pytest.raises(ValueError, match="unknown category"):
        register("aten.never_an_op", category="flops")(lambda a, k, o: 0)
    assert lookup("aten.never_an_op") is None


def test_every_rule_has_a_known_category() -> None:
    table = rules()
    assert {r.category for r in table.values()} <= set(CATEGORIES)
    for op in ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution",
               "aten.convolution_backward", "aten._scaled_dot_product_flash_attention",
               "aten._scaled_dot_product_efficient_attention",
               "aten._scaled_dot_product_cudnn_attention",
               "aten._scaled_dot_product_flash_attention_for_cpu",
               "aten._scaled_dot_product_flash_attention_for_cpu_backward",
               "aten.embedding", "aten.embedding_dense_backward", "aten._softmax",
               "aten._log_softmax_backward_data", "aten.native_layer_norm_backward",
               "aten._fused_rms_norm_backward", "aten.nll_loss_forward", "aten.sum",
               "aten.amax", "aten._to_copy", "aten.copy_", "aten._foreach_addcdiv_",
               "aten._fused_adamw_", "aten._fused_adam_", "aten._fused_sgd_",
               "aten._fused_adagrad_"):
        assert lookup(op) is not None, op


def record(step, *args):  # type: ignore[no-untyped-def]
    with Recorder() as recorder:
        step(*args)
    return recorder.trace


def test_matmul_family_matches_flop_counter() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(6, 5)
    bias = torch.randn(5)
    p, q = torch.randn(3, 4, 6), torch.randn(3, 6, 5)

    def step() -> None:
        a @ b                              # mm: 2 * 4 * 5 * 6 = 240
        torch.addmm(bias, a, b)            # addmm: 240 (bias add not counted)
        p @ q                              # bmm: 3 * 240 = 720
        torch.baddbmm(torch.zeros(3, 4, 5), p, q)  # 720
        torch.einsum("bij,bjk->bik", p, q)  # decomposes into a bmm: 720

    with FlopCounterMode(display=False) as oracle:
        trace = record(step)
    assert flops_by_packet(trace) == oracle_by_packet(oracle)
    assert flops_by_packet(trace) == Counter({"mm": 240, "addmm": 240, "bmm": 1440,
                                              "baddbmm": 720})


def test_convolution_forward_and_backward_match_flop_counter() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    transposed = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
    x = torch.randn(2, 3, 5, 5, requires_grad=True)

    def step() -> None:
        transposed(conv(x)).sum().backward()

    with FlopCounterMode(display=False) as oracle:
        trace = record(step)
    ours = flops_by_packet(trace, "matmul")
    assert ours == oracle_by_packet(oracle)
    # forward conv: 2 * batch 2 * weight (8*3*3*3) * output 5*5 = 21600
    # transposed: 2 * 2 * weight (8*4*2*2) * input grid 5*5 = 12800
    # backward: input and weight gradients, each the forward again
    assert ours["convolution"] == 21600 + 12800
    assert ours["convolution_backward"] == 2 * 21600 + 2 * 12800


def test_cpu_attention_matches_torch_formulas_and_hand_count() -> None:
    # FlopCounterMode is silent on the CPU kernel; told that it is SDPA (with torch's own
    # formulas), it agrees with ours.
    def forward(q, k, v, *args, out_shape=None, **kwargs):  # type: ignore[no-untyped-def]
        return flop_counter.sdpa_flop_count(q, k, v)

    def backward(grad, q, k, v, *args, out_shape=None, **kwargs):  # type: ignore[no-untyped-def]
        return flop_counter.sdpa_backward_flop_count(grad, q, k, v)

    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: forward,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    k = torch.randn(2, 2, 16, 8, requires_grad=True)  # grouped-query: 2 kv heads
    v = torch.randn(2, 2, 16, 8, requires_grad=True)

    def step() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

    with FlopCounterMode(display=False) as silent:
        record(step)
    assert silent.get_total_flops() == 0
    with FlopCounterMode(display=False, custom_mapping=mapping) as oracle:
        trace = record(step)
    ours = flops_by_packet(trace, "attention")
    assert ours == oracle_by_packet(oracle)
    # forward: 2 products of 2 * (b 2 * h 4) * 16 * 16 * 8 = 32768 each
    assert ours["_scaled_dot_product_flash_attention_for_cpu"] == 2 * 32768
    assert ours["_scaled_dot_product_flash_attention_for_cpu_backward"] == 5 * 32768
    halved = {r.op: r.flops_causal_halved for r in trace.records if r.category == "attention"}
    assert sorted(halved.values()) == [32768, 5 * 32768 // 2]


def test_attention_on_meta_counts_like_cpu_and_like_the_math_path() -> None:
    def step(device: str) -> Trace:
        q, k, v = (torch.randn(1, 2, 8, 4, device=device, requires_grad=True)
                   for _ in range(3))
        return record(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())

    meta, cpu = step("meta"), step("cpu")
    assert flops_by_packet(meta) == flops_by_packet(cpu)
    assert [r.op for r in meta.records] == [r.op for r in cpu.records]
    # without the recorder, meta decomposes into the math path: its two forward bmm count
    # what the fused kernel's forward does: 2 * 2 * (1*2) * 8 * 8 * 4 = 2048
    q = torch.randn(1, 2, 8, 4, device="meta")
    with FlopCounterMode(display=False) as oracle:
        F.scaled_dot_product_attention(q, q, q)
    assert oracle_by_packet(oracle) == Counter({"bmm": 2048})
    assert flops_by_packet(meta)["_scaled_dot_product_flash_attention_for_cpu"] == 2048


def test_cuda_attention_kernels_match_flop_counter_on_meta() -> None:
    q = torch.randn(2, 4, 32, 16, device="meta", dtype=torch.bfloat16)

    def step() -> None:
        out = aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)
        aten._scaled_dot_product_flash_attention_backward(
            out[0], q, q, q, out[0], out[1], out[2], out[3], out[4], out[5], 0.0, True,
            out[6], out[7])
        aten._scaled_dot_product_efficient_attention(q, q, q, None, True)
        aten._scaled_dot_product_cudnn_attention(q, q, q, None, True)

    with FlopCounterMode(display=False) as oracle:
        trace = record(step)
    assert flops_by_packet(trace, "attention") == oracle_by_packet(oracle)


@pytest.mark.parametrize(("name", "per_element"), [("relu", 1), ("gelu", 20), ("exp", 1)])
def test_activations_per_element_cost_and_bytes(name: str, per_element: int) -> None:
    # the lecture: ReLU on n = 2^20 bf16 values: n FLOPs, 2n bytes in + 2n out = 4n
    n = 2**20
    x = torch.empty(n, dtype=torch.bfloat16, device="meta")
    function = {"relu": F.relu, "gelu": lambda t: F.gelu(t, approximate="tanh"),
                "exp": torch.exp}[name]
    trace = record(function, x)
    (op,) = trace.records
    assert ELEMENTWISE_FLOPS[name] == per_element
    assert op.flops == per_element * n
    assert (op.bytes_read, op.bytes_written) == (2 * n, 2 * n)
    assert op.category == "elementwise"


def test_matmul_bytes_follow_the_lecture() -> None:
    # n = 1024 bf16: read 2n² + 2n², write 2n²: 6n² bytes; 2n³ FLOPs (a multiply and an add
    # per term; the lecture's n²(2n−1) leaves out the first add)
    n = 1024
    a = torch.empty(n, n, dtype=torch.bfloat16, device="meta")
    (op,) = record(lambda: a @ a.T).records[-1:]
    assert op.flops == 2 * n**3
    assert op.bytes_read + op.bytes_written == 4 * n * n  # one distinct input storage
    b = torch.empty(n, n, dtype=torch.bfloat16, device="meta")
    (op,) = record(lambda: a @ b).records
    assert op.bytes_read + op.bytes_written == 6 * n * n


def test_reductions_and_softmax_by_hand() -> None:
    x = torch.empty(3, 4, device="meta")
    trace = record(lambda: (x.sum(dim=1), x.mean(), x.amax(dim=0), x.softmax(dim=-1)))
    flops = [r.flops for r in trace.records]
    # sum: 3 groups of 4 → 3 adds each = 9; mean: 11 adds + 1 divide = 12;
    # amax over 3 rows for 4 columns: 2 compares each = 8; softmax: 5 per element = 60
    assert flops == [9, 12, 8, 60]
    assert [r.category for r in trace.records] == ["reduction"] * 3 + ["normalization"]


def test_layer_norm_and_cross_entropy_by_hand() -> None:
    norm = torch.nn.LayerNorm(8, device="meta")
    x = torch.empty(2, 8, device="meta", requires_grad=True)
    target = torch.zeros(2, dtype=torch.long, device="meta")

    def step() -> None:
        F.cross_entropy(norm(x), target).backward()

    trace = record(step)
    by_op = Counter()
    for r in trace.records:
        by_op[r.op.rsplit(".", 1)[0].removeprefix("aten.")] += r.flops
    n = 2 * 8
    assert by_op["native_layer_norm"] == 7 * n                # 5 + weight + bias
    assert by_op["native_layer_norm_backward"] == 11 * n      # 8 + 2 + 1
    assert by_op["_log_softmax"] == 5 * n
    assert by_op["nll_loss_forward"] == 2                     # one add per target
    assert by_op["nll_loss_backward"] == 2
    assert by_op["_log_softmax_backward_data"] == 4 * n


def test_optimizer_foreach_and_fused_ops_are_covered() -> None:
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    for p in params:
        p.grad = torch.ones_like(p)
    fused = torch.optim.AdamW(params, fused=True)
    foreach = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    adagrad = torch.optim.Adagrad(params, foreach=False)
    trace = record(lambda: (fused.step(), foreach.step(), adagrad.step()))
    assert trace.uncovered == {}
    assert {r.phase for r in trace.records} == {"optimizer"}
    (adamw,) = [r for r in trace.records if r.op == "aten._fused_adamw_.default"]
    assert adamw.flops == 14 * (12 + 5)  # 14 per element of 17 parameters
    # in place: written once per mutated tensor (params, grads, both moments, per schema)
    assert adamw.bytes_written == 4 * 4 * 17 + 4 * 0  # fp32; max_exp_avg_sqs is empty
