"""The roofline time model on op records written out by hand.

``H100`` here is the datasheet alone (no published efficiencies): its expected time is the
roofline bound plus the stated per-op cost, the lecture's model; tests/roofline/test_expected.py
covers the efficiencies."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.roofline import ceiling, compute_key_for, predict, predict_op

# bf16 989.5e12, fp32 66.9e12, 3.35e12 bytes/s; no efficiencies
H100 = dataclasses.replace(get_hardware("h100"), efficiency=None)


@dataclass(frozen=True)
class Op:
    op: str
    category: str
    flops: int
    bytes_read: int
    bytes_written: int
    input_dtypes: tuple[str, ...] = ("bf16",)
    output_dtypes: tuple[str, ...] = ("bf16",)
    module: str = ""
    phase: str = "forward"
    input_shapes: tuple[tuple[int, ...], ...] = ()
    causal_halved: int | None = None  # an attention op's FLOPs with the causal half left out
    inner_loop: int = 0  # its kernel's inner loop, where its operands' layouts cut it short
    recomputed: bool = False  # run again in backward by activation checkpointing

    @property
    def flops_causal_halved(self) -> int:
        return self.flops if self.causal_halved is None else self.causal_halved


def test_matmul_runs_at_the_tensor_core_peak() -> None:
    n = 1024
    mm = Op("aten.mm.default", "matmul", 2 * n**3, 2 * 2 * n * n, 2 * n * n)
    p = predict_op(0, mm, H100)
    assert p.compute_key == "bf16"
    assert p.intensity_flop_per_byte == pytest.approx(2 * n**3 / (6 * n * n))  # n/3 = 341.3
    assert p.compute_time_s == pytest.approx(2 * n**3 / 989.5e12)
    assert p.memory_time_s == pytest.approx(6 * n * n / 3.35e12)
    assert p.bound == "compute" and p.time_s == p.compute_time_s


def test_elementwise_runs_on_vector_units() -> None:
    n = 2**20
    relu = Op("aten.relu.default", "elementwise", n, 2 * n, 2 * n)
    p = predict_op(0, relu, H100)
    assert p.compute_key == "fp32"  # not the bf16 tensor-core peak
    assert p.intensity_flop_per_byte == 0.25  # n / 4n
    assert p.bound == "memory" and p.time_s == pytest.approx(4 * n / 3.35e12)
    assert p.attained_flop_per_s == pytest.approx(n / (4 * n / 3.35e12))  # 0.25 · bandwidth


def test_views_are_free_and_overhead_is_added() -> None:
    view = Op("aten.view.default", "view", 0, 0, 0)
    assert predict_op(0, view, H100).time_s == 0 and predict_op(0, view, H100).bound == "free"
    slow = H100.__class__(**{**H100.__dict__, "op_overhead_s": 5e-6})
    tiny = Op("aten.add.Tensor", "elementwise", 4, 16, 8)
    p = predict_op(0, tiny, slow)
    assert p.bound == "overhead"
    assert p.time_s == pytest.approx(24 / 3.35e12 + 5e-6)
    assert predict_op(0, view, slow).time_s == 5e-6  # a view still passes the dispatcher
    assert predict_op(0, view, slow).bound == "overhead"


def test_a_forward_only_step_takes_the_probed_per_op_cost_of_inference() -> None:
    # a probed profile: 2.5 µs an op of a training step, 2 µs an op of a forward under no_grad
    probed = dataclasses.replace(H100, op_overhead_s=2.5e-6, inference_op_overhead_s=2e-6)
    view = Op("aten.view.default", "view", 0, 0, 0)
    decode = predict([view] * 10, probed)
    assert decode.time_s == pytest.approx(10 * 2e-6)  # 10 views of a decode step
    train = predict([view] * 9 + [dataclasses.replace(view, phase="backward")], probed)
    assert train.time_s == pytest.approx(10 * 2.5e-6)  # one backward op: a training step
    # a profile without the inference figure prices both at the training step's
    assert predict([view] * 10, dataclasses.replace(probed, inference_op_overhead_s=0.0)
                   ).time_s == pytest.approx(10 * 2.5e-6)


def test_a_cast_beyond_the_probed_sizes_slows_as_the_bandwidth_curve_does() -> None:
    # casts probed up to 16 MB at 8 GB/s; the fp32 copy curve falls from 40 GB/s at 16 MB to
    # 10 GB/s at 240 MB: a 240 MB cast (GPT-2's 154 MB table read, 77 MB written, about)
    # streams at 8 · 10 / 40 = 2 GB/s, not at the 16 MB rate
    probed = dataclasses.replace(H100, curves={
        "bandwidth": ((16e6, 40e9), (240e6, 10e9)),
        "cast.fp32-bf16": ((1e6, 4e9), (16e6, 8e9))})
    cast = Op("aten._to_copy.default", "copy", 0, 160_000_000, 80_000_000,
              input_dtypes=("fp32",), output_dtypes=("bf16",))
    assert predict_op(0, cast, probed).memory_time_s == pytest.approx(240e6 / 2e9)
    within = dataclasses.replace(cast, bytes_read=8_000_000, bytes_written=4_000_000)
    # 12 MB, inside the probed sizes: the cast curve alone, log-log between 1 and 16 MB
    rate = math.exp(math.log(4e9) + math.log(12) / math.log(16) * math.log(2))
    assert predict_op(0, within, probed).memory_time_s == pytest.approx(12e6 / rate)


def test_step_totals_and_mfu() -> None:
    ops = [Op("aten.mm.default", "matmul", 2 * 512**3, 3 * 512 * 512 * 2, 0, module="a"),
           Op("aten.relu.default", "elementwise", 512 * 512, 2 * 512 * 512, 2 * 512 * 512,
              module="b", phase="backward"),
           Op("aten.t.default", "view", 0, 0, 0, module="a")]
    result = predict(ops, H100, tokens=512)
    per_op = [predict_op(i, o, H100).time_s for i, o in enumerate(ops)]
    assert result.time_s == pytest.approx(sum(per_op))
    assert result.flops == 2 * 512**3 + 512 * 512
    assert sum(t.time_s for t in result.by_category) == pytest.approx(result.time_s)
    assert sum(t.time_s for t in result.by_module) == pytest.approx(result.time_s)
    assert sum(t.share_of_step for t in result.by_category) == pytest.approx(1.0)
    mm = next(t for t in result.by_category if t.name == "matmul")
    assert mm.share_of_step == pytest.approx(per_op[0] / sum(per_op))
    assert {t.name for t in result.by_phase} == {"forward", "backward"}
    assert result.mfu_peak_key == "bf16"
    assert result.mfu == pytest.approx(result.flops / result.time_s / 989.5e12)
    assert result.tokens_per_s == pytest.approx(512 / result.time_s)


def test_ceiling_and_ridge() -> None:
    ridge = 989.5e12 / 3.35e12  # ≈ 295.4
    assert ceiling(H100, "bf16", [1.0, ridge, 1e4]) == pytest.approx(
        (3.35e12, 989.5e12, 989.5e12))
    mm = Op("aten.mm.default", "matmul", 1, 1, 0)
    assert predict_op(0, mm, H100).ridge_flop_per_byte == pytest.approx(ridge)
    assert round(ridge) == 295


def test_chips_without_a_dtype_fall_back() -> None:
    tpu = get_hardware("tpu-v5e")  # lists bf16 and int8 only
    relu = Op("aten.relu.default", "elementwise", 10, 40, 40)
    assert compute_key_for(relu, tpu) == "bf16"
    v100 = get_hardware("v100")  # no bf16: a bf16 matmul falls back to fp32 there
    assert compute_key_for(Op("aten.mm.default", "matmul", 1, 1, 1), v100) == "fp32"
    assert math.isinf(predict_op(0, Op("aten.x", "other", 5, 0, 0), H100).intensity_flop_per_byte)


def test_compare_lines_calls_up_by_position_where_names_are_shared() -> None:
    """An op name in two categories (RMSNorm's mul and SwiGLU's mul) is measured in each by
    its own calls; a call one side lacks shifts nothing after it; categories take the median
    of the runs' sums."""
    from tensorledger.bench.optiming import OpTime
    from tensorledger.roofline.compare import compare

    ops = [Op("aten.mul.Tensor", "normalization", 10, 80, 40),
           Op("aten.detach.default", "view", 0, 0, 0),
           Op("aten.mul.Tensor", "elementwise", 10, 80, 40),
           Op("aten.add.Tensor", "elementwise", 10, 80, 40)]
    prediction = predict(ops, H100)

    def run(norm: float, act: float, add: float) -> tuple[OpTime, ...]:
        # the profiler shows no detach, and one composite call the trace does not see
        return (OpTime("aten.mul", norm), OpTime("aten.linear", 1e-6), OpTime("aten.mul", act),
                OpTime("aten.add", add))

    runs = [run(2e-6, 7e-6, 3e-6), run(4e-6, 5e-6, 30e-6), run(3e-6, 6e-6, 4e-6)]
    result = compare(prediction, runs, measured_step_s=1e-3, peak_flop_per_s=1.0)
    by = {c.category: c.measured_s for c in result.categories}
    assert by["normalization"] == pytest.approx(3e-6)  # median of 2, 4, 3 µs
    # median of each run's mul + add: 7 + 3, 5 + 30, 6 + 4 µs → 10 µs (the slow add once)
    assert by["elementwise"] == pytest.approx(10e-6)
    assert by["matmul"] == pytest.approx(1e-6)  # linear, by its cost rule
    assert result.matched_by == "position (3 of 12 calls by op name)"


def test_an_optimizers_elementwise_ops_stream_at_the_warm_buffers_bandwidth() -> None:
    """A probed chip's bandwidth curve was timed on new outputs; an optimizer's elementwise
    op updates tensors in place, at the warm buffers' bandwidth.  A catalog chip prices
    both alike."""
    from tensorledger.hardware import Hardware

    # the curve: 5 GB/s at 1 MB moved, 20 GB/s at 100 MB; the warm buffers 30 GB/s
    chip = Hardware(id="cpu", name="cpu", memory_bytes=8e9, memory_bandwidth_bytes_per_s=3e10,
                    dense_flop_per_s={"fp32": 1e12}, origin="test",
                    curves={"bandwidth": ((1e6, 5e9), (1e8, 2e10))})
    forward = Op("aten.add.Tensor", "elementwise", 0, 500_000, 500_000, ("fp32",), ("fp32",))
    update = dataclasses.replace(forward, op="aten.add_.Tensor", phase="optimizer")
    assert predict_op(0, forward, chip).memory_time_s == pytest.approx(1e6 / 5e9)  # 200 µs
    assert predict_op(1, update, chip).memory_time_s == pytest.approx(1e6 / 3e10)  # 33 µs
    # 10 MB moved, half way in log: 10 GB/s on the curve
    big = dataclasses.replace(forward, bytes_read=5_000_000, bytes_written=5_000_000)
    assert predict_op(0, big, chip).memory_time_s == pytest.approx(1e7 / 1e10)
    h100 = get_hardware("h100")
    assert predict_op(1, update, h100).memory_time_s == pytest.approx(
        predict_op(0, forward, h100).memory_time_s)


def test_an_in_place_call_is_measured_as_the_op_the_trace_saw_out_of_place() -> None:
    """Autograd adds a gradient that reaches a tensor twice in place where it may (``add_``);
    the trace on fake tensors saw an out-of-place ``add``.  The call is that op's, in its
    category, not the optimizer's ``add_`` by name."""
    from tensorledger.bench.optiming import OpTime
    from tensorledger.roofline.compare import compare

    ops = [Op("aten.mm.default", "matmul", 10, 80, 40, phase="backward"),
           Op("aten.add.Tensor", "elementwise", 10, 80, 40, phase="backward"),
           Op("aten.add_.Tensor", "optimizer", 10, 80, 40, phase="optimizer")]
    prediction = predict(ops, H100)
    run = (OpTime("aten.mm", 5e-6), OpTime("aten.add_", 2e-6), OpTime("aten.add_", 3e-6))
    result = compare(prediction, [run], measured_step_s=1e-3, peak_flop_per_s=1.0)
    assert {c.category: c.measured_s for c in result.categories} == pytest.approx(
        {"matmul": 5e-6, "elementwise": 2e-6, "optimizer": 3e-6})
    assert result.matched_by == "position"


def test_median_interval_by_hand_and_by_simulation() -> None:
    """The interval's order statistics by hand, and its coverage by a second path: drawing
    samples of a known median and counting how often the interval holds it."""
    import random

    from tensorledger.roofline.compare import median_interval

    # n = 20: P(B ≤ 5) = (1 + 20 + 190 + 1140 + 4845 + 15504) / 2²⁰ = 2.07% ≤ 2.5%, while
    # P(B ≤ 6) adds 38760 / 2²⁰ (5.77%): the 6th smallest and the 6th largest
    values = [float(v) for v in range(100, 120)]
    assert median_interval(values) == (105.0, 114.0)
    # n = 6: P(B = 0) = 1/64 = 1.6%: the smallest and the largest; n = 5: 3.1%, none
    assert median_interval([4.0, 1.0, 6.0, 2.0, 5.0, 3.0]) == (1.0, 6.0)
    assert median_interval([1.0] * 5) is None
    assert median_interval([1.0] * 5, coverage=0.9) == (1.0, 1.0)  # 3.1% ≤ 5%
    # coverage: 12 draws from an exponential of median ln 2, 4000 times; the interval (3rd,
    # 10th) holds the median with probability 1 − 2 · 79/4096 = 96.1% (a binomial standard
    # error of 0.3% over 4000 tries)
    rng = random.Random(7)
    held = 0
    for _ in range(4000):
        found = median_interval([rng.expovariate(1.0) for _ in range(12)])
        assert found is not None
        held += found[0] <= math.log(2) <= found[1]
    assert held / 4000 == pytest.approx(1 - 2 * 79 / 4096, abs=0.012)


def test_compare_gives_each_median_its_interval() -> None:
    """The categories' medians over the runs and the residual's over the rounds carry their
    intervals: with 6 rounds, the smallest and largest of each."""
    from tensorledger.bench.optiming import OpTime
    from tensorledger.roofline.compare import compare

    prediction = predict([Op("aten.relu.default", "elementwise", 10, 40, 40)], H100)
    calls = [2e-6, 3e-6, 9e-6, 4e-6, 1e-6, 5e-6]
    steps = [10e-6, 8e-6, 12e-6, 10e-6, 7e-6, 6e-6]
    runs = [(OpTime("aten.relu.default", t),) for t in calls]
    result = compare(prediction, runs, measured_step_s=9e-6, peak_flop_per_s=1.0,
                     round_steps_s=steps)
    (relu,) = result.categories
    assert relu.measured_interval_s == pytest.approx((1e-6, 9e-6))
    # rounds' residuals: 8, 5, 3, 6, 6, 1 µs → median 5.5 µs, interval 1 to 8 µs
    assert result.residual_s == pytest.approx(5.5e-6)
    assert result.residual_interval_s == pytest.approx((1e-6, 8e-6))
    # five runs are too few for a 95% interval; runs without rounds give the residual none
    fewer = compare(prediction, runs[:5], measured_step_s=9e-6, peak_flop_per_s=1.0)
    assert fewer.categories[0].measured_interval_s is None
    assert fewer.residual_interval_s is None


def test_compare_by_position_and_by_name() -> None:
    from tensorledger.bench.optiming import OpTime
    from tensorledger.roofline.compare import compare

    n = 1024
    ops = [Op("aten.mm.default", "matmul", 2 * n**3, 4 * n * n, 2 * n * n),
           Op("aten.relu.default", "elementwise", n * n, 2 * n * n, 2 * n * n)]
    prediction = predict(ops, H100)
    runs = [(OpTime("aten.mm.default", 3e-6), OpTime("aten.relu.default", 1e-6)),
            (OpTime("aten.mm.default", 5e-6), OpTime("aten.relu.default", 3e-6)),
            (OpTime("aten.mm.default", 4e-6), OpTime("aten.relu.default", 2e-6))]
    result = compare(prediction, runs, measured_step_s=8e-6, peak_flop_per_s=989.5e12)
    assert result.matched_by == "position"
    by = {c.category: c for c in result.categories}
    assert by["matmul"].measured_s == pytest.approx(4e-6)  # median of 3, 5, 4 µs
    assert by["elementwise"].measured_s == pytest.approx(2e-6)  # median of 1, 3, 2 µs
    assert by["matmul"].error == pytest.approx(by["matmul"].predicted_s / 4e-6 - 1)
    assert result.unattributed_s == pytest.approx(8e-6 - 6e-6)
    assert result.error == pytest.approx(prediction.time_s / 8e-6 - 1)
    assert result.measured_mfu == pytest.approx((2 * n**3 + n * n) / 8e-6 / 989.5e12)

    # taken in rounds, each run beside its round's median step: the time between ops is
    # the median over the rounds of step less calls, (7 − 4, 12 − 8, 9 − 6) µs → 3 µs, where
    # the pooled step less the categories' medians gives 8 − 6 = 2 µs
    rounds = compare(prediction, runs, measured_step_s=8e-6, peak_flop_per_s=989.5e12,
                     round_steps_s=[7e-6, 12e-6, 9e-6])
    assert rounds.unattributed_s == pytest.approx(3e-6) == rounds.residual_s
    assert rounds.measured_ops_s == result.measured_ops_s and not rounds.ops_exceed_step
    # rounds whose calls outrun their steps, (3 − 4, 9 − 8, 5 − 6) µs: a median of −1 µs,
    # shown as 0 and flagged
    busy = compare(prediction, runs, measured_step_s=8e-6, peak_flop_per_s=989.5e12,
                   round_steps_s=[3e-6, 9e-6, 5e-6])
    assert busy.residual_s == pytest.approx(-1e-6)
    assert busy.unattributed_s == 0.0 and busy.ops_exceed_step

    # three profiled steps a round, in round order: each round's step less the median of its
    # three runs' calls — round 1: 9 − median(4, 8, 6) = 3 µs; round 2: 10 − median(6, 4, 8)
    # = 4 µs → median over the rounds 3.5 µs; a slow profiled step (8 µs) moves neither round
    several = compare(prediction, [*runs, runs[2], runs[0], runs[1]], measured_step_s=8e-6,
                      peak_flop_per_s=989.5e12, round_steps_s=[9e-6, 10e-6])
    assert several.residual_s == pytest.approx(3.5e-6)
    # the categories: the median over all six runs (mm 3, 5, 4, 4, 3, 5 µs → 4 µs)
    assert {c.category: c.measured_s for c in several.categories}["matmul"] == pytest.approx(
        4e-6)
    with pytest.raises(ValueError, match="do not divide"):
        compare(prediction, runs, measured_step_s=8e-6, peak_flop_per_s=989.5e12,
                round_steps_s=[9e-6, 10e-6])

    shuffled = [(OpTime("aten.relu.default", 2e-6), OpTime("aten.mm.default", 4e-6))]
    by_name = compare(prediction, shuffled, measured_step_s=8e-6, peak_flop_per_s=989.5e12)
    assert by_name.matched_by == "position (1 of 2 calls by op name)"  # relu lines up
    assert {c.category: c.measured_s for c in by_name.categories} == pytest.approx(
        {"matmul": 4e-6, "elementwise": 2e-6})


def test_the_time_between_ops_measured_inside_the_profiled_steps() -> None:
    """With each profiled step's span (first call's start to last call's end), the time
    between ops is the step times the share of a span outside its calls, by hand."""
    from tensorledger.bench.optiming import OpTime, ProfiledStep
    from tensorledger.roofline.compare import compare

    prediction = predict([Op("aten.mm.default", "matmul", 2 * 64**3, 6 * 64 * 64,
                             2 * 64 * 64),
                          Op("aten.relu.default", "elementwise", 64, 512, 256)], H100)
    # calls of 4 + 1 µs in a span of 10 µs (half outside), 6 + 2 in 10 (1/5), 3 + 1 in 5 (1/5)
    runs = [ProfiledStep((OpTime("aten.mm.default", 4e-6), OpTime("aten.relu.default", 1e-6)),
                         10e-6),
            ProfiledStep((OpTime("aten.mm.default", 6e-6), OpTime("aten.relu.default", 2e-6)),
                         10e-6),
            ProfiledStep((OpTime("aten.mm.default", 3e-6), OpTime("aten.relu.default", 1e-6)),
                         5e-6)]
    spans = [run.span_s for run in runs]
    # no rounds: the step, 12 µs, times the median share 1/5 → 2.4 µs; the step less the
    # categories' medians (4 + 1 µs) would say 7 µs
    result = compare(prediction, runs, measured_step_s=12e-6, peak_flop_per_s=1.0,
                     spans_s=spans)
    assert result.residual_s == pytest.approx(2.4e-6) == result.unattributed_s
    assert compare(prediction, runs, measured_step_s=12e-6,
                   peak_flop_per_s=1.0).residual_s == pytest.approx(7e-6)
    # each run's calls are set on the step, times 12 µs over the run's span: mm 4 · 1.2, 6 ·
    # 1.2, 3 · 2.4 = 4.8, 7.2, 7.2 µs → 7.2 µs; relu 1.2, 2.4, 2.4 → 2.4 µs
    by = {c.category: c.measured_s for c in result.categories}
    assert by == pytest.approx({"matmul": 7.2e-6, "elementwise": 2.4e-6})
    assert result.measured_ops_s == pytest.approx(9.6e-6) and not result.ops_exceed_step
    # in rounds (one profiled step each): 10 × 1/2, 20 × 1/5, 15 × 1/5 = 5, 4, 3 µs → 4 µs;
    # mm on its round's step: 4 · 10/10, 6 · 20/10, 3 · 15/5 = 4, 12, 9 µs → 9 µs
    rounds = compare(prediction, runs, measured_step_s=12e-6, peak_flop_per_s=1.0,
                     round_steps_s=[10e-6, 20e-6, 15e-6], spans_s=spans)
    assert rounds.residual_s == pytest.approx(4e-6)
    assert {c.category: c.measured_s for c in rounds.categories}["matmul"] == pytest.approx(
        9e-6)
    # a busy spell: the first run's span stretched to 40 µs (calls of 5 µs, a share of 7/8),
    # its calls set at 12 / 40 of themselves: the ops' medians (mm 7.2, relu 2.4 µs) still sum
    # to less than the step, and the time between ops is never negative
    stretched = [ProfiledStep(runs[0], 40e-6), *runs[1:]]
    busy = compare(prediction, stretched, measured_step_s=12e-6, peak_flop_per_s=1.0,
                   spans_s=[run.span_s for run in stretched])
    assert busy.residual_s == pytest.approx(2.4e-6) and busy.residual_s >= 0
    # a run without a span (a device's times): the step less its ops, as before
    assert compare(prediction, runs, measured_step_s=12e-6, peak_flop_per_s=1.0,
                   spans_s=[*spans[:2], None]).residual_s == pytest.approx(7e-6)


def test_a_cast_curve_never_speeds_up_beyond_or_slows_within_its_probed_sizes() -> None:
    from tensorledger.roofline.kernel_rates import beyond_the_curve

    # a 3-point cast curve up to 16 MB; the fp32 copy curve slower at 2 MB (10 GB/s) than at
    # 16 MB (40 GB/s), and faster again at 64 MB (80 GB/s)
    probed = dataclasses.replace(H100, curves={
        "bandwidth": ((2e6, 10e9), (16e6, 40e9), (64e6, 80e9))})
    cast = ((1e6, 2e9), (4e6, 4e9), (16e6, 8e9))
    # within the probed sizes the cast curve alone: 4 MB → 4 GB/s, not 4 · (bw(4 MB)/bw(16 MB))
    assert beyond_the_curve(cast, 4e6, probed) == pytest.approx(4e9)
    # beyond them, a rising copy curve does not raise the rate: 64 MB stays at 8 GB/s (not 16)
    assert beyond_the_curve(cast, 64e6, probed) == pytest.approx(8e9)
    # and the largest point is the last one (16 MB), not the second: at 8 MB log-log between
    # 4 and 16 MB, 4 · 2^(1/2) GB/s, a copy curve falling from 4 MB (40 GB/s) to 16 MB
    # (10 GB/s) not consulted
    falling = dataclasses.replace(H100, curves={"bandwidth": ((4e6, 40e9), (16e6, 10e9))})
    assert beyond_the_curve(cast, 8e6, falling) == pytest.approx(4e9 * 2 ** 0.5)
