"""``serving_figures`` (roofline/decode.py) and ``module_times`` (roofline/modules.py) pinned on
predictions written out by hand, every field set apart from the others, where the mutation run
of issue 42 found them untested.  Each expectation is worked out in the comment beside it."""

from __future__ import annotations

import pytest

from tensorledger.roofline.decode import ServingFigures, serving_figures
from tensorledger.roofline.model import OpPrediction, RooflinePrediction, TimeTotal
from tensorledger.roofline.modules import ModuleTime, module_times


def _op(index: int, compute: float, memory: float, overhead: float, time: float,
        module: str = "m") -> OpPrediction:
    return OpPrediction(index=index, op="aten.mm.default", module=module, phase="forward",
                        category="matmul", compute_key="bf16", flops=10, bytes=20,
                        intensity_flop_per_byte=0.5, ridge_flop_per_byte=1.0,
                        compute_time_s=compute, memory_time_s=memory, overhead_s=overhead,
                        time_s=time, attained_flop_per_s=1.0, bound="memory",
                        ideal_time_s=time, ideal_bound="memory")


def _prediction(ops: tuple[OpPrediction, ...], time_s: float, bytes_: int) -> RooflinePrediction:
    return RooflinePrediction(hardware="x", ops=ops, flops=0, bytes=bytes_, time_s=time_s,
                              by_category=(), by_module=(), by_phase=(), tokens=None,
                              tokens_per_s=None, mfu_peak_key="bf16", mfu=0.0,
                              ideal_time_s=0.0, ideal_mfu=0.0, ideal_tokens_per_s=None,
                              basis="probed")


def test_serving_figures_sum_each_term_apart() -> None:
    # op 0: compute 2, memory 3, overhead 1, time 4 (max(2, 3) + 1);
    # op 1: compute 5, memory 1, overhead 0.5, time 5.5 (max(5, 1) + 0.5)
    ops = (_op(0, 2.0, 3.0, 1.0, 4.0), _op(1, 5.0, 1.0, 0.5, 5.5))
    f = serving_figures(_prediction(ops, 9.75, 123), batch=4, context=77)
    assert f.batch == 4 and f.context == 77
    assert f.launch_time_s == pytest.approx(1.5)  # 1 + 0.5
    assert f.compute_time_s == pytest.approx(7.0)  # 2 + 5
    assert f.memory_time_s == pytest.approx(4.0)  # 3 + 1
    assert f.streamed_time_s == pytest.approx(8.0)  # (4 − 1) + (5.5 − 0.5)
    assert f.eager_time_s == 9.75  # the prediction's own step time, not a sum of the ops
    assert f.bytes == 123
    assert f.bound == "compute"  # 7 of compute against 4 of memory
    assert f.tokens_per_s == pytest.approx(0.5)  # 4 sequences / 8 s
    assert f.tokens_per_s_per_user == pytest.approx(0.125)  # 1 / 8 s
    # the summary: 8 s a token, compute-bound, eager 9.75 s, batch 4
    assert repr(f) == "ServingFigures(8 s a token, compute-bound, eager 9.75 s, batch 4)"


def test_serving_figures_context_defaults_to_none_and_ties_are_memory_bound() -> None:
    # compute 3 against memory 3: memory ≥ compute, so "memory"
    f = serving_figures(_prediction((_op(0, 3.0, 3.0, 0.0, 3.0),), 3.0, 1), batch=2)
    assert f.context is None
    assert f.bound == "memory"
    # and memory above compute is memory-bound too (2 against 1)
    g = serving_figures(_prediction((_op(0, 1.0, 2.0, 0.0, 2.0),), 2.0, 1), batch=2)
    assert g.bound == "memory"


def test_an_op_cheaper_than_its_overhead_streams_for_nothing() -> None:
    # time 0.25 below its overhead 0.75 (no such op is predicted, but the floor is the rule):
    # it adds max(0.25 − 0.75, 0) = 0 to the streamed time; the other op adds 2 − 1 = 1
    ops = (_op(0, 0.0, 0.0, 0.75, 0.25), _op(1, 1.0, 1.0, 1.0, 2.0))
    f = serving_figures(_prediction(ops, 2.25, 0), batch=3)
    assert f.streamed_time_s == pytest.approx(1.0)
    assert f.launch_time_s == pytest.approx(1.75)


def test_a_step_of_no_time_gives_no_tokens() -> None:
    f = ServingFigures(batch=5, context=None, streamed_time_s=0.0, eager_time_s=0.0,
                       launch_time_s=0.0, compute_time_s=0.0, memory_time_s=0.0, bytes=0,
                       bound="memory")
    assert f.tokens_per_s == 0.0 and f.tokens_per_s_per_user == 0.0
    # a positive time is read: 5 / 2 and 1 / 2
    g = ServingFigures(batch=5, context=None, streamed_time_s=2.0, eager_time_s=0.0,
                       launch_time_s=0.0, compute_time_s=0.0, memory_time_s=0.0, bytes=0,
                       bound="memory")
    assert (g.tokens_per_s, g.tokens_per_s_per_user) == (2.5, 0.5)


def _total(name: str, scale: int) -> TimeTotal:
    # every field a different multiple of ``scale``, so a field read for another shows
    return TimeTotal(name=name, ops=1 * scale, flops=100, bytes=3 * scale,
                     time_s=4.0 * scale, share_of_step=0.01 * scale,
                     compute_bound_ops=5 * scale, memory_bound_ops=6 * scale,
                     overhead_bound_ops=7 * scale, ideal_time_s=0.5 * scale)


def test_repeated_modules_fold_with_every_field_summed() -> None:
    # three blocks of equal FLOPs (100 each) fold into one row; their other figures differ
    # (scales 1, 2, 3: sums are 6 × each field's unit), which grouping allows
    totals = [_total("h.0.mlp", 1), _total("h.1.mlp", 2), _total("h.2.mlp", 3)]
    (row,) = module_times(totals)
    assert row == ModuleTime(name="h.{0..2}.mlp", count=3,
                             members=("h.0.mlp", "h.1.mlp", "h.2.mlp"), ops=6, flops=300,
                             bytes=18, time_s=pytest.approx(24.0),
                             share_of_step=pytest.approx(0.06), compute_bound_ops=30,
                             memory_bound_ops=36, overhead_bound_ops=42,
                             ideal_time_s=pytest.approx(3.0))


def test_modules_of_other_flops_stay_apart_slowest_first() -> None:
    a = _total("h.0.attn", 1)
    b = TimeTotal("h.1.attn", 2, 999, 6, 8.0, 0.02, 10, 12, 14, 1.0)  # other FLOPs: its own row
    rows = module_times([a, b])
    assert [r.name for r in rows] == ["h.1.attn", "h.0.attn"]  # 8 s before 4 s
    assert [r.count for r in rows] == [1, 1]
    assert rows[0].members == ("h.1.attn",)
    assert (rows[0].flops, rows[0].overhead_bound_ops) == (999, 14)


def test_ungrouped_rows_are_cut_to_depth_and_sorted() -> None:
    # depth 2: "h.0.mlp" and "h.0.attn" both become "h.0" (summed), "h.1.mlp" becomes "h.1"
    totals = [_total("h.0.mlp", 1), _total("h.0.attn", 2), _total("h.1.mlp", 5)]
    rows = module_times(totals, depth=2, group=False)
    assert [r.name for r in rows] == ["h.1", "h.0"]  # 20 s before 4 + 8 = 12 s
    h0 = rows[1]
    assert (h0.count, h0.members, h0.ops, h0.flops) == (1, ("h.0",), 3, 200)
    assert h0.time_s == pytest.approx(12.0)
    # grouped, the two rows have other FLOPs (200 and 100) and stay apart, sorted the same way
    grouped = module_times(totals, depth=2)
    assert [(r.name, r.count) for r in grouped] == [("h.1", 1), ("h.0", 1)]
    # with no depth the names stay whole: three rows, slowest (scale 5) first
    whole = module_times(totals, group=False)
    assert [r.name for r in whole] == ["h.1.mlp", "h.0.attn", "h.0.mlp"]
    assert whole[0].share_of_step == pytest.approx(0.05)  # 0.01 × 5
