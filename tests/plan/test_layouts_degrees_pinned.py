"""layouts.py's enumeration of degrees pinned by hand: which (dp, cp, tp, pp, sp) it yields,
which it tallies as refused (the layout named, the detail, the count of each), the
checkpoint policies searched per attention kernel, and the Pareto walk's strict ``<``."""

from __future__ import annotations

import dataclasses

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import LoraShape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import FixedDims, LayoutChoice, PlanSetup
from tensorledger.plan.layouts import (
    _checkpoints,
    _cps,
    _degrees,
    _schedules,
    _shardings,
    _Tally,
    pareto_frontier,
)
from tensorledger.plan.pipeline import SchedulePricer
from tests.plan.made_up import made_up_profile


def _setup(config: object, hardware: str, count: int) -> PlanSetup:
    return PlanSetup(config, get_hardware(hardware), count, 16, 8,  # type: ignore[arg-type]
                     resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)


def _refused(tally: _Tally) -> list[tuple[LayoutChoice, str]]:
    return [(r.choice, r.detail) for r in tally.kept["divisibility"]]


def test_a_chip_with_no_node_size_is_a_node_of_one() -> None:
    # rtx-4090's catalog entry gives no devices_per_node: one device a node, so tp 2, 4 and 8
    # (divisors of 8) all span nodes; tp 1 leaves 8 ranks: pp 1 (dp 8) and pp 2 (dp 4) of
    # the tiny model's 2 layers, pp 4 (dp 2) and pp 8 (dp 1) exceed them.  seq 16 <
    # MIN_CP_TOKENS: cp 1 alone; tp 1: no sequence parallelism
    tally = _Tally()
    yielded = list(_degrees(_setup(get_preset("tiny"), "rtx-4090", 8), tally, FixedDims()))
    assert yielded == [(8, 1, 1, 1, False), (4, 1, 1, 2, False)]
    assert tally.counts["divisibility"] == 5  # pp 4, pp 8, tp 2, tp 4, tp 8
    # one of each kind kept, in the order met (tp ascending): tp 1's pp 4, then tp 2's
    # (the others are the same words)
    assert _refused(tally) == [
        (LayoutChoice(dp=2, tp=1, pp=4), "pp 4 exceeds the 2 layers"),
        (LayoutChoice(dp=1, tp=2, pp=1), "tp 2 spans nodes (1 devices per node)")]
    # the rejection table's row: 8 // 4 = 2 ranks of data parallelism, a whole number
    assert tally.kept["divisibility"][0].choice.describe() == "DP 2 · PP 4 none"


def test_a_tp_that_does_not_divide_names_the_size_it_misses() -> None:
    # tiny: 4 heads, 2 key/value heads; h100's node of 8 holds every tp of 8 devices.  tp 4
    # misses the 2 key/value heads, tp 8 the 4 attention heads (the first size asked)
    tally = _Tally()
    list(_degrees(_setup(get_preset("tiny"), "h100", 8), tally, FixedDims()))
    refused = _refused(tally)
    assert (LayoutChoice(dp=1, tp=4, pp=1),
            "tp 4 does not divide the 2 key/value heads") in refused
    assert (LayoutChoice(dp=1, tp=8, pp=1),
            "tp 8 does not divide the 4 attention heads") in refused
    # tp 2 divides all: 8 / 2 = 4 ranks left, pp 1 gives dp 4, with and without SP (the
    # 16 tokens are a multiple of 2)
    yielded = list(_degrees(_setup(get_preset("tiny"), "h100", 8), _Tally(), FixedDims()))
    assert (4, 1, 2, 1, False) in yielded and (4, 1, 2, 1, True) in yielded
    assert (8, 1, 1, 1, True) not in yielded  # no SP at tp 1


def test_sp_refused_where_tp_does_not_divide_a_ranks_tokens() -> None:
    # tp 2 and cp 2 fixed on 4 devices, seq 6: 4 / 2 = 2 ranks left; pp 1: cp 2 leaves
    # dp 1 and 6 // 2 = 3 tokens a rank, which tp 2 does not divide: SP refused, no SP
    # searched.  pp 2 leaves 1 rank, which cp 2 does not divide: nothing
    setup = PlanSetup(get_preset("tiny"), get_hardware("h100"), 4, 6, 8,
                      resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)
    tally = _Tally()
    yielded = list(_degrees(setup, tally, FixedDims(tp=2, cp=2)))
    assert yielded == [(1, 2, 2, 1, False)]
    assert tally.counts["divisibility"] == 1
    assert _refused(tally) == [
        (LayoutChoice(dp=1, cp=2, tp=2, pp=1, sp=True),
         "sp: tp 2 does not divide the 3 tokens of a rank's sequence")]


def test_a_fixed_dp_skips_a_cp_that_leaves_another_and_tries_the_next() -> None:
    # tiny at seq 16,384 on 2 devices, dp fixed at 1.  tp 1, pp 1: cp 1 (dp 2, skipped) and
    # cp 2 (16,384 % 4 = 0, 8,192 tokens a rank >= MIN_CP_TOKENS: dp 1); pp 2: 1 rank,
    # cp 1, dp 1; tp 2: 1 rank, dp 1, with and without SP (16,384 % 2 = 0)
    setup = PlanSetup(get_preset("tiny"), get_hardware("h100"), 2, 16_384, 8,
                      resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)
    yielded = list(_degrees(setup, _Tally(), FixedDims(dp=1)))
    assert yielded == [(1, 2, 1, 1, False), (1, 1, 1, 2, False), (1, 1, 2, 1, False),
                       (1, 1, 2, 1, True)]



def test_a_model_with_no_tp_plan_refuses_every_tp_above_one() -> None:
    # no tensor-parallel plan: tp 2 and tp 4 both refused (each counted), tp 1 searched with
    # pp 1, 2 and 4 (all within the 4 layers); a profile searches cp 1 alone
    tally = _Tally()
    yielded = list(_degrees(_setup(made_up_profile(), "h100", 4), tally, FixedDims()))
    assert yielded == [(4, 1, 1, 1, False), (2, 1, 1, 2, False), (1, 1, 1, 4, False)]
    assert tally.counts["divisibility"] == 2
    assert _refused(tally) == [
        (LayoutChoice(dp=1, tp=2, pp=1), "tp 2: made-up has no tensor-parallel plan")]


def test_eager_attention_searches_selective_checkpointing_too() -> None:
    assert _checkpoints("eager") == ("none", "selective", "full")
    assert _checkpoints("flash") == ("none", "full")  # no s² scores to drop
    assert _checkpoints("eager", "full") == ("full",)


def test_the_frontier_drops_a_slower_point_of_the_same_memory() -> None:
    # b is slower than a and needs no less memory (5 = 5): a beats it on both
    assert pareto_frontier([(1.0, 5.0, "a"), (2.0, 5.0, "b"), (3.0, 4.0, "c")]) == ["a", "c"]


def _long(config: object, seq_len: int = 16_384, **kwargs: object) -> PlanSetup:
    return PlanSetup(config, get_hardware("h100"), 2, seq_len, 8,  # type: ignore[arg-type]
                     resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12,
                     **kwargs)  # type: ignore[arg-type]


def test_context_parallelism_is_searched_for_a_reference_model_under_flash_alone() -> None:
    # 2 ranks at seq 16,384: cp 2 cuts it into 4 chunks (16,384 % 4 = 0) of 8,192 tokens a
    # rank (>= MIN_CP_TOKENS), so a reference model under flash attention searches cp 1, 2
    assert _cps(_long(get_preset("tiny")), 2, FixedDims()) == (1, 2)
    # eager attention, a LoRA fine-tune, a measured profile: cp 1 alone
    assert _cps(_long(get_preset("tiny"), attention="eager"), 2, FixedDims()) == (1,)
    lora = LoraShape(8, ("query", "value"))
    assert _cps(_long(get_preset("tiny"), lora=lora), 2, FixedDims()) == (1,)
    assert _cps(_long(made_up_profile()), 2, FixedDims()) == (1,)
    # 16,386 = 2 · 8,193: cp 2 would leave 8,193 tokens a rank, but 16,386 % 4 = 2: no
    # 4 equal chunks, so cp 1 alone
    assert _cps(_long(get_preset("tiny"), seq_len=16_386), 2, FixedDims()) == (1,)
    # a fixed cp that does not divide the ranks: none
    assert _cps(_long(get_preset("tiny")), 3, FixedDims(cp=2)) == ()


def test_shardings_without_context_parallelism_start_with_plain_dp() -> None:
    # dp 4, nothing fixed, cp left at its default (1): plain DP (ZeRO-0 over 1), then
    # ZeRO-1, 2, 3 over each shard group above 1 (2 and 4)
    assert list(_shardings(4, FixedDims())) == [
        (0, 1), (1, 2), (2, 2), (3, 2), (1, 4), (2, 4), (3, 4)]
    # a shard group fixed at 1 is plain DP alone (ZeRO over 1 rank shards nothing)
    assert list(_shardings(4, FixedDims(shard=1))) == [(0, 1)]
    assert list(_shardings(4, FixedDims(zero=0))) == [(0, 1)]
    assert list(_shardings(4, FixedDims(shard=2))) == [(1, 2), (2, 2), (3, 2)]
    assert list(_shardings(4, FixedDims(zero=3, shard=4))) == [(3, 4)]


def test_shardings_under_context_parallelism_are_fsdp_over_every_group() -> None:
    # cp 2: ZeRO-2 and 3 alone, over each divisor of dp 4 (1 too: the cp ranks shard)
    assert list(_shardings(4, FixedDims(), cp=2)) == [
        (2, 1), (3, 1), (2, 2), (3, 2), (2, 4), (3, 4)]
    assert list(_shardings(4, FixedDims(shard=2), cp=2)) == [(2, 2), (3, 2)]
    assert list(_shardings(4, FixedDims(shard=3), cp=2)) == []  # 4 % 3 = 1
    assert list(_shardings(4, FixedDims(zero=2), cp=2)) == [(2, 1), (2, 2), (2, 4)]
    assert list(_shardings(4, FixedDims(zero=3), cp=2)) == [(3, 1), (3, 2), (3, 4)]
    assert list(_shardings(4, FixedDims(zero=1), cp=2)) == []  # ZeRO-1 is no FSDP


class _Interleaved(SchedulePricer):
    names = ("gpipe", "interleaved-1f1b")  # _schedules reads the names alone


def _pipelined(config: object, pricer: SchedulePricer) -> PlanSetup:
    return PlanSetup(config, get_hardware("h100"), 4, 16, 8,  # type: ignore[arg-type]
                     resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12,
                     schedules=pricer)


def test_no_pipeline_is_schedule_none_unless_a_schedule_is_fixed() -> None:
    setup, point = _pipelined(get_preset("tiny"), SchedulePricer()), LayoutChoice(4, 1, 1)
    assert list(_schedules(setup, 1, FixedDims(), _Tally(), point)) == [("none", 1, ())]
    assert list(_schedules(setup, 1, FixedDims(schedule="1f1b"), _Tally(), point)) == []


def test_a_schedule_of_more_stages_than_layers_is_refused() -> None:
    # tiny's 2 layers over pp 2: GPipe's 2 · 1 = 2 stages fit (not more than 2), cut 1, 1;
    # interleaved 1F1B's chunks 2 and 4 make 4 and 8 stages: both refused (one kept: the
    # same words, numbers aside)
    setup = _pipelined(get_preset("tiny"), _Interleaved())
    point, tally = LayoutChoice(dp=2, tp=1, pp=2), _Tally()
    assert list(_schedules(setup, 2, FixedDims(), tally, point)) == [("gpipe", 1, (1, 1))]
    assert tally.counts["divisibility"] == 2
    assert _refused(tally) == [
        (LayoutChoice(dp=2, tp=1, pp=2, schedule="interleaved-1f1b", chunks=2),
         "interleaved-1f1b × 2: 4 stages for 2 layers")]


def test_fixed_stage_layers_are_the_one_cut() -> None:
    # 5 layers over pp 2: the search would cut 2, 3 and more; fixed 1, 4 is the one taken.
    # The chunks the cut implies, 2 stages / pp 2 = 1, leave interleaved 1F1B none
    five = dataclasses.replace(get_preset("tiny"), n_layers=5)
    setup = _pipelined(five, _Interleaved())
    fixed = FixedDims(pp=2, stage_layers=(1, 4))
    assert list(_schedules(setup, 2, fixed, _Tally(), LayoutChoice(2, 1, 2))) == [
        ("gpipe", 1, (1, 4))]


def test_a_fixed_pp_that_does_not_divide_the_ranks_left_is_no_layout() -> None:
    # tiny on 4 devices, PP 4 fixed: TP 1 leaves 4 ranks, PP 4 exceeds the 2 layers
    # (refused); TP 2 leaves 2, which PP 4 does not divide (neither searched nor refused);
    # TP 4 misses the 2 key/value heads (refused)
    tally = _Tally()
    assert list(_degrees(_setup(get_preset("tiny"), "h100", 4), tally, FixedDims(pp=4))) == []
    assert tally.counts["divisibility"] == 2
