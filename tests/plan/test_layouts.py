"""The layout planner's closed forms against hand arithmetic, and the search's bookkeeping."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.schedules import ActionListPricer
from tensorledger.napkin import tp_activation_bytes, tp_indivisible
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.plan import (
    FixedDims,
    LayoutChoice,
    NoLayoutError,
    PlanSetup,
    divisors,
    layer_activation_bytes,
    plan_layouts,
    rank_memory,
    step_time,
)
from tensorledger.roofline.collectives import CollectiveKind, collective_time

H100 = get_hardware("h100")


def _setup(model: str, count: int, seq: int, batch: int, attention: str = "flash",
           efficiency: float = 1.0) -> PlanSetup:
    return PlanSetup(config=get_preset(model), hardware=H100, count=count, seq_len=seq,
                     global_batch_seqs=batch, precision=resolve_precision("bf16-master"),
                     optimizer=resolve_optimizer("adamw"), budget_bytes=80e9,
                     efficiency=efficiency, attention=attention)


# ------------------------------------------------------------------------------ activations

def test_layer_activations_by_hand_llama_3_70b() -> None:
    # bf16-master (a = 2), b = 2, s = 8192: n = 16,384 tokens; d 8192, q 8192, kv 1024,
    # d_ff 28,672, 64 heads of 128, t = 4 (the reference model's closed form, per layer):
    setup = _setup("llama-3-70b", 64, 8192, 64)
    n, d = 16_384, 8192
    # two RMSNorms, whole on a TP rank: fp32 input, rsqrt, fp32 normalised input, output
    norms = 2 * n * (4 * d + 4 + 4 * d + 2 * d)
    # q, k, v and the attention output (n·(8192 + 2·1024 + 8192)·2) / 4, log-sum-exp
    # 4·b·(64/4)·s, RoPE's four 16-bit tables 4·s·128·2 (whole)
    attention = n * (8192 + 2048 + 8192) * 2 // 4 + 4 * 2 * 16 * 8192 + 4 * 8192 * 128 * 2
    mlp = 4 * n * (28_672 // 4) * 2  # SwiGLU's four tensors, columns split
    assert (norms, attention, mlp) == (2_684_485_632, 160_432_128, 939_524_096)
    assert layer_activation_bytes(setup, 2, 4, False, "none") == (3_784_441_856.0, 0.0)
    # sequence parallel: each norm's own part on n/4 tokens, its gathered output whole
    sp_norms = 2 * (n // 4 * (8 * d + 4) + n * d * 2)
    assert sp_norms == 1_073_774_592
    assert layer_activation_bytes(setup, 2, 4, True, "none") == (
        float(sp_norms + attention + mlp), 0.0)
    # full recomputation keeps the layer input, n·d·2 (÷ t with sp), and holds one layer
    assert layer_activation_bytes(setup, 2, 4, False, "full") == (268_435_456.0,
                                                                   3_784_441_856.0)
    assert layer_activation_bytes(setup, 2, 4, True, "full") == (67_108_864.0, 2_173_730_816.0)


def test_eager_attention_adds_the_scores_and_selective_drops_them() -> None:
    setup = _setup("llama-3-70b", 64, 8192, 64, attention="eager")
    # 5·a·s²·b/t = 5 · 64 · 8192² · 2 / 4 = 10,737,418,240 (Korthikanti et al.)
    scores = 10_737_418_240
    none = layer_activation_bytes(setup, 2, 4, False, "none")[0]
    assert none == 3_784_441_856 + scores
    assert layer_activation_bytes(setup, 2, 4, False, "selective")[0] == 3_784_441_856
    # the scores term is Korthikanti's: his layer with and without it differs by it
    with_scores = tp_activation_bytes(8192, 2, 8192, 64, 4).bytes_per_layer
    assert none - layer_activation_bytes(setup, 2, 4, False, "selective")[0] == pytest.approx(
        with_scores - 8192 * 2 * 8192 * (10 + 24 / 4))


# ---------------------------------------------------------------------------------- memory

# A model where every size differs, by hand: d = 48, 4 heads of 12, 2 key/value heads, SwiGLU of
# 80, vocabulary 96, 3 layers.  Per layer q and o 2·48·48 = 4608, k and v 2·48·24 = 2304 (6912),
# MLP 3·48·80 = 11,520: matrices 18,432, two RMSNorm scales 96.  Embedding = head = 96·48 =
# 4608; final norm 48.  bf16-master + AdamW: 2 + 2 + 4 + 8 = 16 bytes per parameter.
ODD = TransformerConfig(name="odd", vocab_size=96, context_length=64, d_model=48, n_layers=3,
                        n_heads=4, n_kv_heads=2, d_ff=80, mlp="swiglu", norm="rmsnorm",
                        positions="rope", tied_embeddings=False, bias=False)


def _odd(count: int) -> PlanSetup:
    return dataclasses.replace(_setup("tiny", count, 16, 8), config=ODD)


def test_rank_memory_tp_by_hand() -> None:
    setup = _odd(4)
    memory = rank_memory(setup, LayoutChoice(dp=2, tp=2, pp=1, micro_batch=1, accumulation=4))
    # 3 · (18,432/2 + 96) + 4608/2 + 4608/2 + 48 = 27,936 + 4656 = 32,592 parameters
    assert memory.stage_params == 32_592
    assert memory.states_bytes == 16 * 32_592 == 521_472
    # activations, n = 16 tokens, a = 2 (bf16), t = 2: two RMSNorms 2 × (4·n·48 + 4·n +
    # 4·n·48 + n·48·2) = 15,488; q, k, v, out (n·(48 + 24 + 24 + 48)·2) / 2 = 2304, log-sum-
    # exp 4·(4/2)·16 = 128, RoPE 4·16·12·2 = 1536; SwiGLU 4·n·40·2 = 5120: 24,576 per layer,
    # 3 layers, and the token ids 8·n = 128
    assert memory.activations_bytes == 3 * 24_576 + 128 == 73_856
    # the final norm 7744, the log-softmax n·96·2 = 3072, targets 128, the scalar 4
    assert memory.logits_bytes == 7744 + 3072 + 128 + 4 == 10_948
    # DDP over the 2 data-parallel ranks keeps a bf16 copy of the gradients in its buckets
    assert memory.buffers_bytes == 2 * 32_592
    assert memory.total_bytes == 521_472 + 65_184 + 73_856 + 10_948 == 671_460


def test_rank_memory_zero3_gathers_two_layers() -> None:
    setup = _odd(4)
    memory = rank_memory(setup, LayoutChoice(dp=2, tp=2, pp=1, zero=3, shard=2, micro_batch=1,
                                             accumulation=4))
    assert memory.states_bytes == 16 * 16_296 == 260_736  # 32,592 / 2 sharded
    assert memory.gathered_bytes == 2 * 9312 * 2 == 37_248  # two layers, bf16 weights
    assert memory.total_bytes == 260_736 + 37_248 + 73_856 + 10_948


def test_rank_memory_pipeline_first_stage_holds_p_microbatches() -> None:
    setup = _odd(6)
    memory = rank_memory(setup, LayoutChoice(dp=1, tp=2, pp=3, micro_batch=1, accumulation=4,
                                             schedule="1f1b"))
    # first: 9312 + 2304 (embedding/2) = 11,616 params, min(p, m) = 3 micro-batches of 1 layer
    # and the token ids in flight: 16 · 11,616 + 3 · (24,576 + 128) = 259,968, and the
    # embedding's gradient for the whole vocabulary (its rank's half is a view of it): the
    # other half, 2304 bf16 values more, 264,576; last: 11,664 params, 1 micro-batch, the
    # loss end: 186,624 + 24,576 + 10,948 = 222,148
    assert (memory.stage, memory.stage_params, memory.total_bytes) == (
        "first", 11_616, 259_968 + 2 * 2304)
    # GPipe: every stage holds all m = 4 micro-batches (the action lists agree), so the last
    # stage, with the loss end, is the heavier: 4 · 24,576 of its block, no token ids
    gpipe = rank_memory(setup, LayoutChoice(dp=1, tp=2, pp=3, micro_batch=1, accumulation=4,
                                            schedule="gpipe"))
    assert (gpipe.stage, gpipe.activations_bytes) == ("last", 4 * 24_576)
    torch_lists = dataclasses.replace(setup, schedules=ActionListPricer())
    assert rank_memory(torch_lists, LayoutChoice(dp=1, tp=2, pp=3, micro_batch=1,
                                                 accumulation=4, schedule="gpipe")) == gpipe


# ------------------------------------------------------------------------------------ time

# llama-3-8b forward FLOPs per token at s = 4096 (causal halved), by hand: per layer
# projections 2·4096·(4096 + 2·1024) + 2·4096·4096 = 83,886,080, SwiGLU 2·3·4096·14,336 =
# 352,321,536, scores and values 2 · 4096·4096 = 33,554,432: 469,762,048; × 32 layers + head
# 2·4096·128,256 = 1,050,673,152 → 16,083,058,688; training × 3 = 48,249,176,064.
FORWARD_8B = 16_083_058_688
TRAIN_8B = 48_249_176_064


def test_step_time_single_device_by_hand() -> None:
    setup = _setup("llama-3-8b", 1, 4096, 4, efficiency=0.5)
    choice = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=2, accumulation=2)
    time = step_time(setup, choice, rank_memory(setup, choice))
    assert FORWARD_8B == 32 * 469_762_048 + 1_050_673_152 and TRAIN_8B == 3 * FORWARD_8B
    tokens = 4 * 4096
    assert time.model_flops == TRAIN_8B * tokens
    assert time.compute_s == pytest.approx(TRAIN_8B * tokens / (989.5e12 * 0.5))
    assert (time.tp_comm_s, time.dp_comm_s, time.bubble_to_compute) == (0.0, 0.0, 0.0)
    assert time.step_s == pytest.approx(time.compute_s)
    assert time.mfu == pytest.approx(0.5)  # compute-bound: MFU is the efficiency
    assert time.tokens_per_s == pytest.approx(tokens / time.step_s)
    full = dataclasses.replace(choice, checkpoint="full")
    recomputed = step_time(setup, full, rank_memory(setup, full))
    assert recomputed.recompute_flops == FORWARD_8B * tokens  # one more forward
    assert recomputed.compute_s == pytest.approx(time.compute_s * 4 / 3)
    assert recomputed.mfu == pytest.approx(0.5 * 3 / 4)


def test_small_micro_batches_turn_memory_bound() -> None:
    # 16 tokens a micro-batch: F ≈ 48.2e9 · 16 = 7.7e11 FLOPs (0.78 ms at the peak) against
    # weight traffic 8,030,261,248 · 2 · (2 + 2) = 64.2 GB (19.2 ms at 3.35 TB/s)
    setup = _setup("llama-3-8b", 1, 16, 4)
    choice = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=1, accumulation=4)
    time = step_time(setup, choice, rank_memory(setup, choice))
    assert time.memory_bound
    assert time.compute_s == pytest.approx(4 * 8_030_261_248 * 8 / 3.35e12)
    assert time.intensity_flop_per_byte < 989.5e12 / 3.35e12


def test_tensor_parallel_comm_and_bubble_by_hand() -> None:
    setup = _setup("llama-3-8b", 8, 4096, 8)
    choice = LayoutChoice(dp=1, tp=2, pp=4, micro_batch=1, accumulation=8, schedule="1f1b")
    time = step_time(setup, choice, rank_memory(setup, choice))
    assert time.bubble_to_compute == pytest.approx(3 / 8)  # (p−1)/m
    # per layer and micro-batch 4 all-reduces of b·s·h·2 = 4096·4096·2 = 33,554,432 bytes over
    # 2 NVLink ranks: 2·(1/2)·S / 450 GB/s + 2 hops · 0.6 µs; 8 layers a stage, 8 micro-batches
    one = 33_554_432 / 450e9 + 2 * 0.6e-6
    assert collective_time(CollectiveKind.ALL_REDUCE, 33_554_432, 2, H100).time_s == \
        pytest.approx(one)
    assert time.tp_comm_s == pytest.approx(8 * 4 * 8 * one)
    # torch's interleaved 1F1B (its action lists replayed): (p−1)/(v·m), 4 stages of 4 blocks
    # on each rank's two, 8 a rank as before
    torch_lists = dataclasses.replace(setup, schedules=ActionListPricer())
    interleaved = dataclasses.replace(choice, schedule="interleaved-1f1b", chunks=2)
    time = step_time(torch_lists, interleaved, rank_memory(torch_lists, interleaved))
    assert time.bubble_to_compute == pytest.approx(3 / 16)
    assert time.tp_comm_s == pytest.approx(8 * 4 * 8 * one)


# llama-3-405b's head: 6·d·V = 6 · 16,384 · 128,256 training FLOPs a token, beside a block's
HEAD_405B = 6 * 16_384 * 128_256


def _block_405b(seq: int) -> float:
    from tensorledger.napkin.transformer import transformer_training_flops

    per_token = transformer_training_flops(get_preset("llama-3-405b"), 1.0, seq).flops_per_token
    return (per_token - HEAD_405B) / 126


def test_uneven_stages_wait_for_the_heaviest() -> None:
    # 126 layers on 4 stages: 31, 32, 32, 31 (the lighter at the ends); the last also runs
    # the head: ranks do 31f, 32f, 32f, 31f + h of 126f + h
    setup = _setup("llama-3-405b", 32, 4096, 8)
    choice = LayoutChoice(dp=1, tp=8, pp=4, micro_batch=1, accumulation=8, schedule="1f1b")
    f, h = _block_405b(4096), HEAD_405B
    assert h / f == pytest.approx(0.6456, abs=1e-4)  # the head: 2/3 of a block
    time = step_time(setup, choice, rank_memory(setup, choice))
    assert time.imbalance == pytest.approx(max(32 * f, 31 * f + h) * 4 / (126 * f + h))
    # the last stage one block shorter still: 32, 32, 32, 30 — the head's rank 30f + h < 32f
    short = dataclasses.replace(choice, stage_layers=(32, 32, 32, 30))
    assert step_time(setup, short, rank_memory(setup, short)).imbalance == pytest.approx(
        32 * f * 4 / (126 * f + h))


def test_ddp_gradient_all_reduce_by_hand() -> None:
    setup = _setup("llama-3-8b", 8, 4096, 8)
    choice = LayoutChoice(dp=8, tp=1, pp=1, micro_batch=1, accumulation=1)
    memory = rank_memory(setup, choice)
    time = step_time(setup, choice, memory)
    grads = 2 * 8_030_261_248  # bf16 gradients
    # 8 ranks on one node: 2·(7/8)·S / 450 GB/s + 14 hops · 0.6 µs
    assert time.dp_comm_s == pytest.approx(2 * 7 / 8 * grads / 450e9 + 14 * 0.6e-6)
    # overlapped but for the last layer's bucket (compute is longer than the all-reduce)
    assert time.compute_s > time.dp_comm_s
    assert time.dp_exposed_s == pytest.approx(time.dp_comm_s / 32)


# ---------------------------------------------------------------------------------- search

def test_search_bookkeeping_and_ranking() -> None:
    plan = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=512, tokens=15e12, top=5)
    assert plan.searched == plan.feasible + sum(plan.rejected_by_reason.values())
    steps = [row.time.step_s for row in plan.ranked]
    assert steps == sorted(steps) and len(steps) == 5
    for row in plan.ranked:
        c = row.choice
        assert c.dp * c.tp * c.pp == 64
        assert c.micro_batch * c.accumulation * c.dp == 512
        assert row.memory.total_bytes <= 80e9
        assert tp_indivisible(get_preset("llama-3-70b"), c.tp) is None
        assert row.train_days == pytest.approx(15e12 / row.time.tokens_per_s / 86400)
    assert {r.reason for r in plan.rejected} <= {"divisibility", "global batch",
                                                 "memory per rank"}


def test_max_pp_leaves_the_deeper_pipelines_out_of_the_search() -> None:
    full = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=512, top=1000)
    flat = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=512, top=1000, max_pp=1)
    assert {row.choice.pp for row in flat.ranked} == {1} and flat.max_pp == 1
    # the same configurations, less the pipelined ones: neither searched nor rejected
    assert [row.layout for row in flat.ranked] == [row.layout for row in full.ranked
                                                    if row.choice.pp == 1]
    assert flat.searched < full.searched
    assert flat.searched == flat.feasible + sum(flat.rejected_by_reason.values())


def test_the_frontier_is_every_layout_no_other_beats_on_time_and_memory() -> None:
    plan = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=512, top=10_000)  # every feasible layout ranked
    assert len(plan.ranked) == plan.feasible
    front = plan.frontier
    assert front[0] == plan.ranked[0]  # the fastest (least memory among the fastest)
    steps = [r.time.step_s for r in front]
    memories = [r.memory.total_bytes for r in front]
    assert steps == sorted(steps) and memories == sorted(memories, reverse=True)
    # a second code path: brute force over all pairs of the feasible layouts (of equal ones,
    # the frontier keeps the first)
    on_front = {(f.time.step_s, f.memory.total_bytes) for f in front}
    for row in plan.ranked:
        mine = (row.time.step_s, row.memory.total_bytes)
        beaten = any(o.time.step_s <= mine[0] and o.memory.total_bytes <= mine[1]
                     and (o.time.step_s, o.memory.total_bytes) != mine for o in plan.ranked)
        assert (mine in on_front) == (not beaten)


def test_selective_is_searched_with_eager_attention_only() -> None:
    flash = plan_layouts(get_preset("llama-3-8b"), H100, 8, seq_len=4096,
                         global_batch_seqs=64, top=10_000)
    eager = plan_layouts(get_preset("llama-3-8b"), H100, 8, seq_len=4096,
                         global_batch_seqs=64, attention="eager", top=10_000)
    assert {r.choice.checkpoint for r in flash.ranked} <= {"none", "full"}
    assert "selective" in {r.choice.checkpoint for r in eager.ranked}
    assert eager.searched > flash.searched


def test_405b_on_16384_searches_ten_thousand_configurations() -> None:
    plan = plan_layouts(get_preset("llama-3-405b"), H100, 16384, seq_len=8192,
                        global_batch_seqs=2048, top=3)
    assert plan.searched >= 10_000
    assert plan.feasible > 0


def test_impossible_requests_name_the_binding_constraint() -> None:
    with pytest.raises(NoLayoutError, match="global batch binds, 1 sequence is smaller than"):
        plan_layouts(get_preset("llama-3-8b"), H100, 16384, seq_len=4096, global_batch_seqs=1)
    with pytest.raises(NoLayoutError, match="fits in no layout: memory per rank binds"):
        plan_layouts(get_preset("llama-3-405b"), H100, 8, seq_len=4096, global_batch_seqs=8)
    with pytest.raises(NoLayoutError, match="memory per rank"):
        plan_layouts(get_preset("llama-3-8b"), H100, 8, seq_len=4096, global_batch_seqs=8,
                     budget_bytes=1e9)
    with pytest.raises(InputError, match="at most h100-sxm's 80 GB"):
        plan_layouts(get_preset("llama-3-8b"), H100, 8, seq_len=4096, global_batch_seqs=8,
                     budget_bytes=81e9)


def test_divisors() -> None:
    assert divisors(12) == (1, 2, 3, 4, 6, 12)
    assert divisors(16384) == tuple(2**k for k in range(15))
    assert divisors(1) == (1,)


def test_tp_rule_shared_with_the_traced_layout() -> None:
    from tensorledger.workload.layout import check_layout, resolve_layout

    config = get_preset("llama-3-70b")
    assert tp_indivisible(config, 16) == ("key/value heads", 8)
    assert tp_indivisible(config, 3) == ("attention heads", 64)
    with pytest.raises(InputError, match="does not divide llama-3-70b's 8 key/value heads"):
        check_layout(resolve_layout(tp=16), config, batch=1, seq=16)


def test_zero_comm_by_hand() -> None:
    setup = _setup("llama-3-8b", 8, 4096, 16)
    P = 8_030_261_248
    # one ring over 8 ranks of a node: (7/8)·S / 450 GB/s + 7 hops · 0.6 µs, S = 2P (bf16)
    half = 7 / 8 * 2 * P / 450e9 + 7 * 0.6e-6
    zero3 = LayoutChoice(dp=8, tp=1, pp=1, zero=3, shard=8, micro_batch=1, accumulation=2)
    # every micro-batch: reduce-scatter the gradients, all-gather the weights twice
    assert step_time(setup, zero3, rank_memory(setup, zero3)).dp_comm_s == pytest.approx(
        2 * 3 * half)
    zero2 = dataclasses.replace(zero3, zero=2)
    assert step_time(setup, zero2, rank_memory(setup, zero2)).dp_comm_s == pytest.approx(
        2 * half + half)  # reduce-scatter per micro-batch, one all-gather
    # ZeRO-1 over 4 with 2 replicas: reduce-scatter + all-gather over 4, then the replicas
    # all-reduce a quarter of the gradients: 2·(1/2)·(2P/4) / 450 GB/s + 2 hops · 0.6 µs
    zero1 = LayoutChoice(dp=8, tp=1, pp=1, zero=1, shard=4, micro_batch=1, accumulation=2)
    quarter = 3 / 4 * 2 * P / 450e9 + 3 * 0.6e-6
    replicas = 2 * P / 4 / 450e9 + 2 * 0.6e-6
    assert step_time(setup, zero1, rank_memory(setup, zero1)).dp_comm_s == pytest.approx(
        2 * quarter + replicas)


def test_priced_bytes_agree_with_the_napkin_volumes() -> None:
    # the planner prices collectives itself; the bytes it moves are the napkin's volumes
    from tensorledger.napkin import tp_comm_volume, zero_comm_volume

    setup = _setup("llama-3-8b", 8, 4096, 8)
    P = 8_030_261_248
    for zero in (0, 1, 2, 3):
        choice = LayoutChoice(dp=8, tp=1, pp=1, zero=zero, shard=8 if zero else 1,
                              micro_batch=1, accumulation=1)
        time = step_time(setup, choice, rank_memory(setup, choice))
        hops = {0: 14, 1: 14, 2: 14, 3: 21}[zero]  # ring steps of the collectives, 0.6 µs each
        sent = zero_comm_volume(P, 8, zero, "bf16-master").sent_bytes_per_rank
        assert time.dp_comm_s == pytest.approx(sent / 450e9 + hops * 0.6e-6), zero
    for sp in (False, True):
        choice = LayoutChoice(dp=1, tp=8, pp=1, sp=sp, micro_batch=2, accumulation=4)
        time = step_time(setup, choice, rank_memory(setup, choice))
        sent = tp_comm_volume(2, 4096, 4096, 32, 8, sequence_parallel=sp).sent_bytes_per_rank
        hops = 32 * 4 * 14  # 4 all-reduces (or gather + scatter pairs) a layer, 14 steps each
        assert time.tp_comm_s == pytest.approx(4 * (sent / 450e9 + hops * 0.6e-6)), sp


def test_zero_comm_under_a_pipeline_by_hand() -> None:
    # torch's pipeline stages reduce once a step; ZeRO-3's units are gathered m + 1 times
    setup = _setup("llama-3-8b", 16, 4096, 16)
    zero2 = LayoutChoice(dp=8, tp=1, pp=2, zero=2, shard=8, micro_batch=1, accumulation=4,
                         schedule="1f1b")
    memory = rank_memory(setup, zero2)
    # the first stage: 16 layers of 218,112,000 and the 525,336,576-value embedding
    assert (memory.stage, memory.stage_params) == ("first", 16 * 218_112_000 + 525_336_576)
    S = memory.stage_params
    half = 7 / 8 * 2 * S / 450e9 + 7 * 0.6e-6  # one ring over the node's 8 ranks, bf16
    # one reduce-scatter and one all-gather a step, whatever the 4 micro-batches
    assert step_time(setup, zero2, memory).dp_comm_s == pytest.approx(2 * half)
    zero3 = dataclasses.replace(zero2, zero=3)
    # one reduce-scatter, and the parameters gathered 4 + 1 times
    assert step_time(setup, zero3, rank_memory(setup, zero3)).dp_comm_s == pytest.approx(
        6 * half)


# ----------------------------------------------------------------------- fixed dimensions

def _every_layout(model: str, count: int, seq: int, batch: int, **kwargs: object) -> list:  # type: ignore[type-arg]
    return list(plan_layouts(get_preset(model), H100, count, seq_len=seq,
                             global_batch_seqs=batch, top=10_000, **kwargs).ranked)  # type: ignore[arg-type]


def test_fixed_tp_and_pp_narrow_the_search_to_those_degrees() -> None:
    full = _every_layout("llama-3-70b", 64, 8192, 512)
    plan = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=512, top=10_000, fixed=FixedDims(tp=8, pp=2))
    assert plan.ranked and {(r.choice.tp, r.choice.pp) for r in plan.ranked} == {(8, 2)}
    assert {r.choice.dp for r in plan.ranked} == {4}  # 64 / (8 · 2)
    # a second path: the unconstrained search's rows with those degrees, in the same order
    assert [(r.layout, r.choice, r.time.step_s) for r in plan.ranked] == [
        (r.layout, r.choice, r.time.step_s) for r in full
        if (r.choice.tp, r.choice.pp) == (8, 2)]
    assert plan.fixed == FixedDims(tp=8, pp=2)
    assert plan.searched == plan.feasible + sum(plan.rejected_by_reason.values())
    assert plan.searched < plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                                        global_batch_seqs=512).searched


def _all_of(choice: LayoutChoice) -> FixedDims:
    return FixedDims(dp=choice.dp, tp=choice.tp, pp=choice.pp, zero=choice.zero,
                     shard=choice.shard, sp=choice.sp, accumulation=choice.accumulation,
                     schedule=None if choice.pp == 1 else choice.schedule,
                     chunks=None if choice.pp == 1 else choice.chunks,
                     checkpoint=choice.checkpoint, cp=choice.cp,
                     stage_layers=choice.stage_layers or None)


def test_every_dimension_fixed_evaluates_the_one_layout_the_search_ranks() -> None:
    pricer = ActionListPricer()
    full = _every_layout("llama-3-70b", 64, 8192, 512, schedules=pricer)
    # the fastest, a ZeRO-3 one, an interleaved one, a zero-bubble one and a plain-DP one
    picks = [full[0], next(r for r in full if r.choice.zero == 3),
             next(r for r in full if r.choice.schedule == "interleaved-1f1b"),
             next(r for r in full if r.choice.schedule == "zbv"),
             next(r for r in full if r.choice.zero == 0)]
    for row in picks:
        plan = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                            global_batch_seqs=512, fixed=_all_of(row.choice),
                            schedules=pricer)
        assert (plan.searched, plan.feasible) == (1, 1)
        (only,) = plan.ranked
        assert only.choice == row.choice
        assert only.time.step_s == row.time.step_s
        assert only.memory.total_bytes == row.memory.total_bytes


def test_405b_tp_8_pp_16_runs_126_layers_on_uneven_stages() -> None:
    plan = plan_layouts(get_preset("llama-3-405b"), H100, 16384, seq_len=8192,
                        global_batch_seqs=2048, top=10_000, fixed=FixedDims(tp=8, pp=16))
    assert {(r.choice.dp, r.choice.tp, r.choice.pp) for r in plan.ranked} == {(128, 8, 16)}
    # 126 blocks over 16 stages: 7, 8 × 14, 7 (Llama 3's cut); the last rank runs 7 blocks and
    # the head (7f + h < 8f), so a middle rank's 8 blocks pace the step: 8 · 16 / (126 + h/f)
    f, h = _block_405b(8192), HEAD_405B
    assert {r.choice.stage_layers for r in plan.ranked} == {(7,) + (8,) * 14 + (7,)}
    assert {round(r.time.imbalance, 12) for r in plan.ranked} == {
        round(8 * f * 16 / (126 * f + h), 12)}


@pytest.mark.parametrize(("fixed", "attention", "message"), [
    (FixedDims(tp=8, pp=3), "flash", "TP 8 · PP 3 does not divide the 64 devices"),
    (FixedDims(dp=8, tp=8, pp=2), "flash", "DP 8 · TP 8 · PP 2 = 128 devices, not the 64"),
    (FixedDims(tp=1, sp=True), "flash", "SP needs tensor parallelism"),
    (FixedDims(pp=1, schedule="1f1b"), "flash", "the 1f1b schedule needs a pipeline"),
    (FixedDims(zero=0, shard=8), "flash", "a shard group of 8 needs a ZeRO stage"),
    (FixedDims(zero=3, shard=1), "flash", "ZeRO-3 needs a shard group above 1 rank"),
    (FixedDims(dp=4, shard=8), "flash", "a shard group of 8 does not divide DP 4"),
    (FixedDims(checkpoint="selective"), "flash", "selective is priced with eager attention"),
])
def test_fixed_dimensions_no_layout_can_have_are_refused(fixed: FixedDims, attention: str,
                                                        message: str) -> None:
    with pytest.raises(InputError, match=message):
        plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192, global_batch_seqs=512,
                     attention=attention, fixed=fixed)


def test_fixed_dimensions_are_checked_when_made() -> None:
    with pytest.raises(InputError, match="ZeRO stage must be 0, 1, 2 or 3"):
        FixedDims(zero=4)
    with pytest.raises(InputError, match="unknown schedule 'dualpipev'"):
        FixedDims(schedule="dualpipev")
    with pytest.raises(InputError, match="1f1b runs one stage per rank"):
        FixedDims(schedule="1f1b", chunks=3)
    with pytest.raises(InputError, match="zbv runs exactly 2 stages per rank"):
        FixedDims(schedule="zbv", chunks=3)
    with pytest.raises(InputError, match="stage layers cut a pipeline"):
        FixedDims(stage_layers=(1, 2))
    with pytest.raises(InputError, match="fixed tp must be a whole number"):
        FixedDims(tp=0)
    with pytest.raises(InputError, match="PP 64 exceeds llama-3-8b's 32 layers"):
        plan_layouts(get_preset("llama-3-8b"), H100, 64, seq_len=4096, global_batch_seqs=64,
                     fixed=FixedDims(pp=64))


def test_a_fixed_layout_that_does_not_fit_says_its_memory_against_the_budget() -> None:
    # llama-3-70b unsharded on TP 8 alone: 70.6e9 parameters / 8 · 16 bytes ≈ 141 GB of state
    # alone, past any budget; the one layout's own memory is named
    fixed = FixedDims(dp=8, tp=8, pp=1, zero=0, sp=False, accumulation=64, checkpoint="full")
    with pytest.raises(NoLayoutError, match=r"\(fixed by you\) does not fit: memory per rank "
                       r"1[0-9]{2}\.[0-9] GB \(DP 8 · TP 8, micro-batch 1 × 64, checkpoint full\)"
                       r" against a budget of 80 GB"):
        plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192, global_batch_seqs=512,
                     budget_bytes=80e9, fixed=fixed)
    # micro-batches that do not split a rank's share: 512 / 8 = 64 sequences, not in 3
    with pytest.raises(NoLayoutError, match=r"64 sequences a data-parallel rank \(DP 8\) do not "
                       "split into 3 micro-batches"):
        plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192, global_batch_seqs=512,
                     fixed=FixedDims(dp=8, accumulation=3))
