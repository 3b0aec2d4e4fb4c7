"""plan_accumulation pinned against its parts called one by one (plan_setup, rank_memory and
step_time of each split's LayoutChoice): every option it lists, the recipe it hands on, the
exact fit of the budget, its defaults and its refusals."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.accumulate import plan_accumulation
from tensorledger.plan.estimate import LayoutChoice, rank_memory, step_time
from tensorledger.plan.layouts import plan_setup

H100 = get_hardware("h100")
TINY = get_preset("tiny")


def _by_parts(count: int, zero: int, checkpoint: str, **recipe: object) -> list[tuple]:
    """Each split of 8 sequences over ``count`` ranks, priced through the estimate's parts."""
    setup = plan_setup(TINY, H100, count, seq_len=16, global_batch_seqs=8,
                       **recipe)  # type: ignore[arg-type]
    bound = dataclasses.replace(setup, efficiency=1.0)
    rows = []
    per_rank = 8 // count
    for micro in [d for d in range(1, per_rank + 1) if per_rank % d == 0]:
        choice = LayoutChoice(dp=count, tp=1, pp=1, zero=zero, shard=count if zero else 1,
                              micro_batch=micro, accumulation=per_rank // micro,
                              checkpoint=checkpoint)
        memory = rank_memory(setup, choice)
        time = step_time(setup, choice, memory)
        ideal = step_time(bound, choice, rank_memory(bound, choice))
        rows.append((micro, per_rank // micro, memory.activations_bytes + memory.logits_bytes,
                     memory.total_bytes, time.step_s, ideal.step_s, time.mfu, time.hfu))
    return rows


def _rows(plan) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [(o.micro_batch, o.accumulation, o.activation_bytes, o.memory_bytes, o.step_s,
             o.ideal_step_s, o.mfu, o.hfu) for o in plan.options]


@pytest.mark.parametrize(("count", "zero", "checkpoint", "recipe"), [
    (2, 0, "full", {"precision": "fp32", "optimizer": "sgd"}),
    (2, 2, "selective", {"attention": "eager"}),
    (2, 3, "none", {"attention": "eager"}),
    (1, 0, "none", {}),
])
def test_every_split_is_its_layout_priced(count: int, zero: int, checkpoint: str,
                                          recipe: dict[str, object]) -> None:
    plan = plan_accumulation(TINY, H100, seq_len=16, global_batch_seqs=8, count=count,
                             zero=zero, checkpoint=checkpoint, **recipe)  # type: ignore[arg-type]
    assert _rows(plan) == _by_parts(count, zero, checkpoint, **recipe)
    assert (plan.model, plan.hardware, plan.count, plan.zero, plan.checkpoint) == (
        "tiny", "h100-sxm", count, zero, checkpoint)


def test_the_defaults_are_one_rank_without_zero() -> None:
    plan = plan_accumulation(TINY, H100, seq_len=16, global_batch_seqs=8)
    assert (plan.count, plan.zero, plan.checkpoint) == (1, 0, "none")
    assert _rows(plan) == _by_parts(1, 0, "none")


def test_a_split_that_meets_the_budget_exactly_fits() -> None:
    # the budget set to the 8-sequence micro-batch's own peak: that split fits (<=)
    largest = _by_parts(1, 0, "none")[-1][3]
    plan = plan_accumulation(TINY, H100, seq_len=16, global_batch_seqs=8,
                             budget_bytes=largest)
    assert plan.options[-1].micro_batch == 8 and plan.options[-1].fits


@pytest.mark.parametrize("zero", [5, True, -1])
def test_zero_stages_are_0_to_3(zero: object) -> None:
    # refused before anything else is looked at: a sequence of 64 tokens, past tiny's 32,
    # would be refused next
    with pytest.raises(InputError, match="ZeRO stage must be 0, 1, 2 or 3"):
        plan_accumulation(TINY, H100, seq_len=64, global_batch_seqs=8, count=2,
                          zero=zero)  # type: ignore[arg-type]


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_each_zero_stage_is_taken(zero: int) -> None:
    assert plan_accumulation(TINY, H100, seq_len=16, global_batch_seqs=8, count=2,
                             zero=zero).zero == zero


def test_a_global_batch_that_does_not_split_over_the_ranks() -> None:
    # 9 sequences over 2 ranks: more sequences than ranks, but 9 is odd
    with pytest.raises(InputError, match="does not split"):
        plan_accumulation(TINY, H100, seq_len=16, global_batch_seqs=9, count=2)
