"""plan_layouts on two devices counted by hand: every layout the search walks, the feasible
ones, the refusals by reason and the one kept of each kind, the fields of the plan it
returns, its checks of ``top`` and ``tokens``, and the one line of a search nothing passes
(the global batch, a fixed accumulation, a shard group no DP leaves)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import FULL_FINE_TUNE, LoraShape
from tensorledger.napkin.headroom import device_headroom
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import FixedDims, LayoutChoice, plan_layouts
from tensorledger.plan.estimate import estimate, rank_memory
from tensorledger.plan.experts import ASSUMPTION as EXPERTS_ASSUMPTION
from tensorledger.plan.layouts import (
    ASSUMPTIONS,
    NoLayoutError,
    _fine_tune,
    _pipelines,
    plan_setup,
)
from tensorledger.plan.pipeline import SchedulePricer

H100 = get_hardware("h100")
TINY = get_preset("tiny")  # 2 layers, 4 heads, 2 key/value heads


def _plan(count: int = 2, batch: int = 2, **kwargs: object):  # type: ignore[no-untyped-def]
    return plan_layouts(TINY, H100, count, seq_len=16, global_batch_seqs=batch,
                        budget_bytes=1e10, **kwargs)  # type: ignore[arg-type]


def test_two_devices_walked_by_hand() -> None:
    # degrees: DP 2; PP 2 (DP 1); TP 2 (DP 1) with and without SP.  Flash attention:
    # checkpoints none and full (2 each).
    # - DP 2, one sequence a rank (micro-batch 1): ZeRO-0 over 1, ZeRO-1/2/3 over 2:
    #   4 shardings × 2 checkpoints = 8
    # - PP 2, 2 sequences: micro-batches of 1 (m = 2) and 2 (m = 1); GPipe takes both
    #   (2 × 2 = 4), 1F1B only m = 2 (2; m = 1 < 2 stages refused, once per checkpoint)
    # - TP 2, SP off and on: micro-batches 1 and 2, 2 checkpoints: 2 × 4 = 8
    plan = _plan()
    assert plan.feasible == 8 + (4 + 2) + 8 == 22
    assert plan.rejected_by_reason == {"divisibility": 2, "global batch": 0,
                                       "memory per rank": 0}
    assert plan.searched == 22 + 2  # every layout priced or refused
    assert len(plan.ranked) == 10  # the default top: 10 of the 22
    every = _plan(top=22).ranked
    assert len(every) == 22
    # TP 2 + SP: micro-batches 1 and 2 × 2 checkpoints, each its own layout
    assert sum(e.choice.sp for e in every) == 4
    assert len({e.choice for e in every}) == 22
    # ranked fastest first, the least memory first among equally fast
    keys = [(e.time.step_s, e.memory.total_bytes) for e in every]
    assert keys == sorted(keys)
    assert sorted(keys, key=lambda k: k[1]) != keys  # not the order of memory alone
    # the two 1F1B refusals are one kind: the first kept (checkpoint none, the first tried)
    assert [(r.choice, r.reason, r.detail) for r in plan.rejected] == [
        (LayoutChoice(dp=1, tp=1, pp=2, micro_batch=2, accumulation=1, schedule="1f1b",
                      checkpoint="none", stage_layers=(1, 1)),
         "divisibility", "1f1b needs a micro-batch per stage at least; 1 < 2 stages")]


def test_the_plans_fields() -> None:
    plan = _plan()
    assert (plan.model, plan.hardware, plan.count, plan.seq_len) == ("tiny", "h100-sxm", 2, 16)
    assert (plan.global_batch_seqs, plan.global_batch_tokens) == (2, 32)  # 2 · 16
    # the defaults: bf16 master weights, AdamW, flash attention, the chip's efficiency
    assert (plan.precision, plan.optimizer, plan.attention) == ("bf16-master", "adamw",
                                                                "flash")
    assert plan.efficiency is None and plan.tokens is None and plan.max_pp is None
    assert plan.peak_flop_per_s == H100.peak_flop_per_s("bf16")
    assert plan.budget_bytes == 1e10
    assert plan.reserve == ""  # a budget given: no reserve taken off the device
    assert plan.fixed is None and plan.lora is None
    assert plan.step == FULL_FINE_TUNE
    setup = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=2, budget_bytes=1e10)
    # a dense reference model, no adapters: the closed form's four lines and the pipelines'
    assert plan.assumptions == (*ASSUMPTIONS, _pipelines(setup))
    assert plan.best == plan.ranked[0]


def test_no_budget_takes_the_devices_reserve_off() -> None:
    plan = plan_layouts(TINY, H100, 2, seq_len=16, global_batch_seqs=2)
    assert plan.reserve == device_headroom(2).describe()
    assert plan.budget_bytes == device_headroom(2).largest_peak(H100.memory_bytes)


def test_a_moe_plan_adds_the_experts_assumption() -> None:
    moe = get_preset("tiny-moe")
    plan = plan_layouts(moe, H100, 2, seq_len=16, global_batch_seqs=2, budget_bytes=1e10)
    assert plan.assumptions[-1] == EXPERTS_ASSUMPTION
    assert len(plan.assumptions) == len(ASSUMPTIONS) + 2  # the pipelines', the experts'


def test_a_fixed_plan_keeps_its_dimensions() -> None:
    assert _plan(fixed=FixedDims(dp=2)).fixed == FixedDims(dp=2)
    assert _plan(fixed=FixedDims()).fixed is None  # nothing given: nothing fixed


def test_top_and_tokens_are_checked() -> None:
    with pytest.raises(InputError) as caught:
        _plan(top=0)
    assert str(caught.value) == "top must be a whole number from 1 to 10,000, got 0"
    with pytest.raises(InputError) as caught:
        _plan(top=10_001)
    assert str(caught.value) == "top must be a whole number from 1 to 10,000, got 10001"
    assert len(_plan(top=10_000).ranked) == 22  # every feasible one
    with pytest.raises(InputError) as caught:
        _plan(tokens=0.0)
    assert str(caught.value) == "tokens must be a positive number, got 0.0"
    assert _plan(tokens=1e9).tokens == 1e9


def _no_layout(**kwargs: object) -> str:
    with pytest.raises(NoLayoutError) as caught:
        plan_layouts(TINY, H100, 8, seq_len=16, budget_bytes=1e10,
                     **kwargs)  # type: ignore[arg-type]
    return str(caught.value)


def test_a_global_batch_no_layout_takes() -> None:
    # 8 devices, TP and PP at most 2 each (4 heads' tp 4 misses the 2 key/value heads; 2
    # layers): DP is 2 at least
    assert _no_layout(global_batch_seqs=1) == (
        "tiny on 8 × h100-sxm: the global batch binds, 1 sequence is smaller than the "
        "smallest data-parallel degree the layouts leave, 2; use a global batch that is a "
        "multiple of 2 sequences, or fewer devices")
    assert _no_layout(global_batch_seqs=3) == (
        "tiny on 8 × h100-sxm: the global batch binds, 3 sequences is not a multiple of the "
        "smallest data-parallel degree the layouts leave, 2; use a global batch that is a "
        "multiple of 2 sequences, or fewer devices")


def test_a_global_batch_refusal_is_kept_with_its_words() -> None:
    # 3 sequences over 2 devices: DP 2 refused (3 % 2 = 1), the DP 1 layouts pass
    plan = _plan(batch=3)
    assert plan.rejected_by_reason["global batch"] == 1
    assert [(r.choice, r.detail) for r in plan.rejected if r.reason == "global batch"] == [
        (LayoutChoice(dp=2, tp=1, pp=1),
         "3 sequences is not a multiple of the data-parallel degree 2")]
    plan = _plan(count=4, batch=1)  # DP 4 (and DP 2 of TP 2 or PP 2) above 1 sequence
    assert [r.detail for r in plan.rejected if r.reason == "global batch"] == [
        "1 sequence is smaller than the data-parallel degree 4"]


def test_a_fixed_accumulation_that_splits_no_rank() -> None:
    # 16 sequences over 8 devices: DP 8 (the first degrees met: TP 1, PP 1) has 2 a rank,
    # which do not split into 3 micro-batches; nor do DP 4's 4 or DP 2's 8
    assert _no_layout(global_batch_seqs=16, fixed=FixedDims(accumulation=3)) == (
        "tiny on 8 × h100-sxm with 3 micro-batches (fixed by you): global batch binds, 2 "
        "sequences a data-parallel rank (DP 8) do not split into 3 micro-batches; fix "
        "fewer dimensions or others")
    plan = _plan(batch=4, fixed=FixedDims(accumulation=2))
    # DP 2: 2 sequences a rank in 2 micro-batches of 1; DP 1: 4 in 2 of 2
    assert {(e.choice.dp, e.choice.micro_batch, e.choice.accumulation)
            for e in plan.ranked} == {(2, 1, 2), (1, 2, 2)}


def test_a_fixed_shard_group_no_dp_leaves() -> None:
    # a shard group of 2: DP 2 takes it (ZeRO-1, 2, 3); DP 1 of PP 2 or TP 2 leaves none
    plan = _plan(fixed=FixedDims(shard=2))
    refused = [(r.choice, r.detail) for r in plan.rejected if r.reason == "divisibility"]
    # PP 2 (DP 1) met first
    assert (LayoutChoice(dp=1, tp=1, pp=2), "DP 1 leaves no shard group of 2") in refused
    assert {e.choice.dp for e in plan.ranked} == {2}
    plan = _plan(fixed=FixedDims(zero=1))
    details = [r.detail for r in plan.rejected if r.reason == "divisibility"]
    assert "DP 1 leaves no shard group above 1 rank for ZeRO-1" in details


def test_the_options_reach_the_search() -> None:
    plan = _plan(precision="fp32", optimizer="sgd")
    assert (plan.precision, plan.optimizer) == ("fp32", "sgd")
    # a share of the peak given: every layout priced at it, not at the chip's curve
    plan = _plan(efficiency=0.5)
    assert plan.efficiency == 0.5
    assert {e.time.efficiency for e in plan.ranked} == {0.5}
    # eager attention adds checkpoint selective: 3 policies, not 2, for every layout
    # (22 · 3 / 2 = 33) and each 1F1B refusal (2 · 3 / 2 = 3)
    plan = _plan(attention="eager", top=10_000)
    assert (plan.feasible, plan.rejected_by_reason["divisibility"]) == (33, 3)
    assert plan.attention == "eager"
    # each layout priced with eager attention's s² scores kept (checkpoint none)
    eager = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=2, budget_bytes=1e10,
                       attention="eager")
    assert all(e == estimate(eager, e.choice) for e in plan.ranked)
    flash = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=2, budget_bytes=1e10)
    kept = next(e for e in plan.ranked if e.choice.checkpoint == "none")
    assert kept.memory.total_bytes > estimate(flash, kept.choice).memory.total_bytes
    # no pipeline: DP 2's 8 and TP 2's 8 layouts, no 1F1B to refuse
    plan = _plan(max_pp=1)
    assert (plan.feasible, plan.rejected_by_reason["divisibility"]) == (16, 0)
    assert plan.max_pp == 1


class _GPipeAlone(SchedulePricer):
    names = ("gpipe",)


def test_the_schedules_and_the_adapters_reach_the_search() -> None:
    # GPipe alone: PP 2's 4 GPipe layouts, no 1F1B's 2 and no refusal: 22 − 2 = 20
    plan = _plan(schedules=_GPipeAlone())
    assert (plan.feasible, plan.rejected_by_reason["divisibility"]) == (20, 0)
    assert "(gpipe; a forward" in plan.assumptions[len(ASSUMPTIONS)]
    lora = LoraShape(8, ("query", "value"))
    plan = _plan(lora=lora)
    assert plan.lora == lora
    assert plan.step == "LoRA fine-tune, r=8 on query, value"
    # the closed form's lines, the pipelines', then the fine-tune's
    assert plan.assumptions[len(ASSUMPTIONS) + 1:] == _fine_tune(lora)


def test_a_fraction_of_a_token_is_a_positive_number() -> None:
    assert _plan(tokens=0.5).tokens == 0.5


def test_a_refused_layout_keeps_its_sequence_parallelism() -> None:
    # SP fixed on 4 devices: TP 2 alone (TP 1 splits no sequence); PP 1 leaves DP 2, above
    # the 1 sequence: refused as TP 2 + SP; PP 2 leaves DP 1, which passes
    plan = _plan(count=4, batch=1, fixed=FixedDims(sp=True))
    assert [(r.choice, r.detail) for r in plan.rejected if r.reason == "global batch"] == [
        (LayoutChoice(dp=2, tp=2, pp=1, sp=True),
         "1 sequence is smaller than the data-parallel degree 2")]


def test_past_the_first_micro_batch_that_does_not_fit_none_does() -> None:
    # one device, 4 sequences: micro-batches 1, 2, 4 under checkpoints none and full, each
    # priced by rank_memory (the search's own pricing, asked directly); a budget of 1.6 MB
    # sits between the none policy's micro-batches 1 and 2 and below full's 4
    setup = plan_setup(TINY, H100, 1, seq_len=16, global_batch_seqs=4, budget_bytes=1.6e6)

    def choice(micro: int, checkpoint: str) -> LayoutChoice:
        return LayoutChoice(dp=1, tp=1, pp=1, micro_batch=micro, accumulation=4 // micro,
                            checkpoint=checkpoint)

    def memory(micro: int, checkpoint: str) -> float:
        return rank_memory(setup, choice(micro, checkpoint)).total_bytes

    assert memory(1, "none") <= 1.6e6 < memory(2, "none")
    assert memory(2, "full") <= 1.6e6 < memory(4, "full")
    plan = plan_layouts(TINY, H100, 1, seq_len=16, global_batch_seqs=4, budget_bytes=1.6e6)
    # feasible: none × 1, full × 1 and 2; refused: none × 2 (priced), none × 4 (past it,
    # not priced: infinite), full × 4 (priced)
    assert plan.feasible == 3 and plan.rejected_by_reason["memory per rank"] == 3
    assert plan.searched == 3 + 3
    refused = [(r.choice, r.detail, r.memory_bytes) for r in plan.rejected]
    # kept least first; a few MB print as 0.00 GB against a budget of 1.6e6 / 1e9 = 0.0016
    assert refused == [
        (choice(2, "none"), "0.00 GB > 0.0016 GB", memory(2, "none")),
        (choice(4, "full"), "0.00 GB > 0.0016 GB", memory(4, "full")),
        (choice(4, "none"), "more than 0.0 GB (micro-batch 2)", math.inf)]
    assert {(e.choice.micro_batch, e.choice.checkpoint) for e in plan.ranked} == {
        (1, "none"), (1, "full"), (2, "full")}


def test_a_layout_that_fits_its_budget_exactly_is_feasible() -> None:
    setup = plan_setup(TINY, H100, 1, seq_len=16, global_batch_seqs=4, budget_bytes=1e10)
    one = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=1, accumulation=4)
    exact = rank_memory(setup, one).total_bytes  # the budget: not more than it
    plan = plan_layouts(TINY, H100, 1, seq_len=16, global_batch_seqs=4, budget_bytes=exact)
    assert one in {e.choice for e in plan.ranked}


def test_refused_layouts_keep_their_context_parallelism_and_accumulation() -> None:
    # CP 2 fixed on 4 devices: TP 1, PP 1 leaves DP 2, above the 1 sequence
    plan = _plan(count=4, batch=1, fixed=FixedDims(cp=2))
    assert [(r.choice, r.detail) for r in plan.rejected if r.reason == "global batch"] == [
        (LayoutChoice(dp=2, cp=2, tp=1, pp=1),
         "1 sequence is smaller than the data-parallel degree 2")]
    # the layouts that pass (DP 1 of TP 2 or PP 2) shard over the cp ranks: ZeRO-2 or 3
    assert {e.choice.zero for e in plan.ranked} == {2, 3}
    # 2 micro-batches fixed, 2 sequences over 2 devices: DP 2 has 1 a rank
    plan = _plan(fixed=FixedDims(accumulation=2))
    assert [(r.choice, r.detail) for r in plan.rejected if r.reason == "global batch"] == [
        (LayoutChoice(dp=2, tp=1, pp=1),
         "1 sequence a data-parallel rank (DP 2) do not split into 2 micro-batches")]


def test_a_pipeline_is_priced_at_its_floor_first_unless_its_schedule_is_known() -> None:
    # GPipe over 2 stages of tiny on 2 devices, 4 sequences: micro-batches 1, 2, 4 (m = 4,
    # 2, 1) under checkpoints none, then full.  Each number is rank_memory's, asked directly
    # with and without the floor (one micro-batch in flight a stage)
    budget = 8e5
    setup = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=4, budget_bytes=budget)

    def choice(micro: int, checkpoint: str) -> LayoutChoice:
        return LayoutChoice(dp=1, tp=1, pp=2, micro_batch=micro, accumulation=4 // micro,
                            checkpoint=checkpoint, schedule="gpipe", stage_layers=(1, 1))

    def memory(micro: int, checkpoint: str, floor: bool = False) -> float:
        return rank_memory(setup, choice(micro, checkpoint), floor=floor).total_bytes

    # none × 1: its floor fits, its m = 4 is priced and does not fit; full × 1 reuses those
    # figures (no floor asked) and fits; full × 2 (m = 2, not priced yet): its floor alone
    # passes the budget
    assert memory(1, "none", floor=True) <= budget < memory(1, "none")
    assert memory(1, "full") <= budget
    assert budget < memory(2, "full", floor=True)
    plan = plan_layouts(TINY, H100, 2, seq_len=16, global_batch_seqs=4, budget_bytes=budget,
                        fixed=FixedDims(pp=2, schedule="gpipe"))
    assert [e.choice for e in plan.ranked] == [choice(1, "full")]
    assert plan.rejected_by_reason["memory per rank"] == 5
    # least first; the three past a micro-batch that did not fit are infinite, in the
    # order met.  0.8 MB / 1e9 = 0.0008 GB
    assert [(r.choice, r.detail, r.memory_bytes) for r in plan.rejected] == [
        (choice(2, "full"), "at least 0.00 GB > 0.0008 GB", memory(2, "full", floor=True)),
        (choice(1, "none"), "0.00 GB > 0.0008 GB", memory(1, "none")),
        (choice(2, "none"), "more than 0.0 GB (micro-batch 1)", math.inf),
        (choice(4, "none"), "more than 0.0 GB (micro-batch 1)", math.inf),
        (choice(4, "full"), "more than 0.0 GB (micro-batch 2)", math.inf)]


def test_a_known_schedule_is_priced_in_full_even_where_its_floor_would_not_fit() -> None:
    # tiny-moe (6 experts) on 4 devices fixed at DP 2 · PP 2, GPipe, micro-batch 1 (2 a
    # rank): the shardings and expert degrees in the search's order, (ZeRO, group, EP):
    # (0, 1, 1), (0, 1, 2), (1, 2, 1), (2, 2, 1), (2, 2, 2), (3, 2, 1), (3, 2, 2)
    moe = get_preset("tiny-moe")
    budget = 8e5
    setup = plan_setup(moe, H100, 4, seq_len=16, global_batch_seqs=4, budget_bytes=budget)

    def choice(zero: int, shard: int, ep: int) -> LayoutChoice:
        return LayoutChoice(dp=2, tp=1, pp=2, zero=zero, shard=shard, micro_batch=1,
                            accumulation=2, schedule="gpipe", stage_layers=(1, 1), ep=ep)

    def memory(zero: int, shard: int, ep: int, floor: bool = False) -> float:
        return rank_memory(setup, choice(zero, shard, ep), floor=floor).total_bytes

    # the first four fail at their floors; (2, 2, 2) passes it and fits, pricing GPipe's
    # figures; (3, 2, 1)'s floor would not pass, but the figures are known: priced in full,
    # it does not fit either; (3, 2, 2) fits
    for degrees in ((0, 1, 1), (0, 1, 2), (1, 2, 1), (2, 2, 1)):
        assert memory(*degrees, floor=True) > budget
    assert memory(2, 2, 2) <= budget and memory(3, 2, 2) <= budget
    assert budget < memory(3, 2, 1, floor=True) < memory(3, 2, 1)
    plan = plan_layouts(moe, H100, 4, seq_len=16, global_batch_seqs=4, budget_bytes=budget,
                        fixed=FixedDims(dp=2, pp=2, schedule="gpipe", checkpoint="none",
                                        accumulation=2))
    assert {e.choice for e in plan.ranked} == {choice(2, 2, 2), choice(3, 2, 2)}
    refused = {r.choice: (r.detail, r.memory_bytes) for r in plan.rejected}
    assert refused[choice(3, 2, 1)] == ("0.00 GB > 0.0008 GB", memory(3, 2, 1))
    assert refused[choice(2, 2, 1)] == ("at least 0.00 GB > 0.0008 GB",
                                        memory(2, 2, 1, floor=True))


# 2^31 − 1 is prime: a rank of 2 · (2^31 − 1) sequences splits into micro-batches of 1, 2,
# 2^31 − 1 and twice that alone, so the first that does not fit is priced at ~1e17 bytes,
# where dividing by 1e9 and by 1,000,000,001 differ in the printed digits (~0.1 GB); the
# budget, 1,000,005,001 B, prints as 1.00001 GB by :g (over 1,000,000,001: 1)
PRIME = 2_147_483_647
LONG = dataclasses.replace(TINY, context_length=8192)


def test_a_huge_refusal_prints_its_gigabytes_by_1e9() -> None:
    budget = 1_000_005_001.0
    setup = plan_setup(LONG, H100, 1, seq_len=8192, global_batch_seqs=2 * PRIME,
                       budget_bytes=budget)
    first = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=PRIME, accumulation=2)
    priced = rank_memory(setup, first).total_bytes
    assert priced > 1e17  # 1e17 / 1e9 − 1e17 / 1,000,000,001 ≈ 0.1 GB
    plan = plan_layouts(LONG, H100, 1, seq_len=8192, global_batch_seqs=2 * PRIME,
                        budget_bytes=budget, fixed=FixedDims(checkpoint="none"))
    assert [(r.choice, r.detail, r.memory_bytes) for r in plan.rejected] == [
        (first, f"{priced / 1e9:.2f} GB > 1.00001 GB", priced),
        (LayoutChoice(dp=1, tp=1, pp=1, micro_batch=2 * PRIME, accumulation=1),
         f"more than {priced / 1e9:.1f} GB (micro-batch {PRIME})", math.inf)]


def test_a_huge_floor_prints_its_gigabytes_by_1e9() -> None:
    # 1F1B over 2 stages: micro-batches 1 and 2 (m = 2 · PRIME and PRIME) hold 2 and 1 in
    # flight and fit; micro-batch PRIME (m = 2), not priced yet, fails at its floor
    budget = 1_000_005_001.0
    setup = plan_setup(LONG, H100, 2, seq_len=8192, global_batch_seqs=2 * PRIME,
                       budget_bytes=budget)
    first = LayoutChoice(dp=1, tp=1, pp=2, micro_batch=PRIME, accumulation=2,
                         schedule="1f1b", stage_layers=(1, 1))
    floor = rank_memory(setup, first, floor=True).total_bytes
    assert floor > 5e16  # 5e16 / 1e9 − 5e16 / 1,000,000,001 ≈ 0.05 GB
    plan = plan_layouts(LONG, H100, 2, seq_len=8192, global_batch_seqs=2 * PRIME,
                        budget_bytes=budget,
                        fixed=FixedDims(pp=2, schedule="1f1b", checkpoint="none"))
    assert [(r.choice, r.detail, r.memory_bytes) for r in plan.rejected] == [
        (first, f"at least {floor / 1e9:.2f} GB > 1.00001 GB", floor),
        (LayoutChoice(dp=1, tp=1, pp=2, micro_batch=2 * PRIME, accumulation=1,
                      schedule="1f1b", stage_layers=(1, 1)),
         f"more than {floor / 1e9:.1f} GB (micro-batch {PRIME})", math.inf)]
    # the digits those formats print differ from a division by 1,000,000,001
    assert f"{floor / 1e9:.1f}" != f"{floor / 1_000_000_001:.1f}"


def test_a_floor_equal_to_the_budget_passes_to_the_full_pricing() -> None:
    # GPipe over 2 stages, one micro-batch of 4 (m = 1): its floor, one micro-batch in
    # flight a stage, is its whole memory; a budget of exactly that fits (not more than it)
    setup = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=4, budget_bytes=1e10)
    one = LayoutChoice(dp=1, tp=1, pp=2, micro_batch=4, accumulation=1, schedule="gpipe",
                       stage_layers=(1, 1))
    floor = rank_memory(setup, one, floor=True).total_bytes
    assert floor == rank_memory(setup, one).total_bytes
    plan = plan_layouts(TINY, H100, 2, seq_len=16, global_batch_seqs=4, budget_bytes=floor,
                        fixed=FixedDims(pp=2, schedule="gpipe", accumulation=1,
                                        checkpoint="none"))
    assert [e.choice for e in plan.ranked] == [one]


def test_the_frontier_carries_the_training_days_too() -> None:
    plan = _plan(tokens=1e9)
    # the fastest layout (least memory among the fastest) opens the frontier
    assert plan.frontier[0] == plan.ranked[0]
    assert all(e.train_days is not None and e.train_days > 0 for e in plan.frontier)


def test_each_micro_batch_a_schedule_refuses_is_counted() -> None:
    # 1F1B over 4 stages of a 4-layer tiny on 4 devices, 4 sequences: micro-batches 1, 2, 4
    # make m = 4, 2, 1; m = 2 and m = 1 are below the 4 stages: both refused.  (TP 4,
    # beside them, misses the 2 key/value heads; TP 2 leaves 2 ranks, no PP 4)
    four = dataclasses.replace(TINY, n_layers=4)
    plan = plan_layouts(four, H100, 4, seq_len=16, global_batch_seqs=4, budget_bytes=1e10,
                        fixed=FixedDims(pp=4, schedule="1f1b", checkpoint="none"))
    assert plan.rejected_by_reason["divisibility"] == 2 + 1
    assert [(e.choice.micro_batch, e.choice.accumulation) for e in plan.ranked] == [(1, 4)]


def test_sequence_parallelism_leaves_the_experts_unsplit() -> None:
    # tiny-moe on 4 devices with TP 2 + SP fixed: DP 2 takes no expert parallelism under SP
    moe = get_preset("tiny-moe")
    plan = plan_layouts(moe, H100, 4, seq_len=16, global_batch_seqs=4, budget_bytes=1e10,
                        fixed=FixedDims(tp=2, sp=True), top=10_000)
    assert plan.ranked and {e.choice.ep for e in plan.ranked} == {1}


def test_the_smallest_dp_is_named_though_a_larger_one_is_refused_last() -> None:
    # a 4-layer tiny on 24 devices at seq 16,384 (cp 2 leaves 8,192 tokens a rank): the
    # degrees end at TP 2 · PP 4 (3 ranks left: cp 2 does not divide them, cp 3 cuts 16,384
    # into no 6 equal chunks: DP 3), but TP 2 · PP 3 · CP 2 left DP 2 before it; 1 sequence
    # is below every DP
    four = dataclasses.replace(TINY, n_layers=4, context_length=16_384)
    with pytest.raises(NoLayoutError) as caught:
        plan_layouts(four, H100, 24, seq_len=16_384, global_batch_seqs=1, budget_bytes=1e10)
    assert str(caught.value) == (
        "tiny on 24 × h100-sxm: the global batch binds, 1 sequence is smaller than the "
        "smallest data-parallel degree the layouts leave, 2; use a global batch that is a "
        "multiple of 2 sequences, or fewer devices")
