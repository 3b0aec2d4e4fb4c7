"""Layouts of the tiny preset traced on rank 0 of a fake process group — TP, TP + SP, FSDP × TP,
HSDP, ZeRO-1 — against hand arithmetic: the collectives each issues, the parameter and optimizer
state bytes each rank holds, and its share of the single-device FLOPs.

The tiny preset (``get_preset("tiny")``): d_model 64, 2 layers, 4 query heads and 2 key/value
heads of width 16, SwiGLU width 128, vocabulary 128, RMSNorm, rope, untied, no biases; one
rank's batch is 2 sequences of 16 tokens, fp32.  Its parameter tensors, by hand:

- token embedding and head: 128·64 = 8192 values each;
- per block: query and output 64·64 = 4096, key and value 32·64 = 2048, up, gate and down
  128·64 = 8192, two norms of 64: 36 992 values;
- the final norm: 64.

90 432 values in 21 tensors, of which the 5 norms (320 values) are never split by TP.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError, TensorLedgerError
from tensorledger.models import build_model, get_preset
from tensorledger.trace.records import Trace
from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import (
    ParallelStep,
    build_mesh,
    default_tp_plan,
    fake_process_group,
    make_optimizer,
    trace_parallel_step,
)
from tests.distributed.test_parallel_steps import _matmul_flops, _single_device_flops

TINY = get_preset("tiny")
F32 = 4
PARAMS = 2 * 8192 + 2 * 36_992 + 64  # 90 432
NORMS = 5 * 64  # replicated over the tensor-parallel ranks
STREAM = 2 * 16 * 64 * F32  # one residual-stream activation (b, s, d): 8192 bytes
LOGITS = 2 * 16 * 128 * F32  # the whole logits (b, s, v): 16 384 bytes


def _tiny() -> nn.Module:
    return build_model(TINY, "cpu")


def _tokens() -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (2, 16))


def _kinds(result: Trace) -> Counter[tuple[str, str, int]]:
    """(phase, kind, size in bytes) → how many; every group of these layouts has 2 ranks."""
    assert {r.collective.group_size for r in result.records if r.collective} == {2}
    return Counter((r.phase, r.collective.kind, r.collective.size_bytes)
                   for r in result.records if r.collective)


def _attention_flops(result: Trace) -> int:
    return sum(r.flops for r in result.records
               if r.category == "attention" and r.phase in ("forward", "backward"))


def _single_device_attention_flops() -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tensorledger.trace import trace

    with FakeTensorMode():
        model, tokens = _tiny(), _tokens()
        result = trace(lambda: model(tokens).float().pow(2).mean().backward())
    return _attention_flops(result)


def test_the_tiny_parameter_count_by_hand() -> None:
    assert sum(p.numel() for p in _tiny().parameters()) == PARAMS == 90_432
    assert len(list(_tiny().parameters())) == 21


@pytest.fixture(scope="module")
def tp2() -> ParallelStep:
    return trace_parallel_step(_tiny, _tokens, Layout(tp=2))


def test_tensor_parallel_tiny_by_hand(tp2: ParallelStep) -> None:
    result = tp2.trace
    assert result.uncovered == {}
    # forward: the embedding's partial rows (1) and each block's attention and MLP output
    # (2 × 2) all-reduced, 5 of the (b, s, d) stream; the head's logits gathered once.
    # backward: each half's input gradient (2 × 2, once for query, key and value together)
    # and the head's (1): 5 all-reduces.  The norms run replicated: nothing.
    assert _kinds(result) == {("forward", "all-reduce", STREAM): 5,
                              ("forward", "all-gather", LOGITS): 1,
                              ("backward", "all-reduce", STREAM): 5}
    for record in result.records:
        if record.collective and record.collective.kind == "all-reduce":
            assert record.collective.bytes_sent == 2 * STREAM // 2  # 2·S·(N−1)/N = 8192
        elif record.collective:
            assert record.collective.bytes_received == LOGITS // 2  # S·(N−1)/N = 8192
    # each rank holds half of every matrix and table, and the norms whole:
    # (90 432 − 320) / 2 + 320 = 45 376 values
    assert tp2.params_per_rank == (PARAMS - NORMS) // 2 + NORMS == 45_376
    assert tp2.param_bytes_per_rank == F32 * 45_376
    # AdamW: two fp32 moments of what the rank holds, a 4-byte step counter per tensor
    assert tp2.optimizer_state_bytes_per_rank == 2 * F32 * 45_376 + 21 * F32
    # every matmul and the attention run on half the heads, half the features
    assert 2 * _matmul_flops(result) == _single_device_flops(_tiny, _tokens)
    assert 2 * _attention_flops(result) == _single_device_attention_flops()


def test_a_rank_attends_with_its_own_heads_whole(tp2: ParallelStep) -> None:
    # 4 query heads and 2 key/value heads of width 16, split over 2 ranks: 2 and 1, width 16
    # (split by the head count instead, the local 32 features would be 4 heads of width 8)
    shapes = {r.input_shapes for r in tp2.trace.records
              if r.category == "attention" and r.phase == "forward"}
    assert shapes == {((2, 2, 16, 16), (2, 1, 16, 16), (2, 1, 16, 16))}


def test_sequence_parallel_tiny_by_hand() -> None:
    step = trace_parallel_step(_tiny, _tokens, Layout(tp=2, sp=True))
    result = step.trace
    assert result.uncovered == {}
    # the stream between the halves is split on the sequence: what TP all-reduces is
    # reduce-scattered here (the embedding, 2 × 2 half outputs: 5), and each half's input
    # and the head's input are all-gathered first (2 × 2 + 1: 5); the logits as in TP.
    # backward mirrors it: the 5 gathered inputs' gradients reduce-scattered, the 5
    # scattered outputs' gradients all-gathered.
    # The norms' weights are replicated but see a sequence shard each: their gradients are
    # partial sums, which DTensor reduces where AdamW reads them — in exp_avg.lerp_(g) and
    # twice in exp_avg_sq.addcmul_(g, g) — 3 all-reduces of 64 fp32 values for each of the
    # 5 norms (real ranks do the same: test_parallel_torchrun).
    assert _kinds(result) == {("forward", "reduce-scatter", STREAM): 5,
                              ("forward", "all-gather", STREAM): 5,
                              ("forward", "all-gather", LOGITS): 1,
                              ("backward", "all-gather", STREAM): 5,
                              ("backward", "reduce-scatter", STREAM): 5,
                              ("optimizer", "all-reduce", 64 * F32): 3 * 5}
    assert step.params_per_rank == 45_376  # as TP: SP splits activations, not parameters
    assert 2 * _matmul_flops(result) == _single_device_flops(_tiny, _tokens)


def test_fsdp_by_tensor_parallel_2_by_2_by_hand(tp2: ParallelStep) -> None:
    step = trace_parallel_step(_tiny, _tokens, Layout(fsdp=2, tp=2))
    result = step.trace
    assert result.uncovered == {}
    # FSDP halves what TP left on the rank: 45 376 / 2 = 22 688 values, which is
    # (90 432 − 320) / 4 + 320 / 2: a quarter of the matrices, half of the norms
    assert step.params_per_rank == (PARAMS - NORMS) // 4 + NORMS // 2 == 22_688
    assert step.param_bytes_per_rank == F32 * 22_688 == 90_752
    kinds = _kinds(result)
    # FSDP gathers each unit's TP shard over its 2 ranks: the root (the embedding's and the
    # head's halves, 4096 each, and the final norm) 8256 values, a block
    # (2048 + 1024 + 1024 + 2048 + 3 · 4096 + 128) = 18 560 values
    root, block = F32 * 8256, F32 * 18_560
    fsdp = {("forward", "all-gather", root): 1, ("forward", "all-gather", block): 2,
            ("backward", "all-gather", block): 2,  # the root stays gathered (FSDP2 default)
            ("backward", "reduce-scatter", root): 1, ("backward", "reduce-scatter", block): 2}
    # TP's own collectives are those of TP alone
    tp = _kinds(tp2.trace)
    assert kinds == Counter(fsdp) + tp
    assert 2 * _matmul_flops(result) == _single_device_flops(_tiny, _tokens)


def test_hsdp_2_by_2_by_hand() -> None:
    step = trace_parallel_step(_tiny, _tokens, Layout(dp=2, fsdp=2))
    result = step.trace
    assert result.uncovered == {}
    # sharded over the 2 ranks of fsdp, replicated over the 2 of dp: half the parameters
    assert step.params_per_rank == PARAMS // 2 == 45_216
    # the root unit (embedding, head, final norm) 16 448 values, a block 36 992: gathered
    # and reduce-scattered within the shard group, then each reduced shard (half a unit)
    # all-reduced across the replicas
    root, block = F32 * 16_448, F32 * 36_992
    assert _kinds(result) == {
        ("forward", "all-gather", root): 1, ("forward", "all-gather", block): 2,
        ("backward", "all-gather", block): 2,
        ("backward", "reduce-scatter", root): 1, ("backward", "reduce-scatter", block): 2,
        ("backward", "all-reduce", root // 2): 1, ("backward", "all-reduce", block // 2): 2}
    assert root + 2 * block == F32 * PARAMS
    assert _matmul_flops(result) == _single_device_flops(_tiny, _tokens)


def test_zero1_shards_the_optimizer_state_by_whole_parameters() -> None:
    step = trace_parallel_step(_tiny, _tokens, Layout(fsdp=2, zero=1))
    result = step.trace
    assert result.uncovered == {}
    assert step.params_per_rank == PARAMS  # parameters and gradients stay whole (DDP)
    # ZeroRedundancyOptimizer deals the tensors out largest first, each to the rank holding
    # fewest values so far (ties to rank 0): the eight 8192s alternate (4 each, 32 768), then
    # the four 4096s (2 each), the four 2048s (2 each), then the five 64s: 0, 1, 0, 1, 0.
    rank0 = 4 * 8192 + 2 * 4096 + 2 * 2048 + 3 * 64  # 45 248 values in 11 tensors
    rank1 = 4 * 8192 + 2 * 4096 + 2 * 2048 + 2 * 64  # 45 184 values in 10 tensors
    assert rank0 + rank1 == PARAMS
    # two fp32 AdamW moments per value, a 4-byte step counter per tensor: 362 028 bytes,
    # 0.50071 of the whole optimizer state (rank 1 holds 361 512)
    assert step.optimizer_state_bytes_per_rank == 2 * F32 * rank0 + 11 * F32 == 362_028
    # backward: DDP all-reduces every gradient in one bucket (361 728 bytes < its first
    # bucket's 1 MiB); after its step each rank broadcasts its own tensors and receives the
    # other's: one broadcast per tensor, 21 in all, adding up to every parameter byte
    assert _kinds(result) == {("backward", "all-reduce", F32 * PARAMS): 1,
                              ("optimizer", "broadcast", F32 * 8192): 8,
                              ("optimizer", "broadcast", F32 * 4096): 4,
                              ("optimizer", "broadcast", F32 * 2048): 4,
                              ("optimizer", "broadcast", F32 * 64): 5}
    assert _matmul_flops(result) == _single_device_flops(_tiny, _tokens)


def test_default_tp_plan_of_the_reference_model() -> None:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    with torch.device("meta"):
        model = _tiny()
    plan = default_tp_plan(model)
    styles = {path: type(style) for path, style in plan.items()}
    assert styles["blocks.1.attention.value"] is ColwiseParallel
    assert styles["blocks.1.mlp.down"] is RowwiseParallel
    assert styles["blocks.0.attention"] is PrepareModuleInput
    assert styles["token_embedding"] is RowwiseParallel and styles["head"] is ColwiseParallel
    # 2 per model, 2 + 4 + 3 per block (the halves, query/key/value/output, up/gate/down)
    assert len(plan) == 2 + 2 * 9
    with_sp = default_tp_plan(model, sp=True)
    norms = [path for path, style in with_sp.items() if isinstance(style, SequenceParallel)]
    assert sorted(norms) == ["blocks.0.attention_norm", "blocks.0.mlp_norm",
                             "blocks.1.attention_norm", "blocks.1.mlp_norm", "final_norm"]


def test_default_tp_plan_refuses_what_it_cannot_plan() -> None:
    with pytest.raises(InputError, match="no default tensor-parallel plan for Linear"):
        default_tp_plan(nn.Linear(4, 4))
    with torch.device("meta"):
        gpt2 = build_model(get_preset("gpt2"), "meta")
    with pytest.raises(InputError, match="learned position embedding"):
        default_tp_plan(gpt2, sp=True)


def test_default_tp_plan_of_a_hugging_face_model_is_its_own() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    plan = default_tp_plan(model)
    # transformers' plan for Llama: q/k/v/gate/up colwise, o/down rowwise per layer, the
    # embedding by rows and lm_head gathered; its "*" expanded over the 2 layers
    assert len(plan) == 2 + 2 * 7
    assert type(plan["model.layers.1.self_attn.k_proj"]).__name__ == "ColwiseParallel"
    assert type(plan["lm_head"]).__name__ == "ColwiseParallel"


def test_build_mesh_names_the_dimensions_above_one() -> None:
    with fake_process_group(8):
        mesh = build_mesh(Layout(dp=2, fsdp=2, tp=2))
        assert mesh.mesh_dim_names == ("dp", "fsdp", "tp")
        assert build_mesh(Layout(fsdp=8)).mesh_dim_names == ("fsdp",)
        with pytest.raises(InputError, match="needs 4 ranks; the process group has 8"):
            build_mesh(Layout(tp=4))
    with pytest.raises(TensorLedgerError, match="needs a process group"):
        build_mesh(Layout(tp=2))


def test_make_optimizer_shards_only_for_zero1() -> None:
    def adamw(params: object) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-3)  # type: ignore[arg-type]

    with fake_process_group(2):
        for layout in (Layout(fsdp=2), Layout(dp=2)):
            model = nn.Linear(4, 4)
            assert type(make_optimizer(layout, build_mesh(layout), model.parameters(),
                                       adamw)) is torch.optim.AdamW
        zero1 = Layout(fsdp=2, zero=1)
        optimizer = make_optimizer(zero1, build_mesh(zero1), nn.Linear(4, 4).parameters(), adamw)
        assert type(optimizer).__name__ == "ZeroRedundancyOptimizer"
        assert type(getattr(optimizer, "optim", None)) is torch.optim.AdamW


def test_tied_embeddings_stay_tied_under_tensor_parallelism() -> None:
    import dataclasses

    tied = dataclasses.replace(TINY, tied_embeddings=True)
    step = trace_parallel_step(lambda: build_model(tied, "cpu"), _tokens, Layout(tp=2))
    # the head reads the embedding's table, both split by vocabulary rows: one 128·64 table
    # fewer than untied, (90 432 − 8192 − 320) / 2 + 320 = 41 280 values on each rank
    assert step.params_per_rank == (PARAMS - 8192 - NORMS) // 2 + NORMS == 41_280
    assert step.trace.uncovered == {}
