"""rank_memory written out by hand, field by field.  Mostly on the made-up profile
(tests/plan/made_up.py: 4 blocks of 20 whole + 280 split parameters, an embedding of 1,000 and
a head of 500; fp32, 16 tokens a sequence, a vocabulary of 100), with saved bytes of its own: a
block keeps 10 + 40/t bytes a token (2 + 6/t checkpointed), the loss end 6.  Every state is
AdamW's in fp32: 4 bytes a parameter, 4 a gradient, 8 of moments (16 in all).  Then tiny
(eager scores, the ring's copy, the forward's temporaries, LoRA) and tiny-moe (experts under
EP, beside a leading dense block)."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.adapters import lora_activation_memory, lora_shape
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import (
    LayoutChoice,
    PlanSetup,
    RankMemory,
    layer_activation_bytes,
    rank_memory,
)
from tensorledger.plan.model import search_model
from tensorledger.plan.profile import ModelProfile, Split
from tests.plan.made_up import made_up_profile

H100 = get_hardware("h100")


def _profile(**change: object) -> ModelProfile:
    saved: dict[str, object] = {"block_saved": {(False, False): Split(10.0, 40.0),
                                                (False, True): Split(2.0, 6.0)},
                                "other_saved": {False: Split(6.0)}}
    return made_up_profile(**{**saved, **change})


def _setup(count: int, profile: ModelProfile | None = None) -> PlanSetup:
    return PlanSetup(profile or _profile(), H100, count, 16, 8, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 1e12)


def _only(zero: int = 0, shard: int = 1, dp: int = 1, whole: bool = False) -> RankMemory:
    # micro-batches of 2 sequences: 32 tokens
    setup = _setup(dp, _profile(whole=whole))
    return rank_memory(setup, LayoutChoice(dp=dp, tp=1, pp=1, zero=zero, shard=shard,
                                           micro_batch=2))


def test_one_device_holds_everything_and_peaks_at_the_loss() -> None:
    memory = _only()
    # 4 blocks of 300, the embedding's 1,000 and the head's 500
    assert (memory.stage, memory.rank, memory.layers) == ("only", 0, 4)
    assert memory.stage_params == 4 * 300 + 1000 + 500 == 2700
    assert memory.states_bytes == 16 * 2700 == 43_200
    assert (memory.gathered_bytes, memory.buffers_bytes) == (0.0, 0.0)  # one rank: no DDP
    # 32 tokens × 50 bytes a block, 4 blocks, and the token ids' 8 bytes a token
    assert memory.activations_bytes == 4 * 32 * 50 + 8 * 32 == 6656
    assert memory.logits_bytes == 32 * 6 == 192
    # the gathered logits, 32 tokens × 100 × 4 bytes (no TP, no autocast: nothing more)
    assert memory.temporary_bytes == 32 * 100 * 4 == 12_800
    # at the loss no gradients yet (4 · 2,700 bytes less); in backward no logits
    assert memory.forward_peak_bytes == 43_200 - 4 * 2700 + 6656 + 192 + 12_800 == 52_048
    assert memory.backward_peak_bytes == 43_200 + 6656 + 192 == 50_048
    assert memory.total_bytes == 52_048
    assert (memory.adapter_params, memory.frozen_bytes, memory.expert_params) == (0, 0.0, 0)


def test_ddp_keeps_a_bucket_of_the_gradients() -> None:
    memory = _only(dp=2)
    assert memory.buffers_bytes == 4 * 2700  # DDP's buckets: a copy of the gradients
    assert memory.forward_peak_bytes == 52_048 + 10_800
    assert memory.backward_peak_bytes == 50_048 + 10_800


def test_zero_3_gathers_two_layers_and_zero_2_the_stage() -> None:
    three = _only(zero=3, shard=2, dp=2)
    # 1,350 parameters a rank: 16 bytes each; the gradients' 4 · 1,350 absent at the loss
    assert three.states_bytes == 16 * 1350 == 21_600
    assert three.gathered_bytes == 2 * 300 * 4 == 2400  # two blocks, unsharded
    assert three.buffers_bytes == 0.0
    assert three.forward_peak_bytes == 21_600 + 2400 - 4 * 1350 + 6656 + 192 + 12_800 == 38_248
    assert three.backward_peak_bytes == 21_600 + 2400 + 6656 + 192 == 30_848
    two = _only(zero=2, shard=2, dp=2)
    # FSDP2's ZeRO-2: ZeRO-3's states at rest, the whole stage gathered (2,700 · 4 bytes)
    assert two.states_bytes == 21_600
    assert two.gathered_bytes == 2700 * 4 == 10_800
    assert two.total_bytes == 21_600 + 10_800 - 4 * 1350 + 6656 + 192 + 12_800
    # ZeRO-3 over a shard of 1 is not sharded: nothing gathered, every state whole
    one = _only(zero=3, shard=1, dp=2)
    assert (one.states_bytes, one.gathered_bytes, one.buffers_bytes) == (43_200, 0.0, 0.0)


def test_a_model_profiled_whole_reshards_after_its_forward() -> None:
    # one FSDP unit: at the loss the gathered parameters are freed again (ZeRO-3), and in
    # backward the sharded gradients are not there yet
    memory = _only(zero=3, shard=2, dp=2, whole=True)
    assert memory.gathered_bytes == 2400
    assert memory.forward_peak_bytes == 38_248 - 2400
    assert memory.backward_peak_bytes == 30_848 - 4 * 1350
    assert memory.total_bytes == 38_248 - 2400
    # ZeRO-2 keeps its gathered stage through the forward
    two = _only(zero=2, shard=2, dp=2, whole=True)
    assert two.forward_peak_bytes == 21_600 + 10_800 - 4 * 1350 + 6656 + 192 + 12_800
    assert two.backward_peak_bytes == 21_600 + 10_800 - 4 * 1350 + 6656 + 192


def test_a_recomputed_1f1b_first_stage_on_tp_2() -> None:
    # TP 2 · DP 2 · PP 2 (1F1B, 2 micro-batches of 2 sequences), every block recomputed.  A
    # block on a rank: 280 / 2 + 20 = 160 parameters; the first stage 2 blocks and half the
    # embedding (820), the last 2 blocks and half the head (570)
    setup = _setup(8)
    choice = LayoutChoice(dp=2, tp=2, pp=2, micro_batch=2, accumulation=2,
                          schedule="1f1b", checkpoint="full")
    memory = rank_memory(setup, choice)
    assert (memory.stage, memory.rank, memory.layers) == ("first", 0, 2)
    assert memory.stage_params == 2 * 160 + 500 == 820
    # the gradient of the whole embedding lives beside the rank's share: (1,000 − 500) · 4 B
    assert memory.states_bytes == 16 * 820 + 500 * 4 == 15_120
    assert memory.buffers_bytes == 4 * 820 == 3280  # DDP
    # a checkpointed block keeps 32 · (2 + 6/2) = 160 B, 2 blocks × 2 micro-batches in flight
    # (1F1B's min(p − s, m) = 2 at stage 0), the token ids of 2 micro-batches (2 · 256), and
    # one block recomputed whole: 32 · (10 + 40/2) = 960 B
    assert memory.activations_bytes == 2 * 2 * 160 + 2 * 256 + 960 == 2112
    assert (memory.logits_bytes, memory.temporary_bytes) == (0.0, 0.0)  # not the last stage
    # under a pipeline the gradients are there at the loss too; the recomputed block is not
    assert memory.forward_peak_bytes == 15_120 + 3280 + 2112 - 960 == 19_552
    assert memory.backward_peak_bytes == 15_120 + 3280 + 2112 == 20_512
    assert memory.total_bytes == 20_512
    # the floor: one micro-batch in flight on every stage
    floor = rank_memory(setup, choice, floor=True)
    assert floor.activations_bytes == 2 * 160 + 256 + 960


TINY = get_preset("tiny")  # 4 heads, d 64, V 128, 2 blocks of 36,864 matrix elements


def _tiny(precision: str = "fp32", attention: str = "flash", **change: object) -> PlanSetup:
    return PlanSetup(TINY, H100, 4, 16, 8, resolve_precision(precision),
                     resolve_optimizer("adamw"), 1e12, attention=attention, **change)


def test_eager_attention_keeps_the_scores_unless_recomputed() -> None:
    setup = _tiny(attention="eager")
    # 2 sequences of 16 at TP 2: 5 · 4 heads · 16 · 16 · 2 / 2 = 5,120 bytes of scores,
    # softmax and dropout (Korthikanti's 5·a·s²·b/t)
    plain = activation_memory(TINY, 2, 16, 4, False, tp=2).per_layer_bytes
    kept = activation_memory(TINY, 2, 16, 4, True, tp=2).per_layer_bytes
    assert layer_activation_bytes(setup, 2, 2, False, "none") == (plain + 5120, 0.0)
    assert layer_activation_bytes(setup, 2, 2, False, "selective") == (plain, 0.0)
    assert layer_activation_bytes(setup, 2, 2, False, "full") == (kept, plain + 5120)
    # flash attention keeps none
    assert layer_activation_bytes(_tiny(), 2, 2, False, "none") == (plain, 0.0)


def test_a_context_parallel_layer_keeps_the_rings_copy_of_its_output() -> None:
    setup = _tiny()
    ring = context_parallel_rank(TINY, 2, 16, 2, dtype_bytes=4, tp=1, autocast=False,
                                 checkpointed=False, sequence_parallel=False)
    # the merged output's copy of all 2 layers, per layer
    copy = ring.ring_copy_bytes / 2
    assert copy > 0
    assert layer_activation_bytes(setup, 2, 1, False, "none", 2) == (
        ring.activations.per_layer_bytes + copy, 0.0)


def test_the_forward_holds_the_logits_and_autocasts_weight_casts() -> None:
    # mixed-bf16 at TP 2, 2 sequences (32 tokens), every block recomputed: the gathered bf16
    # logits 32 · 128 · 2, the rank's own 32 · 128 · 2 / 2, their fp32 upcast 32 · 128 · 4;
    # autocast keeps the bf16 casts of both blocks' 36,864 / 2 matrix elements a rank
    setup = _tiny("mixed-bf16")
    choice = LayoutChoice(dp=2, tp=2, pp=1, micro_batch=2, checkpoint="full")
    logits = 32 * 128 * 2 + 32 * 128 * 2 / 2 + 32 * 128 * 4
    cache = 2 * (36_864 // 2) * 2
    assert rank_memory(setup, choice).temporary_bytes == logits + cache == 102_400
    # not recomputed, the casts are saved with the activations: the logits alone
    plain = LayoutChoice(dp=2, tp=2, pp=1, micro_batch=2)
    assert rank_memory(setup, plain).temporary_bytes == logits
    # in fp32 on CP 2: 16 tokens a rank, no upcast, no casts
    fp32 = LayoutChoice(dp=1, cp=2, tp=2, pp=1, micro_batch=2, checkpoint="full")
    assert rank_memory(_tiny(), fp32).temporary_bytes == 16 * 128 * 4 + 16 * 128 * 4 / 2


def test_a_lora_step_caches_no_cast_of_its_frozen_weights() -> None:
    setup = _tiny("mixed-bf16", lora=lora_shape(TINY, 8, ("query", "value")))
    choice = LayoutChoice(dp=2, tp=2, pp=1, micro_batch=2, checkpoint="full")
    assert rank_memory(setup, choice).temporary_bytes == (32 * 128 * 2 + 32 * 128 * 2 / 2
                                                          + 32 * 128 * 4)


def test_a_factorys_loss_temporaries_are_its_measured_ones() -> None:
    # measured: 100 bytes a token whole and 40 split, at TP 2 100 + 40/2 a token
    setup = _setup(4, _profile(loss_temporaries={False: Split(100.0, 40.0)}))
    choice = LayoutChoice(dp=2, tp=2, pp=1, micro_batch=2)
    assert rank_memory(setup, choice).temporary_bytes == 32 * (100 + 40 / 2)


def test_a_profiles_whole_embedding_part_is_on_the_first_stage() -> None:
    # 7 parameters of the embedding unsplit (a position table, say) beside its 1,000
    memory = rank_memory(_setup(1, _profile(embedding=Split(7.0, 1000.0))),
                         LayoutChoice(dp=1, tp=1, pp=1, micro_batch=2))
    assert memory.stage_params == 4 * 300 + 1000 + 7 + 500


_MOE = get_preset("tiny-moe")  # 2 blocks of 58,752 matrix elements, 36,864 of them in 6 experts


def _moe(config: object = _MOE) -> PlanSetup:
    return PlanSetup(config, H100, 2, 16, 8, resolve_precision("fp32"),  # type: ignore[arg-type]
                     resolve_optimizer("adamw"), 1e12)


def test_without_ep_the_experts_split_over_tp_as_the_rest() -> None:
    # TP 2: a block 58,752 / 2 + 128 norm values; the embedding 8,192 / 2, the head 8,192 / 2
    # and the final norm's 64
    memory = rank_memory(_moe(), LayoutChoice(dp=1, tp=2, pp=1))
    assert memory.stage_params == 2 * (58_752 // 2 + 128) + 4096 + 4096 + 64 == 67_264
    assert memory.expert_params == 0


def test_with_ep_a_rank_holds_its_experts_whole_and_ddp_leaves_them_out_of_its_buckets() -> None:
    # DP 2 = EP 2: each rank 3 of the 6 experts (18,432 a block) whole, and the block's other
    # 58,752 − 36,864 = 21,888 and 128 norm values
    setup = _moe()
    choice = LayoutChoice(dp=2, tp=1, pp=1, ep=2)
    memory = rank_memory(setup, choice)
    block = 21_888 + 128 + 18_432
    assert memory.stage_params == 2 * block + 8192 + 8192 + 64 == 97_344
    assert memory.expert_params == 2 * 18_432
    assert memory.states_bytes == 16 * 97_344  # ZeRO-0: every state whole
    # no other rank holds a rank's experts: DDP reduces the rest alone
    assert memory.buffers_bytes == 4 * (97_344 - 36_864) == 241_920
    # the activations of a micro-batch at EP 2 (the experts' share of the tokens)
    closed, loss = search_model(setup).activations(setup, 1, 1, False, False, 1, 2)
    assert closed.per_layer_bytes != search_model(setup).activations(
        setup, 1, 1, False, False, 1, 1)[0].per_layer_bytes
    assert memory.activations_bytes == 2 * closed.per_layer_bytes + closed.embeddings_bytes
    assert memory.logits_bytes == loss


def test_only_the_first_stage_holds_the_leading_dense_block() -> None:
    # tiny-moe of 3 blocks, the first dense (36,864 + 128 parameters, against 58,880 a MoE
    # block), on PP 2 (1F1B, 2 micro-batches): stages of 1 and 2 blocks.  The last stage, 2
    # MoE blocks and the head's 8,192 + 64, is the heavier
    assert _MOE.moe is not None
    moe3 = dataclasses.replace(_MOE, n_layers=3,
                               moe=dataclasses.replace(_MOE.moe, first_dense_layers=1))
    memory = rank_memory(_moe(moe3), LayoutChoice(dp=1, tp=1, pp=2, accumulation=2,
                                                  schedule="1f1b"))
    assert (memory.stage, memory.layers) == ("last", 2)
    assert memory.stage_params == 2 * 58_880 + 8192 + 64 == 126_016


def test_a_recomputed_lora_step_saves_its_first_blocks_input_as_any_other() -> None:
    # tiny in fp32, LoRA r=8 on the query and the value, 2 sequences: recomputed, a block
    # keeps its input whether it needs a gradient or not (nothing less for the first); not
    # recomputed, the first block saves what its input's gradient would need less
    lora = lora_shape(TINY, 8, ("query", "value"))
    setup = _tiny(lora=lora)
    plain = lora_activation_memory(TINY, lora, 2, 16, 4, False)
    kept = lora_activation_memory(TINY, lora, 2, 16, 4, True)
    assert (kept.first_layer_less_bytes, plain.first_layer_less_bytes) == (0, 8320)
    full = rank_memory(setup, LayoutChoice(dp=1, tp=1, pp=1, micro_batch=2, checkpoint="full"))
    assert full.activations_bytes == (2 * kept.activations.per_layer_bytes + 256
                                      + plain.activations.per_layer_bytes)
    none = rank_memory(setup, LayoutChoice(dp=1, tp=1, pp=1, micro_batch=2))
    assert none.activations_bytes == 2 * plain.activations.per_layer_bytes + 256 - 8320


def test_zero_1_gathers_nothing() -> None:
    # ZeRO-1 over a shard of 2: optimizer state and master sharded, no parameter gathered
    memory = _only(zero=1, shard=2, dp=2)
    assert memory.gathered_bytes == 0.0
    # 2,700 parameters: weights and gradients whole (8 bytes), moments sharded (8 · 1,350)
    assert memory.states_bytes == 8 * 2700 + 8 * 1350


def test_the_experts_of_a_first_stage_leave_out_its_dense_block() -> None:
    # tiny-moe of 3 blocks, the first dense, on DP 2 = EP 2 under ZeRO-3 over 2: the 2 MoE
    # blocks' experts (2 · 18,432) are held whole on the rank (their ZeRO group 2 / 2 = 1),
    # the other parameters sharded over 2.  A MoE block holds 21,888 + 128 + 18,432 = 40,448
    # on the rank, the dense one 36,864 + 128: 2 · 40,448 + 36,992 + 8,192 + 8,256 = 134,336
    assert _MOE.moe is not None
    moe3 = dataclasses.replace(_MOE, n_layers=3,
                               moe=dataclasses.replace(_MOE.moe, first_dense_layers=1))
    memory = rank_memory(_moe(moe3), LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2, ep=2))
    assert memory.stage_params == 2 * 40_448 + 36_992 + 8192 + 8256 == 134_336
    assert memory.expert_params == 2 * 18_432
    rest = 134_336 - 36_864  # 97,472 sharded over 2 at ZeRO-3: 16 bytes each of 48,736
    assert memory.states_bytes == 16 * (rest // 2) + 16 * 36_864


def test_a_lora_ranks_parameters_count_its_adapters_too() -> None:
    # tiny's 90,432 frozen parameters and 2 blocks × (1,024 + 768) adapters
    setup = _tiny(lora=lora_shape(TINY, 8, ("query", "value")))
    memory = rank_memory(setup, LayoutChoice(dp=1, tp=1, pp=1))
    assert memory.stage_params == 2 * 36_992 + 8192 + 8192 + 64 + 2 * 1792 == 94_016
    assert memory.adapter_params == 2 * 1792


def test_the_busiest_rank_is_chosen_by_what_it_holds_at_rest_not_its_gradients() -> None:
    # the made-up profile with an embedding of 1,000 and a head of 1,100, no loss bytes, on
    # PP 2 (1F1B, 2 micro-batches of 1): the first stage 1,600 parameters, 2 blocks × 2
    # micro-batches of 16 · 50 = 800 bytes and 2 · 128 bytes of token ids; the last 1,700
    # parameters, 2 blocks × 1 micro-batch
    setup = _setup(2, _profile(head=Split(1100.0), other_saved={False: Split(0.0)}))
    memory = rank_memory(setup, LayoutChoice(dp=1, tp=1, pp=2, accumulation=2,
                                             schedule="1f1b"))
    first = 16 * 1600 + 4 * 800 + 2 * 128  # 29,056
    last = 16 * 1700 + 2 * 800  # 28,800
    assert first > last
    # weighed with their gradients again (4 or 8 bytes a parameter more) the last would win
    assert first + 4 * 1600 < last + 4 * 1700 and first + 8 * 1600 < last + 8 * 1700
    assert (memory.stage, memory.stage_params) == ("first", 1600)


def test_a_middle_stage_can_be_the_busiest() -> None:
    # an embedding of 10 and a head of 10; stages of 1, 2 and 1 blocks on PP 3 (1F1B, 3
    # micro-batches of 1): the middle rank's 600 parameters and 2 blocks × 2 in flight outweigh
    # the first's 310 and 1 block × 3 in flight
    setup = _setup(3, _profile(embedding=Split(0.0, 10.0), head=Split(10.0)))
    memory = rank_memory(setup, LayoutChoice(dp=1, tp=1, pp=3, accumulation=3,
                                             schedule="1f1b", stage_layers=(1, 2, 1)))
    assert (memory.stage, memory.rank, memory.stage_params) == ("middle", 1, 600)
    assert memory.activations_bytes == 2 * 2 * 800


def test_a_zbv_rank_holds_the_first_and_the_last_stage() -> None:
    # ZBV's V on PP 2: rank 0 holds stages 0 and 3 (of 4, a block each), so the embedding
    # and the head; priced at its floor (one micro-batch in flight a stage), as the search
    # prices memory first
    setup = _setup(2)
    choice = LayoutChoice(dp=1, tp=1, pp=2, accumulation=2, schedule="zbv", chunks=2)
    memory = rank_memory(setup, choice, floor=True)
    assert (memory.stage, memory.rank, memory.layers) == ("first and last", 0, 2)
    assert memory.stage_params == 2 * 300 + 1000 + 500
    assert memory.logits_bytes == 16 * 6  # the loss end of one micro-batch of 16 tokens


def test_ddp_leaves_the_experts_in_its_buckets_where_other_ranks_hold_them_too() -> None:
    setup = PlanSetup(_MOE, H100, 4, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    # DP 4 with EP 2: each rank's 3 experts are held by one other rank, reduced with it
    memory = rank_memory(setup, LayoutChoice(dp=4, tp=1, pp=1, ep=2))
    assert memory.expert_params == 2 * 18_432
    assert memory.buffers_bytes == 4 * 97_344
    # under a pipeline FSDP holds the whole stage's gradients unsharded, the experts' too:
    # the last stage's 2 MoE blocks of tiny-moe cut in 2 (1 block a stage), EP 2 = DP 2
    piped = LayoutChoice(dp=2, tp=1, pp=2, zero=3, shard=2, ep=2, accumulation=2,
                         schedule="1f1b")
    memory = rank_memory(_moe_setup(4), piped)
    assert memory.expert_params == 18_432
    assert memory.buffers_bytes == 4 * memory.stage_params


def _moe_setup(count: int) -> PlanSetup:
    return PlanSetup(_MOE, H100, count, 16, 8, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 1e12)


def test_a_later_stages_blocks_are_all_moe_ones() -> None:
    # tiny-moe of 3 blocks, the first dense, on PP 2 · DP 2 = EP 2: the last stage's 2 blocks
    # hold 3 of the 6 experts each
    assert _MOE.moe is not None
    moe3 = dataclasses.replace(_MOE, n_layers=3,
                               moe=dataclasses.replace(_MOE.moe, first_dense_layers=1))
    setup = PlanSetup(moe3, H100, 4, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    memory = rank_memory(setup, LayoutChoice(dp=2, tp=1, pp=2, ep=2, accumulation=2,
                                             schedule="1f1b"))
    assert (memory.stage, memory.layers) == ("last", 2)
    assert memory.expert_params == 2 * 18_432


def test_the_whole_embeddings_gradient_at_a_tp_that_does_not_divide_it() -> None:
    # the head split too (⌈500 / 3⌉ = 167 a rank, the last stage the lighter), on TP 3 · PP
    # 2 (1F1B, 2 micro-batches): a block 280 / 3 → 94 + 20 on the rank, the embedding's
    # ⌈1,000 / 3⌉ = 334; the gradient of the whole vocabulary's embedding beside the share:
    # (1,000 − 334) · 4 bytes
    setup = _setup(6, _profile(head=Split(0.0, 500.0)))
    memory = rank_memory(setup, LayoutChoice(dp=1, tp=3, pp=2, micro_batch=2,
                                             accumulation=2, schedule="1f1b"))
    assert (memory.stage, memory.stage_params) == ("first", 2 * 114 + 334)
    assert memory.states_bytes == 16 * 562 + 4 * 666


def test_under_a_pipeline_fsdp_holds_the_whole_embeddings_gradient_in_its_buffers() -> None:
    # TP 2 · DP 2 (ZeRO-3 over 2) · PP 2: the stage's gradients unsharded (820 · 4 bytes) and
    # the whole embedding's gradient beside them ((1,000 − 500) · 4), none of it in states
    setup = _setup(8)
    memory = rank_memory(setup, LayoutChoice(dp=2, tp=2, pp=2, zero=3, shard=2,
                                             micro_batch=2, accumulation=2,
                                             schedule="1f1b", checkpoint="full"))
    assert (memory.stage, memory.stage_params) == ("first", 820)
    assert memory.buffers_bytes == 4 * 820 + 4 * 500
    assert memory.states_bytes == 16 * 410  # 820 sharded over 2


def test_a_whole_unit_under_a_pipeline_has_the_embeddings_whole_gradient_late_too() -> None:
    # profiled whole (one FSDP unit), TP 2 · DP 2 (ZeRO-1 over 2) · PP 2 (1F1B, 2
    # micro-batches of 2): the first stage's 820 parameters, weights and gradients whole
    # (4 · 820 each), moments sharded (8 · 410), and the whole embedding's gradient
    # (500 · 4) in the states and among the gradients; DDP's buckets 4 · 820
    setup = _setup(8, _profile(whole=True))
    memory = rank_memory(setup, LayoutChoice(dp=2, tp=2, pp=2, zero=1, shard=2,
                                             micro_batch=2, accumulation=2,
                                             schedule="1f1b"))
    assert (memory.stage, memory.stage_params) == ("first", 820)
    states = 4 * 820 + 4 * 820 + 8 * 410 + 2000
    grads = 4 * 820 + 2000
    # 2 blocks × 2 micro-batches × 32 · (10 + 40/2) bytes, and 2 micro-batches' token ids
    activations = 2 * 2 * 960 + 2 * 256
    assert (memory.states_bytes, memory.activations_bytes) == (states, activations)
    # a whole unit's sharded gradients are there only once its backward has freed the
    # saved tensors: none at the backward peak
    assert memory.backward_peak_bytes == states + 4 * 820 - grads + activations
    assert memory.forward_peak_bytes == states + 4 * 820 + activations


def test_a_layer_is_dense_unless_ep_is_given() -> None:
    # tiny-moe's layer asked without EP: its experts' saved bytes at EP 1
    setup = _moe()
    closed, _ = search_model(setup).activations(setup, 1, 1, False, False, 1, 1)
    assert layer_activation_bytes(setup, 1, 1, False, "none") == (closed.per_layer_bytes, 0.0)


def test_a_recomputed_context_parallel_layer_keeps_the_rings_input() -> None:
    # CP 2, every block recomputed: the ring rank's checkpointed layer kept, its plain one
    # and its output's copy held while it is recomputed
    setup = _tiny()
    plain = context_parallel_rank(TINY, 2, 16, 2, dtype_bytes=4, tp=1, autocast=False,
                                  checkpointed=False, sequence_parallel=False)
    kept = context_parallel_rank(TINY, 2, 16, 2, dtype_bytes=4, tp=1, autocast=False,
                                 checkpointed=True, sequence_parallel=False)
    assert kept.activations.per_layer_bytes < plain.activations.per_layer_bytes
    assert layer_activation_bytes(setup, 2, 1, False, "full", 2) == (
        kept.activations.per_layer_bytes,
        plain.activations.per_layer_bytes + plain.ring_copy_bytes / 2)


def test_autocasts_weight_casts_are_the_ranks_rounded_up_share() -> None:
    # the made-up profile under mixed-bf16 on TP 3, recomputed: ⌈280 / 3⌉ = 94 bf16 casts a
    # block, 4 blocks; the logits 32 · 100 · 2 gathered, 32 · 100 · 2 / 3 the rank's own,
    # 32 · 100 · 4 their upcast
    setup = PlanSetup(_profile(), H100, 3, 16, 8, resolve_precision("mixed-bf16"),
                      resolve_optimizer("adamw"), 1e12)
    choice = LayoutChoice(dp=1, tp=3, pp=1, micro_batch=2, checkpoint="full")
    assert rank_memory(setup, choice).temporary_bytes == pytest.approx(
        4 * 94 * 2 + 32 * 100 * 2 + 32 * 100 * 2 / 3 + 32 * 100 * 4, rel=1e-12)
