"""sent_bytes written out by hand: the data-parallel bytes of every ZeRO stage on the made-up
profile (tests/plan/made_up.py: 4 blocks of 300 parameters, an embedding of 1,000 and a head of
500, d 8, fp32), and the tensor-parallel, pipeline, context- and expert-parallel bytes of
tiny (d 64, V 128, 2 blocks) under mixed-bf16, whose block outputs and logits are bf16 (2
bytes) and whose stream is fp32 (4 bytes), so a width read from the wrong one tells."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import lora_shape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory
from tensorledger.plan.experts import (
    alltoall_buffer_bytes,
    counts_buffer_bytes,
    expert_choice,
)
from tensorledger.plan.model import search_model
from tensorledger.plan.pipeline import ScheduleFigures, SchedulePricer
from tensorledger.plan.profile import ModelProfile, Split
from tensorledger.plan.traffic import SentBytes, sent_bytes
from tests.plan.made_up import made_up_profile, tiny_three_heads_on_tp3

H100 = get_hardware("h100")
TINY = get_preset("tiny")


def _profiled(count: int) -> PlanSetup:
    profile: ModelProfile = made_up_profile(
        block_saved={(False, False): Split(10.0, 40.0)}, other_saved={False: Split(6.0)})
    return PlanSetup(profile, H100, count, 16, 24, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), 1e12)


def _dp(**degrees: int) -> float:
    choice = LayoutChoice(tp=1, pp=1, **degrees)  # type: ignore[arg-type]
    sent = sent_bytes(_profiled(choice.count), choice)
    assert (sent.tensor_parallel_bytes, sent.pipeline_bytes) == (0.0, 0.0)
    assert sent.total_bytes == sent.data_parallel_bytes
    return sent.data_parallel_bytes


# one rank holds all 2,700 parameters: gradients and weights 4 · 2,700 = 10,800 bytes each; the
# root unit (the embedding and the head) 4 · 1,500 = 6,000
G = W = 10_800.0
ROOT = 6000.0


def test_ddp_all_reduces_the_gradients_round_every_data_parallel_rank() -> None:
    assert _dp(dp=8) == 2 * 7 / 8 * G == 18_900


def test_zero_1_all_reduces_and_broadcasts_the_weights() -> None:
    # DP 8 in shards of 4: the ring is the shard's, 2 · 3/4 · G, then W from the owners
    assert _dp(dp=8, zero=1, shard=4) == 2 * 3 / 4 * G + W == 27_000


def test_zero_2_gathers_once_and_scatters_and_its_replicas_reduce_the_shard() -> None:
    # (s − 1)/s · (W + G) over the shard of 4, and 2 replicas all-reduce G / 4:
    # 2 · 1/2 · 2,700
    assert _dp(dp=8, zero=2, shard=4) == 3 / 4 * (W + G) + 2 * 1 / 2 * G / 4 == 18_900


def test_zero_3_gathers_twice_but_the_root_once() -> None:
    assert 3 / 4 * (2 * W - ROOT + G) + 2 * 1 / 2 * G / 4 == 22_500
    assert _dp(dp=8, zero=3, shard=4) == 22_500


def test_zero_3_under_1f1b_gathers_every_unit_but_the_root_m_plus_1_times() -> None:
    # PP 2 (2 blocks a stage), 3 micro-batches of 1, DP 4 in shards of 2: the first stage's
    # rank holds 2 · 300 + 1,000 = 1,600 parameters (6,400 bytes), its root the embedding's
    # 4,000
    setup = _profiled(8)
    choice = LayoutChoice(dp=4, tp=1, pp=2, zero=3, shard=2, accumulation=3,
                          schedule="1f1b")
    assert rank_memory(setup, choice).stage == "first"
    sent = sent_bytes(setup, choice)
    g = w = 6400.0
    root = 4000.0
    assert sent.data_parallel_bytes == (1 / 2 * ((3 + 1) * (w - root) + root + g)
                                        + 2 * 1 / 2 * g / 2) == 13_200
    # the stream out of the first stage, 16 tokens × d 8 × 4 bytes, for each micro-batch;
    # no gradient comes back out of the model's first stage
    assert sent.pipeline_bytes == 3 * 1 * 16 * 8 * 4 == 1536
    assert sent.total_bytes == 13_200 + 1536


def _tiny(precision: str = "mixed-bf16", count: int = 2,
          config: TransformerConfig = TINY) -> PlanSetup:
    return PlanSetup(config, H100, count, 16, 8, resolve_precision(precision),
                     resolve_optimizer("adamw"), 1e12)


def _tp(**change: object) -> float:
    # TP 2 on 2 devices, micro-batches of 1 (16 tokens), 2 of them; both blocks, the
    # embedding and the head on the one stage
    choice = LayoutChoice(dp=1, tp=2, pp=1, accumulation=2, **change)  # type: ignore[arg-type]
    sent = sent_bytes(_tiny(), choice)
    assert sent.data_parallel_bytes == 0.0  # DP 1
    return sent.tensor_parallel_bytes


# 16 tokens × d 64 = 1,024 values a collective; a ring of 2 sends 2 · 1/2 of an all-reduce's
# payload and 1/2 of a gather's or scatter's whole
ND = 16 * 64
LOGITS = 1 / 2 * 16 * 128 * 2  # the gathered logits, bf16: 2,048


def test_tensor_parallel_all_reduces_block_outputs_in_bf16_and_the_stream_in_fp32() -> None:
    # forward: each block's two half outputs (bf16) and the embedding's output (fp32);
    # backward: the input gradients of the 2 · 2 halves and the head (fp32)
    forward = 2 * 1 / 2 * ND * (2 * 2 * 2 + 1 * 4)
    backward = 2 * 1 / 2 * ND * (2 * 2 + 1) * 4
    assert (forward, backward, LOGITS) == (12_288, 20_480, 2048)
    assert _tp() == 2 * (12_288 + 20_480 + 2048) == 69_632
    # full recomputation redoes each block's attention all-reduce (bf16)
    assert _tp(checkpoint="full") == 69_632 + 2 * (2 * 1 / 2 * ND * 2 * 2) == 77_824


def test_sequence_parallel_gathers_and_scatters_and_all_reduces_the_norms() -> None:
    # 2 · 2 halves and the head gather the fp32 stream (5), the 4 halves' outputs (bf16) and
    # the embedding's (fp32) are scattered; backward mirrors it
    halves = 2 * 2 + 1
    forward = 1 / 2 * ND * (halves * 4 + 2 * 2 * 2 + 1 * 4)
    assert forward == 16_384
    # the norms' 5 partial gradients of d 64, all-reduced 3 times each by AdamW, in the
    # parameters' fp32: 3 · 5 · 2 · 1/2 · 64 · 4 = 3,840, once a step
    norms = 3 * halves * 2 * 1 / 2 * 64 * 4
    assert _tp(sp=True) == 2 * (2 * forward + LOGITS) + norms == 73_472
    # recomputed: each block's two gathers (fp32) and one scatter (bf16) again
    again = 1 / 2 * ND * 2 * (2 * 4 + 2)
    assert _tp(sp=True, checkpoint="full") == 2 * (2 * forward + again + LOGITS) + norms


def test_sequence_parallel_norms_are_reduced_once_under_fsdp_in_the_stored_width() -> None:
    # bf16-master (2-byte parameters, 4-byte masters, no autocast: every width 2) on DP 2 ·
    # TP 2; the norms' partial gradients all-reduced 3 times on the fp32 masters under
    # ZeRO-0, once in the parameters' 2 bytes before FSDP (ZeRO-3 over 2) takes them
    halves = 5
    forward = 1 / 2 * ND * (halves * 2 + 2 * 2 * 2 + 1 * 2)
    logits = 1 / 2 * 16 * 128 * 2
    ddp = LayoutChoice(dp=2, tp=2, pp=1, sp=True, accumulation=2)
    fsdp = LayoutChoice(dp=2, tp=2, pp=1, sp=True, zero=3, shard=2, accumulation=2)
    setup = _tiny("bf16-master", count=4)
    assert sent_bytes(setup, ddp).tensor_parallel_bytes == (
        2 * (2 * forward + logits) + 3 * halves * 2 * 1 / 2 * 64 * 4)
    assert sent_bytes(setup, fsdp).tensor_parallel_bytes == (
        2 * (2 * forward + logits) + 1 * halves * 2 * 1 / 2 * 64 * 2)
    fsdp2 = LayoutChoice(dp=2, tp=2, pp=1, sp=True, zero=2, shard=2, accumulation=2)
    assert sent_bytes(setup, fsdp2).tensor_parallel_bytes == sent_bytes(
        setup, fsdp).tensor_parallel_bytes  # FSDP2's ZeRO-2 takes them as ZeRO-3 does
    # ZeRO-3 over a shard of 1 is no FSDP: AdamW's 3 reductions
    one = LayoutChoice(dp=2, tp=2, pp=1, sp=True, zero=3, shard=1, accumulation=2)
    assert sent_bytes(setup, one).tensor_parallel_bytes == (
        2 * (2 * forward + logits) + 3 * halves * 2 * 1 / 2 * 64 * 4)


def test_a_pipeline_stage_sends_its_stream_and_its_tensor_parallel_share() -> None:
    # PP 2 · TP 2 with SP (1F1B, 3 micro-batches of 1): a stage of one block.  The first
    # stage's rank is the busiest (it holds more micro-batches in flight): it sends the
    # stream forward, 16 / 2 tokens of the sequence shard × d 64 × 4 bytes (fp32), and no
    # gradient back
    setup = _tiny(count=4)
    choice = LayoutChoice(dp=1, tp=2, pp=2, sp=True, accumulation=3, schedule="1f1b")
    memory = rank_memory(setup, choice)
    sent = sent_bytes(setup, choice)
    assert (memory.stage, memory.layers) == ("first", 1)
    assert sent.pipeline_bytes == 3 * 1 * (16 // 2) * 64 * 4 == 6144
    # forward: the block's 2 halves gather the stream, their outputs and the embedding's
    # are scattered; no head, no logits; the norms of the 2 halves
    forward = 1 / 2 * ND * (2 * 4 + 2 * 1 * 2 + 1 * 4)
    norms = 3 * 2 * 2 * 1 / 2 * 64 * 4
    assert sent.tensor_parallel_bytes == 3 * 2 * forward + norms


def test_the_context_parallel_ring_is_the_ranks_share_of_the_layers() -> None:
    # CP 2 · PP 2 (1F1B, 2 micro-batches): one of tiny's 2 blocks a stage, so half napkin's ring
    setup = _tiny("fp32", count=4)
    choice = LayoutChoice(dp=1, cp=2, tp=1, pp=2, accumulation=2, schedule="1f1b")
    sent = sent_bytes(setup, choice)
    ring = search_model(setup).ring(setup, 1, 1, False, False, 2)
    assert ring.sent_bytes > 0
    assert sent.context_parallel_bytes == 2 * ring.sent_bytes * 1 / 2
    assert sent.total_bytes == (sent.data_parallel_bytes + sent.tensor_parallel_bytes
                                + sent.pipeline_bytes + sent.context_parallel_bytes)
    # the pipeline stream is the rank's 16 / 2 tokens
    assert sent.pipeline_bytes == 2 * 1 * 8 * 64 * 4


def test_expert_parallel_all_to_alls_and_the_experts_reduced_apart() -> None:
    # tiny-moe (6 experts, 2 blocks) under mixed-bf16 on DP 4 with EP 2, 2 micro-batches of 1
    moe = get_preset("tiny-moe")
    setup = _tiny(count=4, config=moe)
    choice = LayoutChoice(dp=4, tp=1, pp=1, ep=2, accumulation=2)
    memory = rank_memory(setup, choice)
    sent = sent_bytes(setup, choice)
    experts = memory.expert_params
    assert experts > 0
    # the rest all-reduced round the 4 ranks (4 bytes a gradient), the experts' round the
    # dp / ep = 2 holding them
    rest = 4.0 * (memory.stage_params - experts)
    assert sent.data_parallel_bytes == 2 * 3 / 4 * rest + 2 * 1 / 2 * 4.0 * experts
    # each MoE block's dispatch (the fp32 stream) and combine (bf16) in forward and backward,
    # and the counts before each forward dispatch, half of each leaving the rank
    dispatch = alltoall_buffer_bytes(setup, choice, 4)
    combine = alltoall_buffer_bytes(setup, choice, 2)
    assert dispatch == 2 * combine > 0
    assert sent.expert_parallel_bytes == 2 * 2 * 1 / 2 * (
        2 * dispatch + 2 * combine + 1 * counts_buffer_bytes(setup))
    assert expert_choice(choice).dp == 2
    assert sent.total_bytes == sent.data_parallel_bytes + sent.expert_parallel_bytes


def test_a_lora_step_reduces_the_adapters_gradients_alone() -> None:
    # tiny in fp32, LoRA r=8 on the query, the value and the head (TP 1): DDP over 2 ranks
    # all-reduces the fp32 adapters' gradients; ZeRO-3 over 2 gathers the frozen base and the
    # adapters twice but the root (the embedding, the head, the final norm and the head's
    # adapter) once
    lora = lora_shape(TINY, 8, ("query", "value", "head"))
    setup = PlanSetup(TINY, H100, 2, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12, lora=lora)
    ddp = LayoutChoice(dp=2, tp=1, pp=1, accumulation=4)
    memory = rank_memory(setup, ddp)
    # 2 blocks · (1,024 + 768) + the head's 8 · (64 + 128) = 5,120 adapters
    assert memory.adapter_params == 2 * (1024 + 768) + 1536 == 5120
    g = 4.0 * 5120
    assert sent_bytes(setup, ddp).data_parallel_bytes == 2 * 1 / 2 * g
    fsdp = LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2, accumulation=4)
    memory = rank_memory(setup, fsdp)
    w = memory.frozen_bytes + g
    # the root: the embedding (8,192) and the head (8,192) and the final norm (64), 4 bytes
    # each, and the head's adapter's 1,536 · 4 bytes
    root = 4.0 * (8192 + 8192 + 64) + 4.0 * 1536
    assert sent_bytes(setup, fsdp).data_parallel_bytes == pytest.approx(
        1 / 2 * (2 * w - root + g), rel=1e-12)


def test_a_profiles_tensor_parallel_bytes_are_its_measured_ones() -> None:
    # the made-up profile sent 512 bytes a token and block at TP 2, and 30 outside the blocks
    profile = made_up_profile(block_saved={(False, False): Split(10.0, 40.0)},
                              other_saved={False: Split(6.0)},
                              tp_sent_per_token={(False, False): 512.0},
                              other_tp_sent_per_token={False: 30.0})
    setup = PlanSetup(profile, H100, 2, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    choice = LayoutChoice(dp=1, tp=2, pp=1, accumulation=2)
    # 2 micro-batches × 16 tokens × (4 blocks · 512 + 30) × 2 · 1/2
    assert sent_bytes(setup, choice).tensor_parallel_bytes == 2 * 16 * (4 * 512 + 30) * 1.0


class _VPricer(SchedulePricer):
    """A stand-in for torch's action lists: ZBV's V (rank r holds stages r and 2p − 1 − r),
    one micro-batch in flight a stage, no bubble."""

    names = ("zbv",)

    def _price(self, schedule: str, pp: int, microbatches: int, chunks: int
               ) -> ScheduleFigures | str:
        return self.floor(schedule, pp, microbatches, chunks)


def _fsdp_pipeline(profile: ModelProfile, schedule: str, chunks: int,
                   pricer: SchedulePricer | None = None) -> tuple[str, SentBytes]:
    # DP 2 (ZeRO-3 over 2) · PP 2, 2 micro-batches of 1 (16 tokens)
    setup = PlanSetup(profile, H100, 4, 16, 24, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12, schedules=pricer or SchedulePricer())
    choice = LayoutChoice(dp=2, tp=1, pp=2, zero=3, shard=2, accumulation=2,
                          schedule=schedule, chunks=chunks)
    return rank_memory(setup, choice).stage, sent_bytes(setup, choice)


def _saving(**change: object) -> ModelProfile:
    saved: dict[str, object] = {"block_saved": {(False, False): Split(10.0, 40.0)},
                                "other_saved": {False: Split(6.0)}}
    return made_up_profile(**{**saved, **change})


def test_a_zbv_rank_of_the_first_and_last_stage_gathers_both_ends_once() -> None:
    # rank 0 holds stages 0 and 3 (a block each): 2 · 300 + 1,000 + 500 = 2,100 parameters
    # (8,400 bytes of weights and as many of gradients), its root the embedding and the head
    # (1,500 · 4 = 6,000 bytes): the rest gathered m + 1 = 3 times
    stage, sent = _fsdp_pipeline(_saving(), "zbv", 2, _VPricer())
    assert stage == "first and last"
    assert sent.data_parallel_bytes == 1 / 2 * (3 * (8400 - 6000) + 6000 + 8400) == 10_800
    # of its 2 stages, the first sends no gradient back, the last no stream forward: 2 sends
    # a micro-batch of 16 tokens × d 8 × 4 bytes
    assert sent.pipeline_bytes == 2 * (2 * 2 - 1 - 1) * 16 * 8 * 4 == 2048


def test_a_last_stage_gathers_the_head_once_and_sends_gradients_back() -> None:
    # a head of 1,500 split parameters: the last stage (2 blocks and the head, 2,100
    # parameters) outweighs the first (1,600); its root the head's 1,500 · 4 bytes
    stage, sent = _fsdp_pipeline(_saving(head=Split(0.0, 1500.0)), "1f1b", 1)
    assert stage == "last"
    assert sent.data_parallel_bytes == 1 / 2 * (3 * (8400 - 6000) + 6000 + 8400) == 10_800
    assert sent.pipeline_bytes == 2 * 1 * 16 * 8 * 4 == 1024


def test_the_root_is_the_ranks_rounded_up_share_at_a_tp_that_does_not_divide_it() -> None:
    # TP 3 under ZeRO-3 over 2: a block ⌈280 / 3⌉ + 20 = 114, the embedding ⌈1,000 / 3⌉ =
    # 334 and the head ⌈500 / 3⌉ = 167 on the rank: 957 parameters, its root 501
    setup = PlanSetup(_saving(head=Split(0.0, 500.0)), H100, 6, 16, 24,
                      resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)
    choice = LayoutChoice(dp=2, tp=3, pp=1, zero=3, shard=2)
    assert rank_memory(setup, choice).stage_params == 4 * 114 + 334 + 167 == 957
    g = w = 4.0 * 957
    assert sent_bytes(setup, choice).data_parallel_bytes == 1 / 2 * (2 * w - 4 * 501 + g)


def test_a_last_tensor_parallel_stage_sends_the_heads_share_and_no_embeddings() -> None:
    # tiny under mixed-bf16, TP 2 · PP 2 (GPipe, 2 micro-batches of 1): every stage holds both
    # micro-batches, and the last, with the logits' loss bytes, is the busiest.  Forward:
    # its block's two bf16 outputs; backward: the 2 halves' and the head's fp32 input
    # gradients; the gathered bf16 logits
    setup = _tiny(count=4)
    choice = LayoutChoice(dp=1, tp=2, pp=2, accumulation=2, schedule="gpipe")
    assert rank_memory(setup, choice).stage == "last"
    forward = 2 * 1 / 2 * ND * (2 * 1 * 2)
    backward = 2 * 1 / 2 * ND * (2 * 1 + 1) * 4
    assert sent_bytes(setup, choice).tensor_parallel_bytes == 2 * (forward + backward + LOGITS)


def test_zero_3_gathers_the_weights_and_the_experts_apart() -> None:
    # tiny-moe (fp32) on DP 4 = 2 EP × ..., ZeRO-3 over 4: the rest of the rank's 97,344
    # parameters (60,480, 241,920 bytes) over the 4, the root the embedding, head and final
    # norm (4 · 16,448 = 65,792 bytes) gathered once; the experts' over 4 / 2 = 2 ranks, their
    # 3 a rank padded to 4 (49,152 parameters), no root
    moe = get_preset("tiny-moe")
    setup = _tiny("fp32", count=4, config=moe)
    choice = LayoutChoice(dp=4, tp=1, pp=1, zero=3, shard=4, ep=2)
    assert rank_memory(setup, choice).expert_params == 36_864
    rest = 3 / 4 * (2 * 241_920 - 65_792 + 241_920)
    experts = 1 / 2 * (2 * 4 * 49_152 + 4 * 49_152)
    assert sent_bytes(setup, choice).data_parallel_bytes == rest + experts == 789_888


def test_a_lora_heads_adapter_in_the_root_is_the_ranks_rounded_up_share() -> None:
    # tiny with a vocabulary of 129, LoRA r=3 on the query, the value and the head (3 · (64 +
    # 129) = 579 on the head) at TP 2 under ZeRO-3 over 2: the rank's ⌈579 / 2⌉ = 290 of the
    # head's adapter in the root, with its halves of the embedding and the head (129 · 64 / 2
    # = 4,128 each) and the final norm's 64
    config = dataclasses.replace(TINY, vocab_size=129)
    lora = lora_shape(config, 3, ("query", "value", "head"))
    setup = PlanSetup(config, H100, 4, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12, lora=lora)
    choice = LayoutChoice(dp=2, tp=2, pp=1, zero=3, shard=2)
    memory = rank_memory(setup, choice)
    g = 4.0 * memory.adapter_params
    w = memory.frozen_bytes + g
    root = 4.0 * (4128 + 4128 + 64) + 4.0 * 290
    assert sent_bytes(setup, choice).data_parallel_bytes == pytest.approx(
        1 / 2 * (2 * w - root + g), rel=1e-12)


def test_expert_all_to_alls_leave_out_the_first_stages_dense_block() -> None:
    # tiny-moe of 3 blocks, the first dense, on DP 2 = EP 2 (one stage): 2 MoE blocks send
    moe = get_preset("tiny-moe")
    assert moe.moe is not None
    moe3 = dataclasses.replace(moe, n_layers=3,
                               moe=dataclasses.replace(moe.moe, first_dense_layers=1))
    setup = _tiny(count=2, config=moe3)
    choice = LayoutChoice(dp=2, tp=1, pp=1, ep=2, accumulation=2)
    dispatch = alltoall_buffer_bytes(setup, choice, 4)
    combine = alltoall_buffer_bytes(setup, choice, 2)
    assert sent_bytes(setup, choice).expert_parallel_bytes == 2 * 2 * 1 / 2 * (
        2 * dispatch + 2 * combine + counts_buffer_bytes(setup))


def test_a_sequence_parallel_stage_sends_whole_tokens_of_its_shard() -> None:
    # a profile measured with SP too (its head split), on TP 3 · PP 2 (1F1B, 2 micro-batches
    # of 1): each rank sends ⌊16 / 3⌋ = 5 tokens of the stream, d 8 × 4 bytes each, from the
    # first stage
    profile = _saving(block_saved={(False, False): Split(10.0, 40.0),
                                   (True, False): Split(10.0, 40.0)},
                      other_saved={False: Split(6.0), True: Split(6.0)},
                      head=Split(0.0, 500.0))
    setup = PlanSetup(profile, H100, 6, 16, 24, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    choice = LayoutChoice(dp=1, tp=3, pp=2, sp=True, accumulation=2, schedule="1f1b")
    assert rank_memory(setup, choice).stage == "first"
    assert sent_bytes(setup, choice).pipeline_bytes == 2 * 1 * 5 * 8 * 4


def test_three_heads_on_tp_3() -> None:
    # tiny with 3 heads (and d_ff 192, V 129, which 3 divides) in fp32 on TP 3, 8 micro-batches
    # of 1 (16 tokens): a ring of 3 sends 2 · 2/3 of an all-reduce's payload.  Forward: 2
    # blocks × 2 halves and the embedding; backward: 2 × 2 halves and the head; the logits
    # (t − 1)/t · 16 · 129 · 4
    setup, choice = tiny_three_heads_on_tp3()
    forward = 2 * 2 / 3 * ND * (2 * 2 * 4 + 1 * 4)
    backward = 2 * 2 / 3 * ND * (2 * 2 + 1) * 4
    logits = 2 / 3 * 16 * 129 * 4
    assert sent_bytes(setup, choice).tensor_parallel_bytes == pytest.approx(
        8 * (forward + backward + logits), rel=1e-12)
