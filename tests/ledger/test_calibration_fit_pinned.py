"""The calibration fit's corners pinned by hand (issue 42's mutation run of
``tensorledger.ledger.calibration_fit``): a model without views, a class timed at nothing, a
step timed at nothing, the ops priced one by one where a run was not profiled, and the
``[calibration]`` table's text."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import Calibration
from tensorledger.ledger.calibration_fit import (
    Run,
    StepSample,
    _log_line,
    _solve,
    calibration_toml,
    fit,
    nonnegative_least_squares,
)

FB, OPT = "forward-backward", "optimizer"


def _run(step_s: float = 0.0, **fields: object) -> Run:
    values: dict[str, object] = {"classes": {}, "kernel_by_phase": {}, "ops_by_phase": {}}
    values.update(fields)
    return Run(step_s=step_s, **values)  # type: ignore[arg-type]


# one model's train step (timed at 1 ms: the time between ops needs a step) makes 20 views
# timed at 0.2 ms together
WITH_VIEWS = StepSample(forward_backward=_run(),
                        train=_run(1e-3, classes={"view": (20, 0.0, 2e-4)}))
# another makes none: no "view" class at all
WITHOUT_VIEWS = StepSample(forward_backward=_run(), train=_run(1e-3))


def test_a_fit_has_no_source_unless_given() -> None:
    assert fit([WITH_VIEWS]).source == ""
    assert fit([WITH_VIEWS], source="a box").source == "a box"


def test_a_model_without_views_adds_no_view_and_no_time_to_the_op_cost() -> None:
    # 0.2 ms over the 20 views of the one model that has them = 10 µs; the model without
    # views counts neither a view nor a second
    assert fit([WITH_VIEWS, WITHOUT_VIEWS]).op_cost_s == pytest.approx(2e-4 / 20, rel=1e-12)
    assert fit([WITHOUT_VIEWS]).op_cost_s == 0.0


def test_a_class_timed_at_nothing_and_a_step_timed_at_nothing_are_left_out() -> None:
    # a class whose calls took 0 s gives no row (its row would divide by 0), and a run whose
    # step took 0 s gives no row to the time between ops (its row would divide by 0)
    idle = StepSample(forward_backward=_run(0.0, classes={"copy": (3, 1e-3, 0.0)}),
                      train=_run(1e-3, classes={"copy": (3, 1e-3, 0.0)}))
    cal = fit([idle])
    assert "copy" not in cal.scale
    assert cal.between_ops_s == {FB: 0.0, OPT: 0.0}


# The runs of the next test (no views, so entering an op costs 0 and every footprint ratio
# is 1).  Kernel fits, each class's calls counted as 0 (so only scale and a piece's cost
# are fitted: the cost-a-call column is all zeros and left at 0):
#   matmul: 1 ms of kernel, 1,000 pieces in 2.1 ms; 2 ms, 4,000 pieces in 4.4 ms:
#     s·1 + p·1000 = 2.1 (ms), s·2 + p·4000 = 4.4 → 2000·p = 4.4 − 4.2 → p = 0.1 µs, s = 2
#   elementwise: 1 ms in 3 ms, 2 ms in 6 ms, no pieces → s = 3, no piece cost
KERNELS = StepSample(
    forward_backward=_run(0.0, classes={"matmul": (0, 1e-3, 2.1e-3),
                                        "elementwise": (0, 1e-3, 3e-3)},
                          pieces={"matmul": 1000.0}),
    # its train step was not profiled (no ops_s, no between_s): priced op by op
    #   matmul, compute 1 ms, memory 0.2 ms, bound 0.5 ms, 1,000 pieces:
    #     max(2 × 1, 2 × 0.2, 0.5) = 2 ms + 0.1 µs × 1,000 = 0.1 ms → 2.1 ms
    #   elementwise, compute 0.1 ms, memory 1 ms, bound 0.5 ms, 500 pieces (no piece cost):
    #     max(3 × 0.1, 3 × 1, 0.5) = 3 ms
    #   matmul, compute 0.1 ms, memory 0.1 ms, bound 1 ms, no pieces:
    #     max(0.2, 0.2, 1) = 1 ms
    #   together 6.1 ms; the step of 10 ms leaves 3.9 ms between its 39 ops: 100 µs an op
    train=_run(10e-3, classes={"matmul": (0, 2e-3, 4.4e-3), "elementwise": (0, 2e-3, 6e-3)},
               pieces={"matmul": 4000.0}, ops_by_phase={FB: 39},
               ops=(("matmul", FB, 1e-3, 0.2e-3, 0.5e-3, 4096.0, 1000.0),
                    ("elementwise", FB, 0.1e-3, 1e-3, 0.5e-3, 4096.0, 500.0),
                    ("matmul", FB, 0.1e-3, 0.1e-3, 1e-3, 4096.0, 0.0))))
# a step kept as class sums only (no ops): 1 ms of matmul kernel at scale 2, and 1 ms of a
# class no run timed ("norm", scale 1): 3 ms; the step of 5 ms leaves 2 ms between its 20
# ops, the same 100 µs an op
SUMS = StepSample(
    forward_backward=_run(5e-3, kernel_by_phase={(FB, "matmul"): 1e-3, (FB, "norm"): 1e-3},
                          ops_by_phase={FB: 20}),
    train=_run(0.0))


def test_the_kernel_scale_and_piece_cost_by_hand() -> None:
    cal = fit([KERNELS])
    assert cal.scale == pytest.approx({"matmul": 2.0, "elementwise": 3.0}, rel=1e-9)
    assert cal.piece_cost_s == pytest.approx({"matmul": 1e-7}, rel=1e-9)
    assert cal.call_cost_s == {}


def test_a_step_not_profiled_is_priced_op_by_op_and_by_class_sums() -> None:
    # each step alone, and both together (they agree: 100 µs an op), by hand above
    for samples in ([KERNELS], [KERNELS, SUMS]):
        cal = fit(samples)
        assert cal.between_ops_s[FB] == pytest.approx(1e-4, rel=1e-9)
        assert cal.between_ops_s[OPT] == 0.0  # no optimizer ops
    # the class sums alone have no kernel fit, so every class is at scale 1: 1 + 1 = 2 ms of
    # kernels, 5 − 2 = 3 ms left over 20 ops = 150 µs
    assert fit([SUMS]).between_ops_s[FB] == pytest.approx(150e-6, rel=1e-9)


def _calibration(**fields: object) -> Calibration:
    values: dict[str, object] = {"scale": {}, "op_cost_s": 1e-5, "between_ops_s": {}}
    values.update(fields)
    return Calibration(**values)  # type: ignore[arg-type]


def test_the_calibration_table_text_by_hand() -> None:
    text = calibration_toml(_calibration(
        scale={"matmul": 2.0}, between_ops_s={FB: 1e-4, OPT: 2.5e-6},
        call_cost_s={"matmul": 1e-5, "copy": 1e-7}, piece_cost_s={"matmul": 1e-7},
        unreliable=("d128 train", "d256 train")))
    lines = text.splitlines()
    # 1e-5 s = 10,000 ns; 1e-4 s = 100,000 ns; 2.5e-6 s = 2,500 ns; 1e-7 s = 100 ns
    assert 'op_cost = "10000.0ns"' in lines
    assert "scale = { matmul = 2.0 }" in lines
    assert 'between_ops = { "forward-backward" = "100000.0ns", "optimizer" = "2500.0ns" }' \
        in lines
    assert 'call_cost = { copy = "100.0ns", matmul = "10000.0ns" }' in lines  # sorted
    assert 'piece_cost = { matmul = "100.0ns" }' in lines
    assert 'unreliable = ["d128 train", "d256 train"]' in lines


def test_an_empty_curve_weights_and_unreliable_list_are_left_out_of_the_table() -> None:
    text = calibration_toml(_calibration())
    for key in ("op_cost_by_footprint", "view_weights", "unreliable", "call_cost",
                "piece_cost"):
        assert key not in text
    assert text == ("[calibration]  # whole eager steps: see tensorledger.ledger.calibrate\n"
                    'source = ""\nop_cost = "10000.0ns"\nscale = {  }\nbetween_ops = {  }\n')


def test_a_fit_of_no_timed_step_is_refused_not_left_without_time_between_ops() -> None:
    # no run timed its step (every step_s is 0): no row for the time between ops, and the fit
    # stops, saying why, rather than return a calibration without it
    untimed = StepSample(forward_backward=_run(0.0), train=_run(0.0))
    with pytest.raises(InputError, match="none of these runs timed its step"):
        fit([untimed])


def _moving(moved: float) -> tuple[tuple[str, str, float, float, float, float, float], ...]:
    """One op moving ``moved`` bytes: the run's footprint."""
    return (("matmul", FB, 0.0, 0.0, 0.0, moved, 0.0),)


def _train(**fields: object) -> StepSample:
    return StepSample(forward_backward=_run(), train=_run(1e-3, **fields))


def test_entering_an_op_by_footprint_by_hand() -> None:
    samples = [
        # 10 aten.t calls in 0.1 ms at a footprint of 1,000 B: 10 µs a view (no aten.view
        # timed, so no weights: each view weighs 1)
        _train(classes={"view": (10, 0.0, 1e-4)}, views={"aten.t": (10, 1e-4)},
               ops=_moving(1000.0)),
        # 10 in 0.4 ms at 4,000 B: 40 µs a view
        _train(classes={"view": (10, 0.0, 4e-4)}, views={"aten.t": (10, 4e-4)},
               ops=_moving(4000.0)),
        # views timed at nothing, and views with no "view" class (no time): no point
        _train(classes={"view": (10, 0.0, 0.0)}, ops=_moving(2000.0)),
        _train(views={"aten.t": (10, 1e-4)}, ops=_moving(2000.0)),
    ]
    # the line through (1,000 B, 10 µs) and (4,000 B, 40 µs), kept as its two ends
    ends = fit(samples).op_cost_by_footprint
    assert len(ends) == 2
    assert ends[0] == pytest.approx((1000.0, 1e-5), rel=1e-9)
    assert ends[1] == pytest.approx((4000.0, 4e-5), rel=1e-9)


def test_entering_an_op_by_footprint_is_clamped_at_a_millisecond() -> None:
    # one view in 2 ms at 1,000 B, one in 4 ms at 4,000 B: both above the clamp's 1 ms
    ends = fit([_train(classes={"view": (1, 0.0, 2e-3)}, ops=_moving(1000.0)),
                _train(classes={"view": (1, 0.0, 4e-3)}, ops=_moving(4000.0))]
               ).op_cost_by_footprint
    assert [*ends[0], *ends[1]] == pytest.approx([1000.0, 1e-3, 4000.0, 1e-3], rel=1e-9)


def test_view_weights_by_hand() -> None:
    # aten.view 10 calls in 0.1 ms (10 µs each), aten.t 10 in 0.2 ms (20 µs: 2 views'
    # worth), aten.detach 5 timed at nothing (no weight of its own: it weighs 1).
    # The views weigh 1 × 10 + 2 × 10 + 1 × 5 = 35 for 25 calls: each weight × 25/35
    views = {"aten.view": (10, 1e-4), "aten.t": (10, 2e-4), "aten.detach": (5, 0.0)}
    weights = fit([_train(views=views)]).view_weights
    assert weights == pytest.approx({"aten.view": 25 / 35, "aten.t": 2 * 25 / 35}, rel=1e-12)


def test_a_footprint_line_needs_sizes_a_factor_of_two_apart() -> None:
    # log 2 − log 1 is log 2 exactly: a line (slope 1 through (1, 1) and (2, 2))
    ends = _log_line([(1.0, 1.0), (2.0, 2.0)], (0.0, 100.0))
    assert [*ends[0], *ends[1]] == pytest.approx([1.0, 1.0, 2.0, 2.0], rel=1e-12)
    # 150 / 100 = 1.5 < 2: none
    assert _log_line([(100.0, 1.0), (150.0, 2.0)], (0.0, 100.0)) == ()
    # 2.5 apart: a line
    ends = _log_line([(1.0, 1.0), (2.5, 2.5)], (0.0, 100.0))
    assert [*ends[0], *ends[1]] == pytest.approx([1.0, 1.0, 2.5, 2.5], rel=1e-12)


def test_nonnegative_least_squares_of_no_rows_and_of_a_negative_column() -> None:
    assert nonnegative_least_squares([]) == ()
    # −1 · x = −2 and −2 · x = −4: x = 2 (a column whose entries are negative)
    assert nonnegative_least_squares([(-1.0, -2.0), (-2.0, -4.0)]) == pytest.approx((2.0,))


def test_elimination_pivots_on_the_largest_entry() -> None:
    # 2·x = 2 and 4·y = 8: x = 1, y = 2; the second row's first entry is 0, a pivot no
    # elimination can take
    assert _solve([[2.0, 0.0], [0.0, 4.0]], [2.0, 8.0]) == pytest.approx([1.0, 2.0])
    # orthogonal columns (their normal matrix is diagonal): x = 2 and y = 3 exactly
    assert nonnegative_least_squares([(1.0, 0.0, 2.0), (0.0, 1.0, 3.0)]) == pytest.approx(
        (2.0, 3.0))


def test_a_class_whose_calls_the_profile_prices_gets_no_fitted_cost_a_call() -> None:
    # attention: 1 ms of kernel (its curves' call costs in it) in 10 calls took 1.5 ms, 2 ms
    # in 10 calls 2.5 ms.  Fitted with a cost a call: s·1 + c·10 = 1.5, s·2 + c·10 = 2.5 (ms)
    # → s = 1, c = 50 µs.  Where the profile prices its calls (``own_calls``) the calls'
    # column is 0s and scale alone is fitted, in relative terms (each row over its measured
    # time): minimise (s/1.5 − 1)² + (2s/2.5 − 1)² → s = (1/1.5 + 2/2.5) /
    # ((1/1.5)² + (2/2.5)²)
    def sample(own: frozenset[str]) -> StepSample:
        return StepSample(
            forward_backward=_run(0.0, classes={"attention": (10, 1e-3, 1.5e-3)}, own_calls=own),
            train=_run(1e-3, classes={"attention": (10, 2e-3, 2.5e-3)}, own_calls=own))

    fitted = fit([sample(frozenset())])
    assert fitted.scale["attention"] == pytest.approx(1.0, rel=1e-9)
    assert fitted.call_cost_s["attention"] == pytest.approx(50e-6, rel=1e-9)
    own = fit([sample(frozenset({"attention"}))])
    a, b = 1 / 1.5, 2 / 2.5
    assert own.scale["attention"] == pytest.approx((a + b) / (a * a + b * b), rel=1e-9)
    assert "attention" not in own.call_cost_s
