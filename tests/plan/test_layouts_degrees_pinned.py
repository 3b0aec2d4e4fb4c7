"""layouts.py's enumeration of degrees pinned by hand: which (dp, cp, tp, pp, sp) it yields,
which it tallies as refused (the layout named, the detail, the count of each), the
checkpoint policies searched per attention kernel, and the Pareto walk's strict ``<``."""

from __future__ import annotations

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import FixedDims, LayoutChoice, PlanSetup
from tensorledger.plan.layouts import _checkpoints, _degrees, _Tally, pareto_frontier
from tensorledger.plan.profile import ModelProfile, Split


def _setup(config: object, hardware: str, count: int) -> PlanSetup:
    return PlanSetup(config, get_hardware(hardware), count, 16, 8,  # type: ignore[arg-type]
                     resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)


def _refused(tally: _Tally) -> list[tuple[LayoutChoice, str]]:
    return [(r.choice, r.detail) for r in tally.kept["divisibility"]]


def test_a_chip_with_no_node_size_is_a_node_of_one() -> None:
    # rtx-4090's catalog entry gives no devices_per_node: one device a node, so tp 2 and 4
    # (divisors of 4) both span nodes; tp 1 leaves 4 ranks: pp 1 (dp 4) and pp 2 (dp 2) of
    # the tiny model's 2 layers, pp 4 exceeds them.  seq 16 < MIN_CP_TOKENS: cp 1 alone
    tally = _Tally()
    yielded = list(_degrees(_setup(get_preset("tiny"), "rtx-4090", 4), tally, FixedDims()))
    assert yielded == [(4, 1, 1, 1, False), (2, 1, 1, 2, False)]
    assert tally.counts["divisibility"] == 3  # tp 2, tp 4, pp 4
    # one of each kind kept, in the order met (tp ascending): tp 1's pp 4, then tp 2's
    # (tp 4's is the same words)
    assert _refused(tally) == [
        (LayoutChoice(dp=1, tp=1, pp=4), "pp 4 exceeds the 2 layers"),
        (LayoutChoice(dp=1, tp=2, pp=1), "tp 2 spans nodes (1 devices per node)")]


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


def _no_tp_plan() -> ModelProfile:
    return ModelProfile(name="made-up", source="by hand", seq_len=16, precision="fp32",
                        n_layers=4, d_model=8, vocab_size=100, context_length=512,
                        embedding=Split(0.0, 1000.0), block=Split(20.0, 280.0),
                        head=Split(500.0), block_flops_per_token=1800.0,
                        other_flops_per_token=3000.0, block_forward_flops_per_token=600.0,
                        other_forward_flops_per_token=1000.0,
                        largest_matmul_flops_per_token=200.0)


def test_a_model_with_no_tp_plan_refuses_every_tp_above_one() -> None:
    # no tensor-parallel plan: tp 2 and tp 4 both refused (each counted), tp 1 searched with
    # pp 1, 2 and 4 (all within the 4 layers); a profile searches cp 1 alone
    tally = _Tally()
    yielded = list(_degrees(_setup(_no_tp_plan(), "h100", 4), tally, FixedDims()))
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
