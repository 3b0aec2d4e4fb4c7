"""FixedDims' refusals pinned word for word, each beside the nearest layout it lets through:
degrees against the count (and the context-parallel ranks DP · TP · PP leave), the pipeline,
sequence parallelism, context parallelism, expert parallelism, the shard group and ZeRO,
selective checkpointing; then the refusals of the fields themselves.  Every message is
written out by hand from the numbers given."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import LoraShape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import FixedDims, PlanSetup
from tests.plan.made_up import made_up_profile

COUNT = "DP · CP · TP · PP must equal --count"


def _setup(count: int = 8, seq: int = 16, config: object = None, **kwargs: object
           ) -> PlanSetup:
    # tiny: 2 layers; no experts
    return PlanSetup(config or get_preset("tiny"), get_hardware("h100"),  # type: ignore[arg-type]
                     count, seq, 8, resolve_precision("fp32"), resolve_optimizer("adamw"),
                     1e12, **kwargs)  # type: ignore[arg-type]


def _refusal(fixed: FixedDims, setup: PlanSetup) -> str:
    with pytest.raises(InputError) as caught:
        fixed.check(setup)
    return str(caught.value)


def test_whole_degrees_must_make_the_count() -> None:
    # DP 4 · TP 2 · PP 2 = 16 > 8
    assert _refusal(FixedDims(dp=4, tp=2, pp=2), _setup()) == (
        f"DP 4 · TP 2 · PP 2 = 16 devices, not the 8 devices; {COUNT}")
    # CP given: the product must be the count, 2 · 1 · 2 · 1 = 4 ≠ 8
    assert _refusal(FixedDims(dp=2, cp=1, tp=2, pp=1), _setup()) == (
        f"DP 2 · CP 1 · TP 2 · PP 1 = 4 devices, not the 8 devices; {COUNT}")
    FixedDims(dp=2, cp=2, tp=2, pp=1).check(_setup())  # 2 · 2 · 2 · 1 = 8
    FixedDims(dp=2, tp=2, pp=2).check(_setup())  # 2 · 2 · 2 = 8: no ranks left for cp


def test_the_ranks_whole_degrees_leave_are_context_parallel_where_the_search_takes_them(
        ) -> None:
    # DP 2 · TP 2 · PP 1 = 4 of 8: the other 2 could only be cp 2, and seq 16 leaves 8
    # tokens a rank, below MIN_CP_TOKENS (8,192)
    assert _refusal(FixedDims(dp=2, tp=2, pp=1), _setup()) == (
        f"DP 2 · TP 2 · PP 1 = 4 devices, not the 8 devices; {COUNT}")
    # seq 16,384 over cp 2: 16,384 % 4 = 0 and 8,192 tokens a rank (>= 8,192): taken
    FixedDims(dp=1, tp=2, pp=1).check(_setup(4, 16_384))
    # seq 16,388: 8,194 tokens a rank, but 16,388 % 4 = 0 too; 16,386 % 4 = 2: not cut
    FixedDims(dp=1, tp=2, pp=1).check(_setup(4, 16_388))
    assert _refusal(FixedDims(dp=1, tp=2, pp=1), _setup(4, 16_386)) == (
        f"DP 1 · TP 2 · PP 1 = 2 devices, not the 4 devices; {COUNT}")
    # DP 3 · TP 1 · PP 1 = 3 does not divide 8: no cp, and the next refusal names it
    assert _refusal(FixedDims(dp=3, tp=1, pp=1), _setup()) == (
        f"DP 3 · TP 1 · PP 1 does not divide the 8 devices; {COUNT}")


def test_some_degrees_must_divide_the_count() -> None:
    assert _refusal(FixedDims(tp=3), _setup()) == (
        f"TP 3 does not divide the 8 devices; {COUNT}")
    FixedDims(tp=2, pp=2).check(_setup())  # 4 divides 8


def test_the_pipeline_within_the_layers_and_max_pp() -> None:
    assert _refusal(FixedDims(pp=4), _setup()) == "PP 4 exceeds tiny's 2 layers"
    FixedDims(pp=2).check(_setup())  # 2 layers, 2 stages
    assert _refusal(FixedDims(pp=2), _setup(max_pp=1)) == "PP 2 is past --max-pp 1"
    FixedDims(pp=2).check(_setup(max_pp=2))
    # 1 + 2 = 3 blocks, not 2
    assert _refusal(FixedDims(pp=2, stage_layers=(1, 2)), _setup()) == (
        "stage layers 1,2 add up to 3 blocks, not tiny's 2")
    FixedDims(pp=2, stage_layers=(1, 1)).check(_setup())


def test_sp_needs_tp() -> None:
    assert _refusal(FixedDims(sp=True, tp=1), _setup()) == (
        "SP needs tensor parallelism: TP 1 splits no sequence")
    FixedDims(sp=True, tp=2).check(_setup())
    FixedDims(sp=False, tp=1).check(_setup())


def test_a_schedule_needs_a_pipeline_and_a_pricer_that_prices_it() -> None:
    assert _refusal(FixedDims(schedule="1f1b", pp=1), _setup()) == (
        "the 1f1b schedule needs a pipeline (PP above 1)")
    assert _refusal(FixedDims(chunks=2), _setup(max_pp=1)) == (
        "the multi-stage schedule needs a pipeline (PP above 1)")
    FixedDims(schedule="1f1b", pp=2).check(_setup())
    FixedDims(schedule="1f1b").check(_setup(max_pp=2))
    assert _refusal(FixedDims(schedule="zbv", pp=2), _setup()) == (
        "the zbv schedule is priced from torch's action lists, which this search was not "
        "given; priced: gpipe, 1f1b")



def test_context_parallelism_cuts_the_sequence_of_a_reference_model_under_flash() -> None:
    # cp 2 cuts a sequence into 2 · 2 = 4 chunks: 6 % 4 = 2
    assert _refusal(FixedDims(cp=2), _setup(seq=6)) == (
        "CP 2 cuts each sequence into 4 chunks (load-balanced for the causal mask); --seq 6 "
        "does not divide by 4")
    FixedDims(cp=2).check(_setup(seq=8))  # 8 % 4 = 0; a fixed cp needs no 8,192 tokens
    FixedDims(cp=1).check(_setup(seq=7))  # cp 1 cuts nothing
    lora = LoraShape(8, ("query", "value"))
    assert _refusal(FixedDims(cp=2), _setup(lora=lora)) == (
        "CP 2: context parallelism is not priced with --lora adapters yet; drop --cp or "
        "--lora")
    assert _refusal(FixedDims(cp=2), _setup(config=made_up_profile())) == (
        "CP 2: context parallelism is priced from the reference models' closed form; "
        "made-up is planned from its profile")
    assert _refusal(FixedDims(cp=2), _setup(attention="eager")) == (
        "CP 2: ring attention runs the fused kernel; drop --attention eager")
    assert _refusal(FixedDims(cp=2, zero=1), _setup()) == (
        "CP 2 shards the parameters over the context-parallel ranks (FSDP, ZeRO-2 or 3), "
        "not ZeRO-1")
    FixedDims(cp=2, zero=2).check(_setup())


MOE = get_preset("tiny-moe")  # 6 routed experts


def test_expert_parallelism_refusals() -> None:
    assert _refusal(FixedDims(ep=2), _setup()) == (
        "EP 2 shards routed experts; tiny has none: drop --ep")
    assert _refusal(FixedDims(ep=4), _setup(config=MOE)) == (
        "EP 4 does not divide tiny-moe's 6 routed experts; use an --ep that divides 6")
    assert _refusal(FixedDims(ep=3), _setup(config=MOE)) == (
        "EP 3 does not divide the 8 devices")
    assert _refusal(FixedDims(ep=2, cp=2), _setup(config=MOE)) == (
        "EP 2 beside CP 2 is not laid out (the trace refuses it): drop one")
    assert _refusal(FixedDims(ep=2, sp=True), _setup(config=MOE)) == (
        "EP 2 beside SP: the experts are whole on each tp rank, which routes the whole "
        "sequence; use --no-sp")
    assert _refusal(FixedDims(ep=2, zero=1), _setup(config=MOE)) == (
        "EP 2 beside ZeRO-1 is not laid out; use ZeRO 0, 2 or 3")
    for zero in (0, 2, 3):
        FixedDims(ep=2, zero=zero, cp=1).check(_setup(config=MOE))
    FixedDims(ep=1, cp=2).check(_setup(config=MOE))  # ep 1 is no expert parallelism
    # 12 devices: ep 2 divides them and the 6 experts, but not DP 3
    assert _refusal(FixedDims(ep=2, dp=3), _setup(12, config=MOE)) == (
        "EP 2 takes its ranks from the data-parallel ones: it does not divide DP 3")
    assert _refusal(FixedDims(ep=2, shard=3), _setup(12, config=MOE)) == (
        "EP 2 does not divide the shard group of 3 (FSDP shards the other parameters over "
        "fsdp · ep)")
    FixedDims(ep=2, shard=1).check(_setup(12, config=MOE))  # a group of 1 shards nothing
    assert _refusal(FixedDims(ep=3, shard=2), _setup(12, config=MOE)) == (
        "EP 3 does not divide the shard group of 2 (FSDP shards the other parameters over "
        "fsdp · ep)")
    FixedDims(ep=2, dp=4, shard=2).check(_setup(12, config=MOE))


def test_the_shard_group_and_the_zero_stage() -> None:
    assert _refusal(FixedDims(zero=0, shard=2), _setup()) == (
        "a shard group of 2 needs a ZeRO stage of 1 to 3, not ZeRO-0")
    FixedDims(zero=0, shard=1).check(_setup())
    assert _refusal(FixedDims(zero=2, shard=1), _setup()) == (
        "ZeRO-2 needs a shard group above 1 rank")
    assert _refusal(FixedDims(zero=2, shard=1, cp=1), _setup()) == (
        "ZeRO-2 needs a shard group above 1 rank")
    assert _refusal(FixedDims(zero=1, shard=1), _setup()) == (
        "ZeRO-1 needs a shard group above 1 rank")
    FixedDims(zero=2, shard=1, cp=2).check(_setup())  # the cp ranks are the group
    FixedDims(zero=2, shard=2).check(_setup())
    assert _refusal(FixedDims(dp=4, shard=3), _setup()) == (
        "a shard group of 3 does not divide DP 4")
    assert _refusal(FixedDims(shard=3), _setup()) == (
        "a shard group of 3 does not divide the 8 devices")
    # TP 2 leaves 8 / 2 = 4 data-parallel ranks: 4 % 3 = 1
    assert _refusal(FixedDims(tp=2, shard=3), _setup()) == (
        "a shard group of 3 does not divide the 4 data-parallel ranks TP 2 leave")
    FixedDims(tp=2, shard=4).check(_setup())
    assert _refusal(FixedDims(zero=1, dp=1), _setup()) == (
        "ZeRO-1 needs a data-parallel degree above 1, not DP 1")
    assert _refusal(FixedDims(zero=3, dp=1, cp=1), _setup()) == (
        "ZeRO-3 needs a data-parallel degree above 1, not DP 1")
    FixedDims(zero=2, dp=1, cp=2).check(_setup())  # sharded over the cp ranks
    FixedDims(zero=0, dp=1).check(_setup())
    FixedDims(zero=1, dp=2).check(_setup())


def test_selective_checkpointing_needs_eager_attention() -> None:
    assert _refusal(FixedDims(checkpoint="selective"), _setup()) == (
        "checkpoint selective is priced with eager attention only (flash keeps no scores to "
        "drop); add --attention eager")
    FixedDims(checkpoint="selective").check(_setup(attention="eager"))
    FixedDims(checkpoint="full").check(_setup())


def _field_refusal(**kwargs: object) -> str:
    with pytest.raises(InputError) as caught:
        FixedDims(**kwargs)  # type: ignore[arg-type]
    return str(caught.value)


def test_the_fields_refuse_what_no_layout_has() -> None:
    assert _field_refusal(dp=0) == "fixed dp must be a whole number from 1 to 1,048,576, got 0"
    assert _field_refusal(ep=True) == (
        "fixed ep must be a whole number from 1 to 1,048,576, got True")
    assert _field_refusal(cp=(1 << 20) + 1) == (
        "fixed cp must be a whole number from 1 to 1,048,576, got 1048577")
    FixedDims(tp=1 << 20)  # the largest count itself
    assert _field_refusal(zero=4) == "fixed ZeRO stage must be 0, 1, 2 or 3, got 4"
    assert _field_refusal(zero=True) == "fixed ZeRO stage must be 0, 1, 2 or 3, got True"
    assert _field_refusal(schedule="1F1B") == (
        "unknown schedule '1F1B'; the planner prices gpipe, 1f1b, interleaved-1f1b, "
        "looped-bfs, interleaved-zb, zbv")
    assert _field_refusal(schedule="1f1b", chunks=2) == (
        "1f1b runs one stage per rank; 2 chunks need one of interleaved-1f1b, looped-bfs, "
        "interleaved-zb, zbv")
    FixedDims(schedule="1f1b", chunks=1)
    assert _field_refusal(schedule="zbv", chunks=3) == (
        "zbv runs exactly 2 stages per rank (a V), not 3")
    FixedDims(schedule="zbv", chunks=2)
    FixedDims(schedule="looped-bfs", chunks=3)
    assert _field_refusal(checkpoint="some") == (
        "unknown checkpoint 'some'; known: none, selective, full")


def test_stage_layers_are_pp_times_chunks_stages_of_a_block_or_more() -> None:
    assert _field_refusal(stage_layers=(1, 1)) == (
        "stage layers cut a pipeline: fix its stages (--pp) too")
    assert _field_refusal(pp=2, stage_layers=(1, 0)) == (
        "stage layers 1,0 are not pp (2) × chunks stages of 1 block or more")
    assert _field_refusal(pp=2, stage_layers=(1, 1, 1)) == (  # 3 % 2 = 1
        "stage layers 1×3 are not pp (2) × chunks stages of 1 block or more")
    assert _field_refusal(pp=2, stage_layers=()) == (
        "stage layers  are not pp (2) × chunks stages of 1 block or more")
    assert _field_refusal(pp=2, chunks=2, stage_layers=(1, 1)) == (
        "stage layers give 2 stages, not pp × chunks = 4")
    fixed = FixedDims(pp=2, chunks=2, stage_layers=(1, 1, 1, 1))
    assert fixed.stage_chunks == 2
    # no chunks given: the stage layers imply 4 / 2 = 2; none of either: None
    assert FixedDims(pp=2, stage_layers=(1, 1, 1, 1)).stage_chunks == 2
    assert FixedDims(pp=2).stage_chunks is None
    assert FixedDims(chunks=3).stage_chunks == 3
    assert dataclasses.replace(fixed, chunks=None).stage_chunks == 2
