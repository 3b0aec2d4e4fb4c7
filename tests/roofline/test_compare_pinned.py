"""``compare`` and its helpers (roofline/compare.py) pinned on predictions written out by hand,
where the mutation run of issue 42 found them untested: a predicted time between ops set beside
the measured residual, every field of a comparison, calls matched by name to a category the
trace gave them, rounds of several profiled steps with spans, and the median's interval at the
edge of its coverage.  Each expectation is worked out in the comment beside it; no clock is
read."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from tensorledger.roofline.compare import (
    _aligned,
    _increasing,
    compare,
    median_interval,
)
from tensorledger.roofline.model import OpPrediction, RooflinePrediction


@dataclass(frozen=True)
class Call:
    op: str
    time_s: float


def _op(index: int, op: str, category: str, time: float, between: float = 0.0,
        flops: int = 0) -> OpPrediction:
    return OpPrediction(index=index, op=op, module="", phase="forward", category=category,
                        compute_key="fp32", flops=flops, bytes=0,
                        intensity_flop_per_byte=0.0, ridge_flop_per_byte=1.0,
                        compute_time_s=0.0, memory_time_s=0.0, overhead_s=between,
                        time_s=time, attained_flop_per_s=0.0, bound="compute",
                        ideal_time_s=time, ideal_bound="compute", between_ops_s=between)


def _prediction(*ops: OpPrediction, flops: int = 0) -> RooflinePrediction:
    time = sum(o.time_s for o in ops)
    return RooflinePrediction(hardware="chip", ops=ops, flops=flops, bytes=0, time_s=time,
                              by_category=(), by_module=(), by_phase=(), tokens=None,
                              tokens_per_s=None, mfu_peak_key="fp32", mfu=0.0,
                              ideal_time_s=time, ideal_mfu=0.0, ideal_tokens_per_s=None,
                              basis="probed")


# mm 10 s (2 of them between ops), relu 4 s (1 between), add 6 s: a step of 20 s, 1000 FLOPs
THREE = _prediction(_op(0, "aten.mm.default", "matmul", 10.0, 2.0, flops=1000),
                    _op(1, "aten.relu.default", "elementwise", 4.0, 1.0),
                    _op(2, "aten.add.Tensor", "elementwise", 6.0), flops=1000)


def _run(mm: float, relu: float, add: float) -> tuple[Call, ...]:
    return (Call("aten.mm", mm), Call("aten.relu", relu), Call("aten.add", add))


def test_every_field_of_a_comparison_by_hand() -> None:
    runs = [_run(5.0, 1.0, 2.0), _run(7.0, 2.0, 5.0), _run(6.0, 3.0, 4.0)]
    c = compare(THREE, runs, measured_step_s=19.0, peak_flop_per_s=10.0)
    assert (c.hardware, c.predicted_step_s, c.measured_step_s) == ("chip", 20.0, 19.0)
    assert c.error == pytest.approx(20 / 19 - 1)
    assert c.predicted_between_s == pytest.approx(3.0)  # 2 + 1 + 0
    # categories, slowest measured first: elementwise median(1+2, 2+5, 3+4) = 7 s, predicted
    # (4 − 1) + (6 − 0) = 9 s of 2 ops; matmul median(5, 7, 6) = 6 s, predicted 10 − 2 = 8 s
    (elementwise, matmul) = c.categories
    assert (elementwise.category, elementwise.ops) == ("elementwise", 2)
    assert elementwise.predicted_s == pytest.approx(9.0)
    assert elementwise.measured_s == pytest.approx(7.0)
    assert elementwise.error == pytest.approx(9 / 7 - 1)
    assert (matmul.category, matmul.ops) == ("matmul", 1)
    assert (matmul.predicted_s, matmul.measured_s) == pytest.approx((8.0, 6.0))
    assert matmul.error == pytest.approx(8 / 6 - 1)
    assert matmul.measured_interval_s is None  # three runs are too few for an interval
    # the ops 7 + 6 = 13 s of a 19 s step: 6 s between them, predicted 3 s (3/6 − 1 = −½)
    assert c.measured_ops_s == pytest.approx(13.0)
    assert c.residual_s == pytest.approx(6.0) == c.unattributed_s
    assert c.between_error == pytest.approx(-0.5)
    assert not c.ops_exceed_step
    assert (c.matched_by, c.flops, c.peak_flop_per_s) == ("position", 1000, 10.0)
    assert c.predicted_mfu == pytest.approx(1000 / 20 / 10)  # 5
    assert c.measured_mfu == pytest.approx(1000 / 19 / 10)
    assert c.residual_interval_s is None
    # its summary: 20 s against 19 s, +5.3% (20/19 − 1 = 0.0526)
    assert repr(c) == "Comparison(chip, predicted 20 s, measured 19 s, error +5.3%)"


def test_a_category_on_one_side_only() -> None:
    # the prediction has a copy the runs never call (measured 0: its error is nan), and the
    # runs call an op the trace never saw, in category "untraced" (predicted 0: error −1)
    prediction = _prediction(_op(0, "aten.mm.default", "matmul", 4.0),
                             _op(1, "aten.clone.default", "copy", 1.0))
    c = compare(prediction, [(Call("aten.mm", 3.0), Call("aten.foo_bar", 2.0))],
                measured_step_s=8.0, peak_flop_per_s=1.0)
    by = {x.category: x for x in c.categories}
    assert set(by) == {"matmul", "copy", "untraced"}
    assert math.isnan(by["copy"].error) and by["copy"].measured_s == 0.0
    assert (by["copy"].ops, by["copy"].predicted_s) == (1, 1.0)
    assert (by["untraced"].ops, by["untraced"].predicted_s) == (0, 0.0)
    assert by["untraced"].error == pytest.approx(-1.0)  # 0 / 2 − 1
    # matched: mm by position; foo_bar by name (1 of 2 calls); order by measured 3, 2, 0
    assert [x.category for x in c.categories] == ["matmul", "untraced", "copy"]
    assert c.matched_by == "position (1 of 2 calls by op name)"
    # no time predicted between ops: the error between is nan, not −1
    assert math.isnan(c.between_error)
    assert c.residual_s == pytest.approx(3.0)  # 8 − 3 − 2


def test_a_call_matched_by_name_takes_the_category_the_trace_gave_its_op() -> None:
    # RMSNorm's mul (normalization) then a matmul; the run calls them in the other order, so
    # the longest chain in order keeps one: the later mm (timed 1 → predicted 1), and the mul
    # goes by name.  By its name the trace made it normalization (its cost rule would say
    # elementwise); by its full overload name too (no rule knows "aten.mul.Tensor")
    prediction = _prediction(_op(0, "aten.mul.Tensor", "normalization", 1.0),
                             _op(1, "aten.mm.default", "matmul", 1.0))
    short = compare(prediction, [(Call("aten.mm", 4.0), Call("aten.mul", 3.0))],
                    measured_step_s=10.0, peak_flop_per_s=1.0)
    assert {x.category: x.measured_s for x in short.categories} == {
        "normalization": 3.0, "matmul": 4.0}
    assert short.matched_by == "position (1 of 2 calls by op name)"
    full = compare(prediction, [(Call("aten.mm.default", 4.0), Call("aten.mul.Tensor", 3.0))],
                   measured_step_s=10.0, peak_flop_per_s=1.0)
    assert {x.category: x.measured_s for x in full.categories} == {
        "normalization": 3.0, "matmul": 4.0}
    # every call by name: the runs share no name with the prediction
    none = compare(prediction, [(Call("aten.linear", 4.0),)], measured_step_s=10.0,
                   peak_flop_per_s=1.0)
    assert none.matched_by == "op name"
    assert {x.category: x.measured_s for x in none.categories}["matmul"] == 4.0  # its rule
    # two calls by name in one category in one run add up: 4 + 2 s
    two = compare(prediction, [(Call("aten.linear", 4.0), Call("aten.linear", 2.0))],
                  measured_step_s=10.0, peak_flop_per_s=1.0)
    assert {x.category: x.measured_s for x in two.categories}["matmul"] == 6.0


def test_rounds_need_steps_unless_there_are_no_runs() -> None:
    with pytest.raises(ValueError, match="1 profiled steps do not divide among 0 rounds"):
        compare(THREE, [_run(1.0, 1.0, 1.0)], measured_step_s=5.0, peak_flop_per_s=1.0,
                round_steps_s=[])
    # no runs at all: nothing to divide, no rounds to take; the step less nothing measured
    c = compare(THREE, [], measured_step_s=5.0, peak_flop_per_s=1.0, round_steps_s=[])
    assert (c.residual_s, c.measured_ops_s, c.matched_by) == (5.0, 0.0, "position")
    assert c.residual_interval_s is None


def test_spans_of_two_profiled_steps_a_round() -> None:
    # four runs of one mm call, two a round, each in a span of 10 s; rounds' steps 20 and 40 s
    runs = [(Call("aten.mm", t),) for t in (2.0, 4.0, 6.0, 8.0)]
    c = compare(_prediction(_op(0, "aten.mm.default", "matmul", 1.0)), runs,
                measured_step_s=30.0, peak_flop_per_s=1.0, round_steps_s=[20.0, 40.0],
                spans_s=[10.0] * 4)
    # each run on its round's step: runs 0, 1 on 20 s (i·2 // 4 = 0, 0), runs 2, 3 on 40 s
    # (1, 1): 2·2, 4·2, 6·4, 8·4 = 4, 8, 24, 32 s → median 16 s
    assert c.categories[0].measured_s == pytest.approx(16.0)
    # shares outside the calls: 0.8, 0.6 (round 1: median 0.7), 0.4, 0.2 (round 2: 0.3);
    # rounds: 20 · 0.7 = 14 s, 40 · 0.3 = 12 s → median 13 s
    assert c.residual_s == pytest.approx(13.0)
    # the ops' median (16 s) is within the 30 s step: not exceeded
    assert not c.ops_exceed_step


def test_calls_longer_than_their_span_leave_no_time_between() -> None:
    # one run, 3 s of calls in a 2 s span: its share outside is max(0, 1 − 3/2) = 0, so no
    # time between ops (not −½ of the step); its calls set on the 10 s step: 3 · 10/2 = 15 s,
    # more than the step: flagged
    c = compare(_prediction(_op(0, "aten.mm.default", "matmul", 1.0, 0.5)),
                [(Call("aten.mm", 3.0),)], measured_step_s=10.0, peak_flop_per_s=1.0,
                spans_s=[2.0])
    assert c.residual_s == 0.0 and c.unattributed_s == 0.0
    assert c.measured_ops_s == pytest.approx(15.0)
    assert c.ops_exceed_step
    assert math.isnan(c.between_error)  # 0.5 s predicted between, none measured


@pytest.mark.parametrize("spans", [[0.0], [5.0, 5.0], [None], []])
def test_spans_that_cannot_be_read_leave_the_step_less_its_ops(spans: list[float | None]
                                                               ) -> None:
    # a span of 0, one span too many, a missing span, none: each run's calls as measured,
    # the time between ops the step less them: 10 − 3 = 7 s
    c = compare(_prediction(_op(0, "aten.mm.default", "matmul", 1.0)),
                [(Call("aten.mm", 3.0),)], measured_step_s=10.0, peak_flop_per_s=1.0,
                spans_s=spans)
    assert c.residual_s == pytest.approx(7.0)
    assert c.measured_ops_s == pytest.approx(3.0)


def test_shares_without_rounds_give_their_interval() -> None:
    # six runs: spans 10 s, calls 1..6 s: shares 0.9 .. 0.4; median 0.65, step 20 s → 13 s;
    # six values give (smallest, largest) at 95%: 20 · 0.4 = 8 s and 20 · 0.9 = 18 s
    runs = [(Call("aten.mm", float(t)),) for t in range(1, 7)]
    c = compare(_prediction(_op(0, "aten.mm.default", "matmul", 1.0)), runs,
                measured_step_s=20.0, peak_flop_per_s=1.0, spans_s=[10.0] * 6)
    assert c.residual_s == pytest.approx(13.0)
    assert c.residual_interval_s == pytest.approx((8.0, 18.0))
    # the calls on the step: t · 20/10 = 2..12 s, median 7 s; interval 2 to 12 s
    assert c.categories[0].measured_s == pytest.approx(7.0)
    assert c.categories[0].measured_interval_s == pytest.approx((2.0, 12.0))


def test_a_category_one_run_lacks_counts_zero_there() -> None:
    # run 1 calls an untraced op for 2 s, run 2 does not: its median over the runs is the
    # median of 2 and 0, 1 s
    runs = [(Call("aten.mm", 3.0), Call("aten.foo_bar", 2.0)), (Call("aten.mm", 5.0),)]
    c = compare(_prediction(_op(0, "aten.mm.default", "matmul", 1.0)), runs,
                measured_step_s=20.0, peak_flop_per_s=1.0)
    assert {x.category: x.measured_s for x in c.categories} == {"matmul": 4.0, "untraced": 1.0}


def test_ops_that_fill_the_step_exactly_do_not_exceed_it() -> None:
    # calls of 2 + 3 s in a step of 5 s: nothing between them, but nothing beyond the step
    c = compare(THREE, [(Call("aten.mm", 2.0), Call("aten.relu", 3.0), Call("aten.add", 0.0))],
                measured_step_s=5.0, peak_flop_per_s=1.0)
    assert c.residual_s == 0.0 and not c.ops_exceed_step


def test_a_prediction_of_no_time_has_no_mfu() -> None:
    c = compare(_prediction(_op(0, "aten.view.default", "view", 0.0)), [],
                measured_step_s=2.0, peak_flop_per_s=1.0)
    assert c.predicted_mfu == 0.0 and c.measured_mfu == 0.0


def test_median_interval_at_the_edge_of_its_coverage() -> None:
    # coverage 0.9375: each tail 1/32 exactly; n = 5, P(B = 0) = 1/32 ≤ 1/32: the extremes
    assert median_interval([3.0, 1.0, 5.0, 2.0, 4.0], coverage=0.9375) == (1.0, 5.0)
    # coverage ½: tails of ¼; n = 5: P(B = 0) = 1/32, P(B ≤ 1) = 6/32 ≤ 8/32, P(B ≤ 2) =
    # 16/32 > 8/32: the 2nd smallest and 2nd largest
    assert median_interval([3.0, 1.0, 5.0, 2.0, 4.0], coverage=0.5) == (2.0, 4.0)
    # n = 7 at 95%: P(B = 0) = 1/128 = 0.8%, P(B ≤ 1) = 8/128 = 6.3%: the extremes
    assert median_interval([7.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 7.0)
    assert median_interval([]) is None
    # no coverage asked (tails of ½): k grows while P(B ≤ k − 1) ≤ ½; n = 1: P(B = 0) = ½,
    # then k = n stops it: the one value
    assert median_interval([4.0], coverage=0.0) == (4.0, 4.0)
    # n = 22 at 95% (2²² = 4194304; a tail of 2.5% is 104857.6 of it): P(B ≤ 5) = (1 + 22 +
    # 231 + 1540 + 7315 + 26334) = 35443 (0.85%), P(B ≤ 6) adds C(22, 6) = 74613: 110056
    # (2.62%): k = 6, the 6th smallest and 6th largest (the last term alone, 26334 + 74613 =
    # 100947, would have let a 7th in)
    assert median_interval([float(v) for v in range(22)]) == (5.0, 16.0)


def test_aligned_matches_each_stretch_between_anchors_on_its_own() -> None:
    # names made as often on both sides: mm, relu, exp, tanh, out (sub is not timed, add is
    # predicted twice and timed once).  Their pairs (0, 0), (4, 2), (5, 4), (6, 3), (7, 5):
    # the longest chain in order on both sides keeps (0, 0), (4, 2), (6, 3), (7, 5) (of
    # seconds 0, 2, 4, 3, 5 the later 3 replaces 4), so exp is left out.  The one stretch
    # longer than one on both sides: predicted 1..3 [sub, add, add] against timed 1 [add]:
    # difflib pairs the first add, predicted 2 → timed 1
    predicted = ["mm", "sub", "add", "add", "relu", "exp", "tanh", "out"]
    timed = ["mm", "add", "relu", "tanh", "exp", "out"]
    assert _aligned(predicted, timed) == {0: 0, 1: 2, 2: 4, 3: 6, 5: 7}
    # a stretch at the start, before the first anchor: [x, x] against [x, y] (x is predicted
    # twice, timed once): difflib pairs the first x
    assert _aligned(["x", "x", "a"], ["x", "y", "a"]) == {0: 0, 2: 2}
    # a block of two at an offset on both sides: anchors a (0, 0) and z (6, 5); the stretch
    # [u, p, q, p, q] against [v, w, p, q] matches p, q at predicted 2, 3 and timed 3, 4
    assert _aligned(["a", "u", "p", "q", "p", "q", "z"], ["a", "v", "w", "p", "q", "z"]) == {
        0: 0, 3: 2, 4: 3, 5: 6}
    # a stretch of 200 timed calls, 199 of one name: predicted [x ×100, m, m] against timed
    # [m, x ×199] before the anchor "end" (x and m are made unequally often).  The longest
    # block is the run of 100 x (timed 1..100 → predicted 0..99); difflib's autojunk would
    # drop x, a name making more than 1% of 200 calls or more, and pair the lone m instead
    long = _aligned(["x"] * 100 + ["m", "m", "end"], ["m"] + ["x"] * 199 + ["end"])
    assert long == {j: j - 1 for j in range(1, 101)} | {200: 102}
    # a stretch at the end, after the last anchor: predicted [a, x, x] against timed
    # [a, x]: x is not an anchor (2 against 1); difflib pairs timed 1 with predicted 1
    assert _aligned(["a", "x", "x"], ["a", "x"]) == {0: 0, 1: 1}
    # a stretch of one predicted op (x) against two timed calls between anchors a and b
    assert _aligned(["a", "x", "b"], ["a", "x", "x", "b"]) == {0: 0, 1: 1, 3: 2}
    # names that differ match nothing: timed 1 (y) is left to be matched by name
    assert _aligned(["a", "x", "b"], ["a", "y", "b"]) == {0: 0, 2: 2}


def test_increasing_keeps_the_longest_chain() -> None:
    # seconds 3, 1, 2, 0, 4: the longest increasing run is 1, 2, 4
    assert _increasing([(0, 3), (1, 1), (2, 2), (3, 0), (4, 4)]) == [(1, 1), (2, 2), (4, 4)]
    assert _increasing([]) == []
    assert _increasing([(0, 5)]) == [(0, 5)]
    # a later pair replacing a chain's tail: 5, 6 then 1, 2, 3 — the chain of three wins
    assert _increasing([(0, 5), (1, 6), (2, 1), (3, 2), (4, 3)]) == [(2, 1), (3, 2), (4, 3)]
