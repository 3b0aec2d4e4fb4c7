"""The planner's added dimensions (issue 37 item 5): context parallelism against napkin's ring,
uneven stage cuts by hand, and every torch schedule's bubble from its own action lists."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.schedules import ActionListPricer
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.plan import (
    FixedDims,
    LayoutChoice,
    PlanSetup,
    plan_layouts,
    rank_memory,
    sent_bytes,
    step_time,
)
from tensorledger.plan.pipeline import SchedulePricer, stage_splits
from tensorledger.workload.pipeline import action_lists
from tensorledger.workload.schedule_order import order_timeline

H100 = get_hardware("h100")


def _tiny(precision: str, count: int = 2, seq: int = 128, batch: int = 2) -> PlanSetup:
    return PlanSetup(get_preset("tiny"), H100, count, seq, batch, resolve_precision(precision),
                     resolve_optimizer("adamw"), 80e9)


# ------------------------------------------------------------------------ context parallel

@pytest.mark.parametrize(("precision", "width", "autocast"), [
    ("fp32", 4, False), ("mixed-bf16", 2, True)])
def test_a_cp_rank_holds_and_sends_napkins_ring(precision: str, width: int,
                                               autocast: bool) -> None:
    # tiny (2 layers, 2 kv heads of 16) at b = 2, s = 128 over CP 2, FSDP over the 2 cp ranks
    setup = _tiny(precision)
    choice = LayoutChoice(dp=1, cp=2, tp=1, pp=1, zero=3, shard=1, micro_batch=2)
    ring = context_parallel_rank(get_preset("tiny"), 2, 128, 2, dtype_bytes=width,
                                 autocast=autocast)
    memory = rank_memory(setup, choice)
    # the saved activations at s/cp = 64 tokens, the merged outputs' copies and the targets'
    # whole storage: napkin's figure, to the byte
    assert memory.activations_bytes + memory.logits_bytes == ring.saved_activation_bytes
    # bytes sent: K = 2·b·h_x·(s/cp)·d·a = 2·2·2·64·16·a, G the same in fp32 (32,768 B);
    # per layer (cp−1)·K in forward, (cp−1)·K + cp·G in backward; 2 layers
    k = 2 * 2 * 2 * 64 * 16 * width
    assert ring.kv_buffer_bytes == k
    assert sent_bytes(setup, choice).context_parallel_bytes == 2 * (k + k + 2 * 32_768) \
        == ring.sent_bytes
    if precision == "fp32":
        assert ring.sent_bytes == 262_144  # napkin's own doctest


def test_cp_shards_the_parameters_with_the_zero_group() -> None:
    # ZeRO-3 over shard · cp = 2 · 2 ranks: a quarter of tiny's 16 bytes per parameter
    setup = _tiny("bf16-master", count=4, batch=4)
    one = rank_memory(setup, LayoutChoice(dp=2, cp=2, tp=1, pp=1, zero=3, shard=2))
    alone = rank_memory(setup, LayoutChoice(dp=4, tp=1, pp=1, zero=3, shard=4))
    assert one.states_bytes == alone.states_bytes  # 4 ranks either way
    assert one.stage_params == alone.stage_params


def test_cp_ring_time_is_priced_and_exposed() -> None:
    setup = dataclasses.replace(_tiny("bf16-master", count=2), seq_len=128)
    choice = LayoutChoice(dp=1, cp=2, tp=1, pp=1, zero=3, shard=1, micro_batch=2)
    time = step_time(setup, choice, rank_memory(setup, choice))
    assert time.cp_comm_s > 0
    assert time.step_s == pytest.approx(time.compute_s + time.cp_comm_s + time.dp_exposed_s)


def test_long_context_405b_picks_context_parallelism() -> None:
    # 131,072 tokens a sequence, 16M = 2²⁴ tokens: 128 sequences on 16,384 H100s.  Without
    # CP a rank gathers the logits of whole sequences (131,072 · 128,256 values); the
    # search keeps CP while a rank holds 8,192 tokens or more: CP up to 16
    plan = plan_layouts(get_preset("llama-3-405b"), H100, 16384, seq_len=131_072,
                        global_batch_seqs=128, top=3, schedules=ActionListPricer())
    assert plan.best.choice.cp > 1
    assert 131_072 // plan.best.choice.cp >= 8192
    assert 0.3 <= plan.best.time.mfu <= 0.55


def test_fixed_cp_that_does_not_cut_the_sequence_is_refused() -> None:
    with pytest.raises(InputError, match="CP 3 cuts each sequence into 6 chunks"):
        plan_layouts(get_preset("llama-3-8b"), H100, 48, seq_len=4096, global_batch_seqs=48,
                     fixed=FixedDims(cp=3))
    with pytest.raises(InputError, match="not ZeRO-1"):
        plan_layouts(get_preset("llama-3-8b"), H100, 16, seq_len=4096, global_batch_seqs=16,
                     fixed=FixedDims(cp=2, zero=1))


# ------------------------------------------------------------------------ uneven stages

# A model where every dimension differs: d 48, 4 heads of 12 (2 kv), SwiGLU 80, vocabulary
# 96, 3 layers; on TP 2 a block is 18,432/2 + 96 = 9,312 parameters, the embedding and the
# head 4,608/2 = 2,304 each, the final norm 48.  bf16-master + AdamW: 16 bytes a parameter.
ODD = TransformerConfig(name="odd", vocab_size=96, context_length=64, d_model=48, n_layers=3,
                        n_heads=4, n_kv_heads=2, d_ff=80, mlp="swiglu", norm="rmsnorm",
                        positions="rope", tied_embeddings=False, bias=False)


def test_an_uneven_cut_by_hand() -> None:
    # 2 stages under 1F1B, 4 micro-batches of 1 sequence of 16: the first stage holds
    # min(2, 4) = 2 in flight, the last 1.  A block keeps 24,576 bytes of a micro-batch
    # (tests/plan/test_layouts.py), the token ids 128; the loss end 10,948; the last rank's
    # logits in forward n·V·2 gathered + its half = 3,072 + 1,536 = 4,608
    setup = PlanSetup(ODD, H100, 4, 16, 8, resolve_precision("bf16-master"),
                      resolve_optimizer("adamw"), 80e9)
    base = LayoutChoice(dp=1, tp=2, pp=2, micro_batch=1, accumulation=4, schedule="1f1b")
    # 1 + 2 blocks: rank 0 holds 9,312 + 2,304 = 11,616 parameters (16 B each: 185,856,
    # and the embedding gradient's other half, 2,304 bf16 values: 4,608) and 2 · (24,576 +
    # 128) = 49,408 of activations: 239,872.  Rank 1: 2 · 9,312 + 2,304 + 48 = 20,976
    # parameters (335,616), 2 blocks of 1 micro-batch 49,152, the loss end and logits:
    # 335,616 + 49,152 + 10,948 + 4,608 = 400,324, the heavier
    light_first = rank_memory(setup, dataclasses.replace(base, stage_layers=(1, 2)))
    assert (light_first.stage, light_first.rank, light_first.layers) == ("last", 1, 2)
    assert light_first.stage_params == 20_976
    assert light_first.activations_bytes == 49_152
    assert light_first.total_bytes == 400_324
    # 2 + 1 blocks: rank 0 holds 2 · 9,312 + 2,304 = 20,928 parameters (334,848 + 4,608) and
    # 2 blocks × 2 in flight 98,304 + 256 of token ids: 438,016; rank 1, 11,664 parameters
    # (186,624) + 24,576 + 10,948 + 4,608 = 226,756
    heavy_first = rank_memory(setup, dataclasses.replace(base, stage_layers=(2, 1)))
    assert (heavy_first.stage, heavy_first.layers) == ("first", 2)
    assert heavy_first.activations_bytes == 2 * 2 * 24_576 + 2 * 128
    assert heavy_first.total_bytes == 334_848 + 4_608 + 98_560 == 438_016


def test_stage_cuts_searched() -> None:
    # 126 over 16: 7, 8 × 14, 7 (the first/last one shorter is the same cut); 126 + 2 = 128
    assert stage_splits(126, 16) == ((7,) + (8,) * 14 + (7,),)
    # 80 over 4 divides: even; 80 + 2 and 80 + 1 do not divide by 4
    assert stage_splits(80, 4) == ((20, 20, 20, 20),)
    # 10 over 4: 2, 3, 3, 2; the first and last one shorter is the same; last alone: 11 no
    assert stage_splits(10, 4) == ((2, 3, 3, 2),)
    # 11 over 3: 3, 4, 4 → the extra to the middle first: 4, 4, 3 ... as even as they go
    assert sorted(stage_splits(11, 3)[0]) == [3, 4, 4]
    assert (4, 4, 3) in stage_splits(11, 3)  # the last one shorter (11 + 1 = 12)
    assert stage_splits(3, 4) == ()


def test_fixed_stage_layers_must_add_up() -> None:
    with pytest.raises(InputError, match="add up to 125 blocks, not llama-3-405b's 126"):
        plan_layouts(get_preset("llama-3-405b"), H100, 16384, seq_len=8192,
                     global_batch_seqs=2048,
                     fixed=FixedDims(pp=16, stage_layers=(7,) + (8,) * 14 + (6,)))


# ------------------------------------------------------------------------------ schedules

P, M = 4, 8
# Hand derivations at p = 4, m = 8 with a forward 1 unit, a backward's input and weight
# halves 1 each (schedule_order's times):
# - GPipe, 1F1B: a rank computes 3·m = 24 units in a step of 3·(m + p − 1) = 33: the bubble
#   (p−1)/(m+p−1) = 3/11;
# - interleaved 1F1B and looped BFS with v chunks: 24·v units a rank, the same 3·(p−1) = 9
#   idle: 3/(v·m + p − 1), 3/19 at v = 2 and 3/35 at v = 4;
# - interleaved zero-bubble and ZBV: the weight halves fill the drain; a rank waits only for
#   the forwards ahead of it, p − 1 = 3 units: 3 of 51 (1/17) at v = 2, 3 of 99 (1/33) at 4.
HAND = {("gpipe", 1): 3 / 11, ("1f1b", 1): 3 / 11, ("interleaved-1f1b", 2): 3 / 19,
        ("interleaved-1f1b", 4): 3 / 35, ("looped-bfs", 2): 3 / 19, ("looped-bfs", 4): 3 / 35,
        ("interleaved-zb", 2): 1 / 17, ("interleaved-zb", 4): 1 / 33, ("zbv", 2): 1 / 17}


@pytest.mark.parametrize(("schedule", "chunks"), list(HAND))
def test_each_schedules_bubble_in_the_plan_is_its_action_lists(schedule: str,
                                                              chunks: int) -> None:
    lists = order_timeline(action_lists(schedule, P, M, chunks))
    assert lists.bubble_fraction == pytest.approx(HAND[(schedule, chunks)])
    # the plan's step: llama-3-8b's 32 blocks over 4 ranks (× chunks stages)
    setup = dataclasses.replace(_tiny("bf16-master"), config=get_preset("llama-3-8b"),
                                count=8, seq_len=4096, global_batch_seqs=8,
                                schedules=ActionListPricer())
    choice = LayoutChoice(dp=1, tp=2, pp=P, micro_batch=1, accumulation=M, schedule=schedule,
                          chunks=chunks)
    time = step_time(setup, choice, rank_memory(setup, choice))
    f = lists.bubble_fraction
    assert time.bubble_to_compute == pytest.approx(f / (1 - f))


def test_in_flight_is_the_action_lists() -> None:
    pricer = ActionListPricer()
    one = pricer.figures("1f1b", P, M, 1)
    assert one.stage_in_flight == (4, 3, 2, 1)  # p − s on stage s
    assert pricer.figures("gpipe", P, M, 1).stage_in_flight == (8,) * 4  # all m
    assert pricer.figures("looped-bfs", P, M, 4).stage_in_flight == (8,) * 16  # all m too
    # the closed-form pricer gives the same for the two it prices
    closed = SchedulePricer()
    for schedule in ("gpipe", "1f1b"):
        a, b = closed.figures(schedule, P, M, 1), pricer.figures(schedule, P, M, 1)
        assert not isinstance(a, str) and not isinstance(b, str)
        assert a.stage_in_flight == b.stage_in_flight
        assert a.bubble_fraction == pytest.approx(b.bubble_fraction)
    # ZBV places stages in a V: rank 0 holds the first and the last
    zbv = pricer.figures("zbv", P, M, 2)
    assert not isinstance(zbv, str) and zbv.rank_stages[0] == (0, 7)
    assert "needs a micro-batch per stage" in str(pricer.figures("1f1b", 4, 2, 1))


@pytest.mark.parametrize(("schedule", "chunks", "m"), [
    ("gpipe", 1, 64), ("1f1b", 1, 66), ("interleaved-1f1b", 2, 64), ("interleaved-1f1b", 3, 64),
    ("looped-bfs", 2, 66), ("interleaved-zb", 4, 64), ("zbv", 2, 66)])
def test_the_steady_state_extension_equals_a_replay_at_16p(schedule: str, chunks: int,
                                                           m: int) -> None:
    figures = ActionListPricer().figures(schedule, 4, m, chunks)
    assert not isinstance(figures, str) and "extended" in figures.source
    lists = order_timeline(action_lists(schedule, 4, m, chunks))
    assert figures.stage_in_flight == lists.in_flight
    assert figures.bubble_fraction == pytest.approx(lists.bubble_fraction, rel=1e-12)


def test_the_search_covers_every_schedule() -> None:
    pricer = ActionListPricer()
    plan = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                        global_batch_seqs=512, top=10_000, schedules=pricer)
    fastest = {r.choice.schedule for r in plan.ranked}
    assert {"1f1b", "interleaved-1f1b", "interleaved-zb", "zbv"} <= fastest
    # GPipe and looped BFS hold every micro-batch in flight: none fits 70B's 64 a rank
    # there; with a batch of 32 sequences (4 a pipeline) each plans
    for schedule in ("gpipe", "looped-bfs"):
        small = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                             global_batch_seqs=32, schedules=pricer,
                             fixed=FixedDims(schedule=schedule))
        assert {r.choice.schedule for r in small.ranked} == {schedule}
    # a fixed odd chunk count is priced too
    three = plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                         global_batch_seqs=512, schedules=ActionListPricer(),
                         fixed=FixedDims(pp=4, schedule="interleaved-1f1b", chunks=5))
    assert {r.choice.chunks for r in three.ranked} == {5}
    # without torch's lists the search prices GPipe and 1F1B alone, and says so when fixed
    with pytest.raises(InputError, match="priced: gpipe, 1f1b"):
        plan_layouts(get_preset("llama-3-70b"), H100, 64, seq_len=8192,
                     global_batch_seqs=512, fixed=FixedDims(pp=4, schedule="zbv"))


@pytest.mark.parametrize("precision", ["fp32", "mixed-bf16"])
@pytest.mark.parametrize(("count", "choice"), [
    (2, LayoutChoice(dp=1, cp=2, tp=1, pp=1, zero=3, shard=1, micro_batch=2)),
    (4, LayoutChoice(dp=2, cp=2, tp=1, pp=1, zero=3, shard=2, micro_batch=1))])
def test_a_traced_cp_rank_holds_and_sends_what_the_plan_says(precision: str, count: int,
                                                             choice: LayoutChoice) -> None:
    # torch's context_parallel (ring attention) and FSDP2 over fsdp · cp on a fake group, one
    # step of tiny at s = 128 (the --verify path): the saved activations and the bytes sent
    # equal the closed form to the byte; the state within AdamW's step counters; the peak
    # (backward's temporaries are left out of the closed form) within 10%
    from tensorledger.ledger.plan import verify_choice

    setup = _tiny(precision, count=count)
    v = verify_choice(setup, choice, "tiny")
    assert "CP × 2" in v.traced_layout
    assert v.closed_activation_bytes == v.traced_activation_bytes
    assert v.closed_sent_bytes == v.traced_sent_bytes
    assert v.closed_state_bytes == pytest.approx(v.traced_state_bytes, rel=0.001)
    assert v.closed_total_bytes == pytest.approx(v.traced_peak_bytes, rel=0.10)
