"""The calibration of a probed profile: the fit by hand, its file form, and its use."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import Calibration, Hardware
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.ledger.calibrate import (
    ROUND_SPREAD,
    Run,
    StepSample,
    calibration_toml,
    fit,
    round_spread,
)
from tensorledger.roofline import predict, predict_op
from tensorledger.roofline.compare import compare
from tensorledger.roofline.cost_classes import pieces
from tests.roofline.test_model import Op

# two calibration models: per category (ops, predicted kernel s, the profiler's own s)
A = StepSample(
    forward_backward=Run(step_s=20e-3, classes={},
                         kernel_by_phase={("forward-backward", "matmul"): 2e-3,
                                          ("forward-backward", "elementwise"): 1e-3},
                         ops_by_phase={"forward-backward": 50}),
    train=Run(step_s=40e-3, classes={"matmul": (10, 2e-3, 4.7e-3), "view": (20, 0.0, 2e-4),
                                        "elementwise": (30, 1.5e-3, 2.1e-3)},
              kernel_by_phase={("forward-backward", "matmul"): 2e-3,
                               ("forward-backward", "elementwise"): 1e-3,
                               ("optimizer", "elementwise"): 0.5e-3},
              ops_by_phase={"forward-backward": 50, "optimizer": 20}))
B = StepSample(
    forward_backward=Run(step_s=30e-3, classes={},
                         kernel_by_phase={("forward-backward", "matmul"): 4e-3},
                         ops_by_phase={"forward-backward": 30}),
    train=Run(step_s=45e-3, classes={"matmul": (10, 4e-3, 9.3e-3), "view": (20, 0.0, 2e-4),
                                        "elementwise": (10, 0.5e-3, 0.7e-3)},
              kernel_by_phase={("forward-backward", "matmul"): 4e-3,
                               ("optimizer", "elementwise"): 0.5e-3},
              ops_by_phase={"forward-backward": 30, "optimizer": 10}))


def test_fit_by_hand() -> None:
    cal = fit([A, B])
    # op cost: views run no kernel: (0.2 + 0.2 ms) / 40 views = 10 µs
    assert cal.op_cost_s == pytest.approx(4e-4 / 40)
    # matmul, less 10 ops × 10 µs entering them: A 4.6 ms = 2 ms × s + 10 × c,
    # B 9.2 ms = 4 ms × s + 10 × c: s = 2.3 and no cost a call
    assert cal.scale["matmul"] == pytest.approx(2.3)
    # elementwise: A 2.1 − 0.3 = 1.8 ms over 1.5 ms, B 0.7 − 0.1 = 0.6 ms over 0.5 ms: 1.2
    assert cal.scale["elementwise"] == pytest.approx(1.2)
    assert "view" not in cal.scale
    assert cal.call_cost_s == {} and cal.piece_cost_s == {}


def _steps(sample: StepSample, fb_s: float, train_s: float) -> StepSample:
    return StepSample(dataclasses.replace(sample.forward_backward, step_s=fb_s),
                      dataclasses.replace(sample.train, step_s=train_s))


# A and B with whole steps made of their scaled kernels, 10 µs to enter each op, and 300 µs
# between forward-backward ops and 500 µs between optimizer ops (the scales as fitted above):
# A forward-backward: 2·2.3 + 1·1.2 = 5.8 ms + 50 · 0.31 ms = 21.3 ms
# A train: 5.8 + 0.5·1.2 = 6.4 ms + 50 · 0.31 + 20 · 0.51 ms = 32.1 ms
# B forward-backward: 4·2.3 = 9.2 ms + 30 · 0.31 ms = 18.5 ms
# B train: 9.2 + 0.5·1.2 = 9.8 ms + 30 · 0.31 + 10 · 0.51 ms = 24.2 ms
A_EXACT = _steps(A, 21.3e-3, 32.1e-3)
B_EXACT = _steps(B, 18.5e-3, 24.2e-3)


def test_the_time_between_ops_is_fitted_on_whole_steps() -> None:
    cal = fit([A_EXACT, B_EXACT])
    assert cal.between_ops_s["forward-backward"] == pytest.approx(300e-6)
    assert cal.between_ops_s["optimizer"] == pytest.approx(500e-6)


@pytest.mark.parametrize("round_by_round", [False, True])
def test_the_time_between_ops_is_the_step_less_its_profiled_ops(round_by_round: bool) -> None:
    # the profiler's own time of every call, beside the whole step: what is left is between ops
    # A forward-backward: (20 − 5) ms over 50 ops = 300 µs
    # A train: 40 − 7 = 33 ms = 50 × 0.3 ms + 20 optimizer ops × 0.9 ms
    # B forward-backward: (30 − 21) ms over 30 ops = 300 µs
    # B train: 39 − 21 = 18 ms = 30 × 0.3 ms + 10 × 0.9 ms
    # Round by round, each run carries that residual as measured (Run.between_s), which the
    # fit takes over the step less its pooled calls (here set to half the step, to differ)
    def profiled(run: Run, step_s: float, ops_s: float) -> Run:
        if round_by_round:
            return dataclasses.replace(run, step_s=step_s, ops_s=step_s / 2,
                                       between_s=step_s - ops_s)
        return dataclasses.replace(run, step_s=step_s, ops_s=ops_s)

    cal = fit([StepSample(profiled(A.forward_backward, 20e-3, 5e-3),
                          profiled(A.train, 40e-3, 7e-3)),
               StepSample(profiled(B.forward_backward, 30e-3, 21e-3),
                          profiled(B.train, 39e-3, 21e-3))])
    assert cal.between_ops_s["forward-backward"] == pytest.approx(300e-6)
    assert cal.between_ops_s["optimizer"] == pytest.approx(900e-6)
    # the kernel scales come from the same runs as before: the whole steps do not move them
    assert cal.scale == pytest.approx(fit([A, B]).scale)


def test_the_fit_reproduces_its_samples() -> None:
    cal = fit([A_EXACT, B_EXACT])
    for name in ("matmul", "elementwise"):
        predicted = sum(s.train.classes[name][1] * cal.scale[name] +
                        s.train.classes[name][0] * cal.op_cost_s for s in (A, B))
        assert predicted == pytest.approx(sum(s.train.classes[name][2] for s in (A, B)))
    # every whole step: scaled kernels plus the per-op costs
    per_op = {g: cal.op_cost_s + cal.between(g) for g in ("forward", "optimizer")}
    for sample in (A_EXACT, B_EXACT):
        for run in (sample.forward_backward, sample.train):
            predicted = (sum(cal.scale[c] * k for (_, c), k in run.kernel_by_phase.items())
                         + run.ops_by_phase.get("forward-backward", 0) * per_op["forward"]
                         + run.ops_by_phase.get("optimizer", 0) * per_op["optimizer"])
            assert predicted == pytest.approx(run.step_s)


def test_steps_that_disagree_are_fitted_in_relative_terms() -> None:
    cal = fit([A, B])  # whole steps no single pair of figures reproduces

    def misfit(fb: float, opt: float) -> float:
        total = 0.0
        for sample in (A, B):
            for run in (sample.forward_backward, sample.train):
                ops = run.ops_by_phase
                predicted = (sum(cal.scale[c] * k for (_, c), k in run.kernel_by_phase.items())
                             + ops.get("forward-backward", 0) * (cal.op_cost_s + fb)
                             + ops.get("optimizer", 0) * (cal.op_cost_s + opt))
                total += (predicted / run.step_s - 1) ** 2
        return total

    best = (cal.between_ops_s["forward-backward"], cal.between_ops_s["optimizer"])
    assert min(best) > 0
    # a second code path: no nearby pair fits the four steps better
    for dx in (-1e-6, 0.0, 1e-6):
        for dy in (-1e-6, 0.0, 1e-6):
            assert misfit(best[0] + dx, best[1] + dy) >= misfit(*best) - 1e-15
    # steps faster than their kernels: no time between ops, never a negative one
    fast = fit([_steps(A, 1e-3, 2e-3), _steps(B, 1e-3, 2e-3)])
    assert fast.between_ops_s == {"forward-backward": 0.0, "optimizer": 0.0}


def test_the_profile_table_round_trips() -> None:
    cal = fit([A, B], source="two models")
    text = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n') + calibration_toml(cal)
    chip = parse_hardware_toml(text, "test", "local")
    assert chip.calibration is not None
    assert chip.calibration.scale == pytest.approx(cal.scale)
    assert chip.calibration.op_cost_s == pytest.approx(cal.op_cost_s)
    assert chip.calibration.between_ops_s == pytest.approx(cal.between_ops_s)
    assert chip.calibration.source == "two models"
    assert chip.calibration.unreliable == () and chip.unreliable == ()


def test_a_calibration_step_whose_rounds_disagree_is_named_unreliable() -> None:
    # rounds of 40, 44 and 50 ms: (50 − 40) / 44 = 22.7% > ROUND_SPREAD; 40, 41, 42: 4.9%
    assert round_spread([40e-3, 44e-3, 50e-3]) == pytest.approx(10 / 44)
    assert round_spread([40e-3, 41e-3, 42e-3]) == pytest.approx(2 / 41)
    assert 2 / 41 < ROUND_SPREAD < 10 / 44
    named = "calibration calibration-gpt train step (rounds differ by 23%)"
    cal = dataclasses.replace(fit([A, B], source="two models"), unreliable=(named,))
    text = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n'
            'unreliable = ["matmul fp32 64 (spread 12%)"]\n[dense]\n'
            'fp32 = "100GFLOP/s"\n') + calibration_toml(cal)
    chip = parse_hardware_toml(text, "test", "local")
    assert chip.calibration is not None and chip.calibration.unreliable == (named,)
    # the profile's own figures and the calibration's, so every prediction names both
    assert chip.unreliable == ("matmul fp32 64 (spread 12%)", named)


CHIP = Hardware(id="cpu", name="cpu", memory_bytes=8e9, memory_bandwidth_bytes_per_s=1e10,
                dense_flop_per_s={"fp32": 1e11, "bf16": 1e11}, origin="test")
CAL = Calibration(scale={"matmul": 2.0}, op_cost_s=1e-6,
                  between_ops_s={"forward-backward": 5e-6, "optimizer": 20e-6})


def test_a_calibrated_op_by_hand() -> None:
    chip = dataclasses.replace(CHIP, calibration=CAL)
    mm = Op("aten.mm.default", "matmul", 2 * 10**8, 10**6, 0, ("fp32",), ("fp32",),
            phase="backward")
    p = predict_op(0, mm, chip)
    # 2e8 FLOPs at 1e11 FLOP/s = 2 ms, × 2 = 4 ms; + 1 µs entering + 5 µs between ops
    assert p.time_s == pytest.approx(4e-3 + 1e-6 + 5e-6)
    assert p.between_ops_s == pytest.approx(5e-6)
    add = Op("aten.add_.Tensor", "elementwise", 10, 80, 40, ("fp32",), ("fp32",),
             phase="optimizer")
    q = predict_op(0, add, chip)  # no scale for elementwise: 120 B at 1e10 B/s = 12 ns
    assert q.time_s == pytest.approx(120 / 1e10 + 1e-6 + 20e-6)
    assert q.ideal_time_s == pytest.approx(120 / 1e10) and q.ideal_time_s <= q.time_s


def test_between_ops_is_set_beside_the_measured_residual() -> None:
    from tensorledger.bench.optiming import OpTime

    chip = dataclasses.replace(CHIP, calibration=CAL)
    ops = [Op("aten.mm.default", "matmul", 2 * 10**8, 10**6, 0, ("fp32",), ("fp32",))]
    prediction = predict(ops, chip)
    result = compare(prediction, [[OpTime("aten.mm.default", 4e-3)]], measured_step_s=4.010e-3,
                     peak_flop_per_s=1e11)
    (matmul,) = result.categories
    assert matmul.predicted_s == pytest.approx(4e-3 + 1e-6)  # without the 5 µs between ops
    assert result.predicted_between_s == pytest.approx(5e-6)
    assert result.unattributed_s == pytest.approx(10e-6)  # 4.010 − 4 ms
    assert result.between_error == pytest.approx(5e-6 / 10e-6 - 1)  # −50%


def _copies(ops: int, kernel_s: float, parts: float, measured_s: float) -> StepSample:
    run = Run(step_s=1.0, classes={"copy": (ops, kernel_s, measured_s),
                                      "view": (20, 0.0, 2e-4)},
              kernel_by_phase={}, ops_by_phase={}, pieces={"copy": parts})
    return StepSample(forward_backward=dataclasses.replace(run, classes={}), train=run)


@dataclass(frozen=True)
class Copy(Op):
    output_shapes: tuple[tuple[int, ...], ...] = ()


def test_a_cost_a_call_and_a_piece_by_hand() -> None:
    # copies at scale 1.5, 50 µs a call and 10 ns a piece (rows written), 10 µs to enter
    # each op (20 views of 10 µs): measured = 1.5 × kernel + 50 µs × ops + 10 ns × pieces
    # + 10 µs × ops
    runs = [_copies(10, 1e-3, 1e3, 1.5e-3 + 0.5e-3 + 0.01e-3 + 0.1e-3),
            _copies(20, 3e-3, 5e4, 4.5e-3 + 1.0e-3 + 0.5e-3 + 0.2e-3),
            _copies(10, 2e-3, 2e5, 3.0e-3 + 0.5e-3 + 2.0e-3 + 0.1e-3)]
    cal = fit(runs)
    assert cal.scale["copy"] == pytest.approx(1.5)
    assert cal.call_cost_s["copy"] == pytest.approx(50e-6)
    assert cal.piece_cost_s["copy"] == pytest.approx(10e-9)
    text = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n') + calibration_toml(cal)
    chip = parse_hardware_toml(text, "test", "local")
    assert chip.calibration is not None
    assert chip.calibration.call_cost_s == pytest.approx(cal.call_cost_s)
    assert chip.calibration.piece_cost_s == pytest.approx(cal.piece_cost_s)
    # a clone writing (4, 8, 16): 32 rows of 16; 4 kB moved at 10 GB/s = 0.4 µs × 1.5
    clone = Copy("aten.clone.default", "copy", 0, 2048, 2048, ("fp32",), ("fp32",),
                 output_shapes=((4, 8, 16),))
    p = predict_op(0, clone, chip)
    assert p.time_s == pytest.approx(1.5 * 4096 / 1e10 + 50e-6 + 32 * 10e-9 + 10e-6)


def test_a_matmul_is_priced_a_byte_it_moves_by_hand() -> None:
    # matmuls at scale 1.2, 20 µs a call and 0.1 ns a byte moved, nothing to enter an op:
    # measured = 1.2 × kernel + 20 µs × ops + 0.1 ns × bytes
    def run(ops: int, kernel_s: float, moved: float) -> StepSample:
        measured = 1.2 * kernel_s + 20e-6 * ops + 0.1e-9 * moved
        step = Run(step_s=1.0, classes={"matmul": (ops, kernel_s, measured)},
                   kernel_by_phase={}, ops_by_phase={}, pieces={"matmul": moved})
        return StepSample(forward_backward=dataclasses.replace(step, classes={}), train=step)

    cal = fit([run(10, 1e-3, 1e6), run(20, 2e-3, 4e7), run(10, 5e-3, 3e6)])
    assert cal.scale["matmul"] == pytest.approx(1.2)
    assert cal.call_cost_s["matmul"] == pytest.approx(20e-6)
    assert cal.piece_cost_s["matmul"] == pytest.approx(0.1e-9)
    # a 256×256 @ 256×256 fp32 mm: 2·256³ FLOPs at 100 GFLOP/s = 335.5 µs; it reads two
    # 256 kB operands and writes a third, 786,432 bytes: 78.6 µs at 0.1 ns a byte
    mm = Op("aten.mm.default", "matmul", 2 * 256**3, 2 * 4 * 256**2, 4 * 256**2, ("fp32",),
            ("fp32",))
    assert pieces(mm) == 786_432
    chip = dataclasses.replace(CHIP, calibration=cal)
    assert predict_op(0, mm, chip).time_s == pytest.approx(
        1.2 * 2 * 256**3 / 1e11 + 20e-6 + 786_432 * 0.1e-9)


def test_costly_elementwise_ops_have_their_own_scale() -> None:
    cal = Calibration(scale={"elementwise": 1.0, "elementwise-costly": 3.0}, op_cost_s=0.0,
                      between_ops_s={})
    chip = dataclasses.replace(CHIP, calibration=cal)
    moved = 4 * 10**6  # 8 MB at 10 GB/s: 0.8 ms
    gelu = Op("aten.gelu.default", "elementwise", 0, moved, moved, ("fp32",), ("fp32",))
    add = Op("aten.add.Tensor", "elementwise", 0, moved, moved, ("fp32",), ("fp32",))
    assert predict_op(0, gelu, chip).time_s == pytest.approx(3 * 0.8e-3)
    assert predict_op(0, add, chip).time_s == pytest.approx(0.8e-3)
    # a profile without the class prices the op at its category's scale
    plain = dataclasses.replace(chip, calibration=dataclasses.replace(
        cal, scale={"elementwise": 2.0}))
    assert predict_op(0, gelu, plain).time_s == pytest.approx(2 * 0.8e-3)


def test_a_costly_op_pays_a_cost_a_flop_and_a_dividing_op_its_own_scale() -> None:
    cal = Calibration(scale={"elementwise": 1.0, "elementwise-costly": 1.0,
                             "elementwise-dividing": 0.5}, op_cost_s=0.0, between_ops_s={},
                      piece_cost_s={"elementwise-costly": 1e-9})
    chip = dataclasses.replace(CHIP, calibration=cal)
    n = 10**6  # floats in, floats out: 8 MB at 10 GB/s = 0.8 ms
    gelu = Op("aten.gelu.default", "elementwise", 20 * n, 4 * n, 4 * n, ("fp32",), ("fp32",))
    silu = Op("aten.silu.default", "elementwise", 4 * n, 4 * n, 4 * n, ("fp32",), ("fp32",))
    div = Op("aten.div.Tensor", "elementwise", n, 4 * n, 4 * n, ("fp32",), ("fp32",))
    # GELU: 0.8 ms + 20·10⁶ FLOPs × 1 ns; SiLU: 0.8 ms + 4·10⁶ × 1 ns
    assert predict_op(0, gelu, chip).time_s == pytest.approx(0.8e-3 + 20e-3)
    assert predict_op(0, silu, chip).time_s == pytest.approx(0.8e-3 + 4e-3)
    # a division: its own scale, no cost a FLOP; 0.5 × 0.8 ms is below the bound of 0.8 ms
    assert predict_op(0, div, chip).time_s == pytest.approx(0.8e-3)
    slow = dataclasses.replace(chip, calibration=dataclasses.replace(
        cal, scale={"elementwise": 1.0, "elementwise-dividing": 1.5}))
    assert predict_op(0, div, slow).time_s == pytest.approx(1.5 * 0.8e-3)


def test_the_optimizers_elementwise_ops_are_a_class_of_their_own() -> None:
    cal = Calibration(scale={"elementwise": 2.0, "elementwise-dividing": 3.0,
                             "elementwise-optimizer": 1.5}, op_cost_s=0.0,
                      between_ops_s={}, call_cost_s={"elementwise": 4e-3,
                                                     "elementwise-dividing": 5e-3,
                                                     "elementwise-optimizer": 1e-3})
    chip = dataclasses.replace(CHIP, calibration=cal)
    n = 10**6  # floats in, floats out: 8 MB at 10 GB/s = 0.8 ms
    forward = Op("aten.addcdiv_.default", "elementwise", 3 * n, 4 * n, 4 * n, ("fp32",),
                 ("fp32",))
    update = dataclasses.replace(forward, phase="optimizer")
    # in the forward pass a dividing op: 3 × 0.8 ms + 5 ms; in the optimizer its own class,
    # dividing or not: 1.5 × 0.8 ms + 1 ms
    assert predict_op(0, forward, chip).time_s == pytest.approx(3 * 0.8e-3 + 5e-3)
    assert predict_op(0, update, chip).time_s == pytest.approx(1.5 * 0.8e-3 + 1e-3)
    # a profile fitted before the class was split off prices it as before: dividing
    old = dataclasses.replace(chip, calibration=dataclasses.replace(cal, scale={
        "elementwise": 2.0, "elementwise-dividing": 3.0}))
    assert predict_op(0, update, old).time_s == pytest.approx(3 * 0.8e-3 + 5e-3)


def test_a_norms_reductions_and_divisions_are_priced_apart_or_as_the_norm() -> None:
    cal = Calibration(scale={"normalization": 2.0, "normalization-reduction": 3.0,
                             "normalization-bf16": 4.0}, op_cost_s=0.0, between_ops_s={},
                      call_cost_s={"normalization": 1e-3, "normalization-reduction": 2e-3,
                                   "normalization-bf16": 3e-3})
    chip = dataclasses.replace(CHIP, calibration=cal)
    n = 10**6  # a mean over rows of 1,000 floats: 4 MB in, 4 kB out ≈ 0.4 ms at 10 GB/s
    mean = Op("aten.mean.dim", "normalization", n, 4 * n, 4 * n // 1000, ("fp32",),
              ("fp32",))
    moved = predict_op(0, mean, CHIP).memory_time_s  # CHIP: uncalibrated
    # the fitted class of its own: 3 × the memory time + 2 ms
    assert predict_op(0, mean, chip).time_s == pytest.approx(3 * moved + 2e-3)
    # a profile fitted before the split prices it as the norm's: 2 × + 1 ms
    old = dataclasses.replace(chip, calibration=dataclasses.replace(cal, scale={
        "normalization": 2.0, "normalization-bf16": 4.0}))
    assert predict_op(0, mean, old).time_s == pytest.approx(2 * moved + 1e-3)
    # a bf16 division in a norm: no bf16 class of its own, nor an fp32 one, but the norm's
    # bf16 class comes before the fp32 classes: 4 × + 3 ms
    div = Op("aten.div.Tensor", "normalization", n, 4 * n, 2 * n, ("bf16", "bf16"),
             ("bf16",))
    moved = predict_op(0, div, CHIP).memory_time_s
    assert predict_op(0, div, chip).time_s == pytest.approx(4 * moved + 3e-3)


def test_an_attentions_backward_is_priced_apart_from_its_forward_or_as_attention() -> None:
    cal = Calibration(scale={"attention-bf16": 2.0, "attention-backward-bf16": 3.0},
                      op_cost_s=0.0, between_ops_s={},
                      call_cost_s={"attention-bf16": 1e-3, "attention-backward-bf16": 2e-3})
    chip = dataclasses.replace(CHIP, calibration=cal)
    shape = ((4, 8, 256, 64),)  # queries (batch, heads, positions, head width), in bf16
    forward = Op("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention",
                 10**9, 4 * 2**20, 2**20, ("bf16",) * 3, ("bf16",), input_shapes=shape)
    backward = dataclasses.replace(
        forward, op="aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
        flops=2 * 10**9, phase="backward")
    # uncalibrated, each at its FLOPs: 1e9 (2e9) at 1e11 FLOP/s = 10 (20) ms
    ahead, behind = (predict_op(0, op, CHIP).compute_time_s for op in (forward, backward))
    assert (ahead, behind) == (pytest.approx(10e-3), pytest.approx(20e-3))
    # the forward at the attention's class: 2 × 10 ms + 1 ms; the backward at its own:
    # 3 × 20 ms + 2 ms
    assert predict_op(0, forward, chip).time_s == pytest.approx(2 * ahead + 1e-3)
    assert predict_op(0, backward, chip).time_s == pytest.approx(3 * behind + 2e-3)
    # a profile fitted before the backward was split off prices it as the attention's:
    # 2 × 20 ms + 1 ms
    old = dataclasses.replace(chip, calibration=dataclasses.replace(cal, scale={
        "attention-bf16": 2.0}))
    assert predict_op(0, backward, old).time_s == pytest.approx(2 * behind + 1e-3)


def test_a_profile_fitted_on_fp32_steps_prices_a_bf16_norm_part_by_the_fp32_classes() -> None:
    n = 10**6
    mean = Op("aten.mean.dim", "normalization", n, 2 * n, 2 * n // 1000, ("bf16",), ("bf16",))
    moved = predict_op(0, mean, CHIP).memory_time_s  # CHIP: uncalibrated
    # fitted on fp32 steps with the norm's parts apart: the fp32 reduction class, 3 × + 2 ms
    split = Calibration(scale={"normalization": 2.0, "normalization-reduction": 3.0},
                        op_cost_s=0.0, between_ops_s={},
                        call_cost_s={"normalization": 1e-3, "normalization-reduction": 2e-3})
    chip = dataclasses.replace(CHIP, calibration=split)
    assert predict_op(0, mean, chip).time_s == pytest.approx(3 * moved + 2e-3)
    # fitted on fp32 steps before the split: the norm's fp32 class, its scale and its cost a
    # call (a class the profile lacks would add none), 2 × + 1 ms
    old = dataclasses.replace(chip, calibration=dataclasses.replace(split, scale={
        "normalization": 2.0}))
    assert predict_op(0, mean, old).time_s == pytest.approx(2 * moved + 1e-3)


def test_the_optimizers_class_missing_a_bf16_update_falls_to_the_fp32_category() -> None:
    # the optimizer's class was split off before the classes by dtype: a profile without it
    # was fitted on fp32 steps, and its elementwise figures price the update (2 ×), not a bf16
    # class a hand-made profile might hold beside them (3 ×)
    cal = Calibration(scale={"elementwise": 2.0, "elementwise-bf16": 3.0}, op_cost_s=0.0,
                      between_ops_s={})
    chip = dataclasses.replace(CHIP, calibration=cal)
    n = 10**6
    update = Op("aten.add_.Tensor", "elementwise", n, 4 * n, 2 * n, ("bf16", "bf16"),
                ("bf16",), phase="optimizer")
    memory = predict_op(0, update, CHIP).memory_time_s  # uncalibrated
    assert predict_op(0, update, chip).memory_time_s == pytest.approx(2 * memory)


def test_a_factor_below_one_stops_at_the_bound() -> None:
    fast = Calibration(scale={"elementwise": 0.1}, op_cost_s=0.0, between_ops_s={})
    chip = dataclasses.replace(CHIP, calibration=fast)
    add = Op("aten.add.Tensor", "elementwise", 10**6, 8 * 10**6, 4 * 10**6, ("fp32",),
             ("fp32",))
    p = predict_op(0, add, chip)
    # 12 MB at 10 GB/s = 1.2 ms is the bound; 0.1 × 1.2 ms would beat it
    assert p.ideal_time_s == pytest.approx(1.2e-3) and p.time_s == pytest.approx(1.2e-3)


def test_calibrate_times_every_step_in_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.ledger.calibrate as calibration
    from tensorledger.napkin.transformer import TransformerConfig

    small = TransformerConfig(name="cal-a", vocab_size=64, context_length=8, d_model=16,
                              n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32, mlp="swiglu",
                              norm="rmsnorm", positions="rope", tied_embeddings=False,
                              bias=False)
    models = ((small, 2, 8), (dataclasses.replace(small, name="cal-b", d_model=32), 2, 8))
    monkeypatch.setattr(calibration, "CALIBRATION_MODELS", models)
    monkeypatch.setattr(calibration, "CALIBRATION_RECIPES", ("fp32",))  # the others: below
    monkeypatch.setattr(calibration, "ROUND_SPREAD", -1.0)  # every step named, to read them
    said: list[str] = []
    chip = Hardware(id="local", name="cpu", memory_bytes=8e9, memory_bandwidth_bytes_per_s=1e10,
                    dense_flop_per_s={"fp32": 1e11}, origin="test", op_overhead_s=1e-6)
    cal = calibration.calibrate(chip, budget_s=0.02, rounds=2, progress=said.append)
    # 2 models × 2 steps, each timed in 2 rounds taken in turn, then (every spread above the
    # threshold) in 2 rounds more
    rounds = [line for line in said if line.startswith("calibration round")]
    assert rounds == [f"calibration round {r} of {last}: cal-{m} {s} step"
                      for r, last in ((1, 2), (2, 2), (3, 4), (4, 4))
                      for m in "ab" for s in ("forward-backward", "train")]
    assert [u.split(" (rounds differ by")[0] for u in cal.unreliable] == [
        f"calibration cal-{m} {s} step" for m in "ab" for s in ("forward-backward", "train")]
    assert "4 rounds each" in cal.source and cal.scale["matmul"] > 0
    # the train steps' AdamW fits the optimizer's elementwise class, beside the forward's
    assert cal.scale["elementwise-optimizer"] > 0 and cal.scale["elementwise"] > 0
    assert min(cal.between_ops_s.values()) >= 0
    with pytest.raises(InputError):
        calibration.calibrate(chip, rounds=0)
    # the rounds on their own, as a benchmark takes them in turn with its workloads
    session = calibration.CalibrationRounds(chip)
    with pytest.raises(InputError, match="one round at least"):
        session.fitted()
    session.round(0.01)
    assert session.taken == 1 and all(len(t.round_medians_s) == 1 for _, t in session.steps)
    assert "1 rounds each" in session.fitted().source
    for _, timed in session.steps:  # the views by op add up to the view class
        run = calibration._run(timed, session.hardware)
        count, _, seconds = run.classes["view"]
        assert sum(n for n, _ in run.views.values()) == count
        assert "aten.view" in run.views and all(op.startswith("aten.") for op in run.views)
        # one profiled step: the medians are its sums; the class also holds the views the
        # profiler saw that the trace did not make (matched by name, by their rule)
        assert 0 < sum(s for _, s in run.views.values()) <= seconds * (1 + 1e-9)
    assert session.fitted().view_weights
    # a profile whose every new tensor costs fresh pages, at 1 TB/s: the run's step and its
    # ops' own time are the measured ones less the bytes the step's ops make / 1 TB/s (the
    # fit leaves that known part out; the roofline adds it back)
    _, timed = session.steps[0]
    fresh = dataclasses.replace(session.hardware, fresh_pages_from_bytes=1.0,
                                fresh_page_bytes_per_s=1e12)
    plain, less = calibration._run(timed, session.hardware), calibration._run(timed, fresh)
    made_s = sum(size for r in timed.records for _, size in r.storages_created) / 1e12
    assert made_s > 0
    assert plain.step_s - less.step_s == pytest.approx(made_s)
    assert sum(m for _, _, m in plain.classes.values()) - sum(
        m for _, _, m in less.classes.values()) <= made_s * (1 + 1e-9)
    # a profile that prices attention from a head's rate and a call's own cost: its
    # attention ops count no pieces (their query blocks are in the heads' time), each other
    # class counts what it did
    calls = {f"attention-call.fp32.{d}.d16": ((1.0, 1e6),) for d in ("forward", "backward")}
    called = calibration._run(timed, dataclasses.replace(
        session.hardware, curves={**session.hardware.curves, **calls}))
    attention = ("attention", "attention-backward")  # its forward and backward classes
    assert all(plain.pieces[c] > 0 and called.pieces[c] == 0 for c in attention)
    assert {c: n for c, n in called.pieces.items() if c not in attention} == {
        c: n for c, n in plain.pieces.items() if c not in attention}
    # and their classes are the run's own calls (the fit adds them no cost a call): no other
    # class, nor any where the profile has no call curve
    assert called.own_calls == frozenset(attention) and plain.own_calls == frozenset()
    # two steps profiled a round: two profiles a round, fitted all the same
    twice = calibration.CalibrationRounds(chip, profiled=2)
    twice.round(0.01)
    assert all(len(t.profiles) == 2 and len(t.round_medians_s) == 1 for _, t in twice.steps)
    assert "1 rounds each (2 steps profiled a round)" in twice.fitted().source
    with pytest.raises(InputError, match="one step at least"):
        calibration.CalibrationRounds(chip, profiled=0)
    # the probe's matmul sweep timed in the same rounds: the steps are priced on its curve
    import importlib
    import statistics

    from tests.bench.test_probe_noise import FakeClock

    probe_module = importlib.import_module("tensorledger.bench.probe")  # not probe()

    timed: dict[int, list[float]] = {}
    real = probe_module.matmul_round

    def fake_round(n: int, budget_s: float) -> object:  # n µs a sample, then 3n µs
        found = real(n, budget_s, clock=FakeClock([n * 1e-6 * (1 + 2 * len(timed.get(n, [])))]))
        timed.setdefault(n, []).extend(found.samples_s)
        return found

    monkeypatch.setattr(probe_module, "matmul_round", fake_round)
    probed = dataclasses.replace(chip, curves={"matmul.fp32": ((2 * 16**3, 1e9),
                                                                (2 * 32**3, 2e9))})
    swept = calibration.CalibrationRounds(probed, sweep=True)
    swept.round(0.01)
    swept.round(0.01)
    assert "matmul curve timed again in the same rounds" in swept.fitted().source
    assert sorted(timed) == [16, 32]  # the sizes of the probed curve: 2·16³ and 2·32³ FLOPs
    curve = tuple((2.0 * n**3, 2.0 * n**3 / statistics.median(timed[n])) for n in (16, 32))
    assert [x for point in swept.hardware.curves["matmul.fp32"] for x in point] == pytest.approx(
        [x for point in curve for x in point])
    assert swept.hardware.dense_flop_per_s["fp32"] == pytest.approx(max(r for _, r in curve))
    for _, step in swept.steps:  # every step priced again on the re-timed curve
        for op in step.prediction.ops:
            if op.category == "matmul":
                assert op.compute_time_s == pytest.approx(
                    op.flops / swept.hardware.expected_flop_rate("matmul.fp32", "fp32", op.flops))
    # without the sweep, nothing is timed and the probed curve stays
    plain = calibration.CalibrationRounds(probed)
    plain.round(0.01)
    assert "timed again" not in plain.fitted().source
    assert plain.hardware.curves == probed.curves and sorted(timed) == [16, 32]


@pytest.mark.parametrize(("second", "named"), [((1e-3, 3e-3), False), ((3e-3, 5e-3), True)])
def test_a_calibration_whose_rounds_differ_is_measured_again(
        monkeypatch: pytest.MonkeyPatch, second: tuple[float, float], named: bool) -> None:
    import tensorledger.ledger.calibrate as calibration
    from tensorledger.napkin.transformer import TransformerConfig

    small = TransformerConfig(name="cal-a", vocab_size=64, context_length=8, d_model=16,
                              n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32, mlp="swiglu",
                              norm="rmsnorm", positions="rope", tied_embeddings=False,
                              bias=False)
    monkeypatch.setattr(calibration, "CALIBRATION_MODELS", ((small, 2, 8),))
    monkeypatch.setattr(calibration, "CALIBRATION_RECIPES", ("fp32",))
    real = calibration._time_round
    # a fake clock: each step's two rounds take 1 and 3 ms (a spread of (3 − 1) / 2 = 100%),
    # then ``second``: 1 and 3 ms again (the same median, 2 ms: reproduced), or 3 and 5 ms
    # (median 4 ms, moved by (4 − 2) / 3 = 67% of the pooled 3 ms: named); the rounds go
    # round both steps in turn
    times = iter([1e-3, 1e-3, 3e-3, 3e-3] + [t for t in second for _ in range(2)])

    def fake(timed, budget_s, name, *profiled):  # type: ignore[no-untyped-def]
        before = len(timed.samples_s)
        real(timed, budget_s, name, *profiled)
        step = next(times)
        del timed.samples_s[before:]  # the round's samples: one, faked
        timed.samples_s.append(step)
        timed.round_medians_s[-1] = step

    monkeypatch.setattr(calibration, "_time_round", fake)
    said: list[str] = []
    chip = Hardware(id="local", name="cpu", memory_bytes=8e9, memory_bandwidth_bytes_per_s=1e10,
                    dense_flop_per_s={"fp32": 1e11}, origin="test", op_overhead_s=1e-6)
    cal = calibration.calibrate(chip, budget_s=0.01, rounds=2, progress=said.append)
    assert ("calibration: the rounds of 2 of 2 steps differ by more than 10%; measuring every "
            "step again in 2 rounds more") in said
    assert "4 rounds each" in cal.source
    if named:
        assert cal.unreliable == tuple(
            f"calibration cal-a {s} step (rounds differ by 100%; measured again, its median "
            "moved by 67%)" for s in ("forward-backward", "train"))
    else:
        assert cal.unreliable == ()


def _with_footprint(run: Run, moved: float, view_s: float,
                    optimizer: float | None = None) -> Run:
    """``run`` with one op that moves ``moved`` bytes (its footprint) and 20 views that take
    ``view_s`` each; with ``optimizer``, an optimizer op too, with no kernel, that moves
    ``optimizer`` bytes."""
    classes = dict(run.classes) | {"view": (20, 0.0, 20 * view_s)}
    extra = () if optimizer is None else (
        ("elementwise-optimizer", "optimizer", 0.0, 0.0, 0.0, optimizer, 0.0),)
    return dataclasses.replace(run, classes=classes, ops=(
        ("matmul", "forward-backward", 1e-3, 0.0, 0.0, moved, 0.0), *extra))


def test_the_cost_of_entering_an_op_by_the_steps_footprint_by_hand() -> None:
    # A's train step moves 10 kB an op and its views take 10 µs; B's 1 MB and 20 µs
    a = StepSample(A.forward_backward, _with_footprint(A.train, 1e4, 10e-6))
    b = StepSample(B.forward_backward, _with_footprint(B.train, 1e6, 20e-6))
    cal = fit([a, b])
    # two points: the line through them, log-log
    assert [x for point in cal.op_cost_by_footprint for x in point] == pytest.approx(
        [1e4, 10e-6, 1e6, 20e-6])
    # 100 kB is half way in log: 10 µs × 2^0.5 = 14.14 µs; flat beyond the ends
    assert cal.entry(1e5) == pytest.approx(10e-6 * 2**0.5)
    assert cal.entry(1e3) == pytest.approx(10e-6) and cal.entry(1e8) == pytest.approx(20e-6)
    assert cal.entry(None) == pytest.approx(cal.op_cost_s) == pytest.approx(0.6e-3 / 40)
    # matmul: each run's measured less its own cost of entry: A 4.7 ms − 10 × 10 µs = 4.6 ms
    # = 2 ms × s + 10 × c, B 9.3 ms − 10 × 20 µs = 9.1 ms = 4 ms × s + 10 × c:
    # s = 4.5 / 2 = 2.25 and c = (4.6 − 4.5) ms / 10 = 10 µs a call
    assert cal.scale["matmul"] == pytest.approx(2.25)
    assert cal.call_cost_s["matmul"] == pytest.approx(10e-6)
    text = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n') + calibration_toml(cal)
    chip = parse_hardware_toml(text, "test", "local")
    assert chip.calibration is not None
    assert chip.calibration.op_cost_by_footprint == cal.op_cost_by_footprint
    # a step's ops are priced at its own footprint: (10 + 1000 B) / 2 ops moving any = 505 B
    cheap = Op("aten.add.Tensor", "elementwise", 0, 5, 5, ("fp32",), ("fp32",))
    dear = Op("aten.add.Tensor", "elementwise", 0, 500, 500, ("fp32",), ("fp32",))
    prediction = predict([cheap, dear], chip)
    assert [o.overhead_s - o.between_ops_s for o in prediction.ops] == pytest.approx(
        [cal.entry(505.0)] * 2)
    assert predict_op(0, cheap, chip, footprint=1e5).overhead_s == pytest.approx(
        10e-6 * 2**0.5 + chip.calibration.between("forward", 1e5))


def test_the_time_between_ops_grows_with_its_phase_groups_footprint() -> None:
    # both runs of A move 10 kB an op, their views take 10 µs; B's 1 MB and 20 µs: entering an
    # op costs 15 µs on average ((20 · 10 + 20 · 20) µs / 40 views), so A's ops are at 2/3 of
    # it and B's at 4/3 (flat beyond 1 MB).  Each run is one matmul op priced 2.25 × 1 ms +
    # 10 µs a call + its entry (as fitted in the test above), and each train run one
    # optimizer op with no kernel, its entry alone: A 2.27 and 2.28 ms, B 2.28 and 2.30 ms.
    # A's train ops move 10 kB in both groups; B's train step moves 1 MB an op too, but its
    # forward-backward op 1.5 MB (4/3 again) and its optimizer op 0.5 MB, half way from
    # 10 kB to 1 MB in log: entering costs 10 µs × 2^(log 50 / log 100), a ratio of 1.201.
    # 300 µs between forward-backward ops and 600 µs between optimizer ops at 15 µs, scaled:
    # A forward-backward: 2.27 + 50 · 0.2 = 12.27 ms; train: 2.28 + 10 + 20 · 0.4 = 20.28 ms
    # B forward-backward: 2.28 + 30 · 0.4 = 14.28 ms; train: 2.30 + 12 + 10 · 0.6 · 1.201
    half = 10e-6 * 2 ** math.log(50, 100) / 15e-6

    def run(base: Run, moved: float, view_s: float, step_s: float,
            optimizer: float | None = None) -> Run:
        return dataclasses.replace(_with_footprint(base, moved, view_s, optimizer),
                                   step_s=step_s)

    a = StepSample(run(A.forward_backward, 1e4, 10e-6, 12.27e-3),
                   run(A.train, 1e4, 10e-6, 20.28e-3, optimizer=1e4))
    b = StepSample(run(B.forward_backward, 1e6, 20e-6, 14.28e-3),
                   run(B.train, 1.5e6, 20e-6, (14.30 + 6 * half) * 1e-3, optimizer=0.5e6))
    cal = fit([a, b])
    assert cal.op_cost_s == pytest.approx(15e-6)
    assert cal.between_ops_s["forward-backward"] == pytest.approx(300e-6)
    assert cal.between_ops_s["optimizer"] == pytest.approx(600e-6)
    assert cal.between("forward", 1e4) == pytest.approx(200e-6)
    assert cal.between("optimizer", 1e6) == pytest.approx(800e-6)
    assert cal.between("optimizer", 0.5e6) == pytest.approx(600e-6 * half)
    # 100 kB: entering costs 10 µs × 2^0.5, so 300 µs × 10 · 2^0.5 / 15 = 282.8 µs
    assert cal.between("backward", 1e5) == pytest.approx(200e-6 * 2**0.5)
    assert cal.between("forward", None) == pytest.approx(300e-6)  # footprint not known
    chip = dataclasses.replace(CHIP, calibration=cal)
    add = Op("aten.add.Tensor", "elementwise", 0, 500, 500, ("fp32",), ("fp32",))
    op = predict_op(0, add, chip, footprint=1e5)
    assert op.between_ops_s == pytest.approx(200e-6 * 2**0.5)
    # a step: each op's time between ops at its phase group's footprint, its entry at the
    # step's: a forward op moving 1 MB (4/3) and an optimizer op moving 10 kB (2/3), of a
    # step whose ops move 505 kB on average
    big = Op("aten.add.Tensor", "elementwise", 0, 500_000, 500_000, ("fp32",), ("fp32",))
    step = predict([big, dataclasses.replace(add, phase="optimizer", bytes_read=5_000,
                                             bytes_written=5_000)], chip)
    assert [o.between_ops_s for o in step.ops] == pytest.approx([400e-6, 400e-6])
    assert [o.overhead_s - o.between_ops_s for o in step.ops] == pytest.approx(
        [cal.entry(505e3)] * 2)


def test_a_bad_footprint_curve_is_refused() -> None:
    from tensorledger.errors import ConfigError

    base = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n[calibration]\n')
    for bad in ("[[2e6, 1e-5], [1e4, 2e-5]]", "[[1e4, -1e-5]]", '[[1e4, "10us"]]', "3"):
        with pytest.raises(ConfigError, match="op_cost_by_footprint"):
            parse_hardware_toml(base + f"op_cost_by_footprint = {bad}\n", "test", "local")


def test_bad_class_costs_and_old_profiles_are_refused() -> None:
    from tensorledger.errors import ConfigError

    base = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n[calibration]\n')
    for key in ("call_cost", "piece_cost"):
        for bad in ('"20us"', '{ copy = "-1us" }', "{ copy = true }", '{ copy = "fast" }'):
            with pytest.raises(ConfigError, match=key):
                parse_hardware_toml(base + f"{key} = {bad}\n", "test", "local")
    # the size curves of an older calibration: the message says to probe again
    with pytest.raises(ConfigError, match="probe` again"):
        parse_hardware_toml(base + "scale_by_size = { copy = [[1e3, 1.0]] }\n", "test", "local")


def test_views_are_weighed_by_op_by_hand() -> None:
    """An unbind makes several tensors, a detach one: each view op's cost of entering is
    weighed against ``aten.view``'s, and the footprint line runs through views at those
    weights."""
    # A (10 kB an op): 10 views of 2 µs, 10 t of 4 µs; B (1 MB): 20 views of 3 µs, 5 t of
    # 6 µs, 5 unbind of 12 µs.  Against aten.view: t 2 in both, unbind 4.  The runs' 50 views
    # weigh 10 + 20 + 20 + 10 + 20 = 80 at those figures, so each is scaled by 50 / 80:
    # view 0.625, t 1.25, unbind 2.5
    def run(base: Run, moved: float, views: dict[str, tuple[int, float]]) -> Run:
        calls = sum(n for n, _ in views.values())
        return dataclasses.replace(
            base, classes=dict(base.classes) | {"view": (calls, 0.0,
                                                         sum(t for _, t in views.values()))},
            ops=(("matmul", "forward-backward", 1e-3, 0.0, 0.0, moved, 0.0),), views=views)

    a = StepSample(A.forward_backward, run(A.train, 1e4, {"aten.view": (10, 20e-6),
                                                          "aten.t": (10, 40e-6)}))
    b = StepSample(B.forward_backward, run(B.train, 1e6, {"aten.view": (20, 60e-6),
                                                          "aten.t": (5, 30e-6),
                                                          "aten.unbind": (5, 60e-6)}))
    cal = fit([a, b])
    assert cal.view_weights == pytest.approx({"aten.view": 0.625, "aten.t": 1.25,
                                              "aten.unbind": 2.5})
    # A: 60 µs over 10 · 0.625 + 10 · 1.25 = 18.75 → 3.2 µs; B: 150 µs over 20 · 0.625 +
    # 5 · 1.25 + 5 · 2.5 = 31.25 → 4.8 µs
    assert [x for point in cal.op_cost_by_footprint for x in point] == pytest.approx(
        [1e4, 3.2e-6, 1e6, 4.8e-6])
    # so each view is priced at its own mean: a t in A 3.2 × 1.25 = 4 µs, an unbind in B
    # 4.8 × 2.5 = 12 µs; a view op no calibration made weighs 1
    assert cal.view_entry("aten.t", 1e4) == pytest.approx(4e-6)
    assert cal.view_entry("aten.unbind", 1e6) == pytest.approx(12e-6)
    assert cal.view_entry("aten.expand", 1e4) == pytest.approx(3.2e-6)
    text = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n') + calibration_toml(cal)
    chip = parse_hardware_toml(text, "test", "local")
    assert chip.calibration is not None and chip.calibration.view_weights == cal.view_weights
    t = Op("aten.t.default", "view", 0, 0, 0, ("fp32",), ("fp32",))
    op = predict_op(0, t, chip, footprint=1e4)
    assert op.overhead_s - op.between_ops_s == pytest.approx(4e-6)
    # runs that did not time their views by op: no weights, every view alike
    assert fit([A, B]).view_weights == {}
    from tensorledger.errors import ConfigError

    with pytest.raises(ConfigError, match="view_weights"):
        parse_hardware_toml(text.replace("view_weights = {", 'view_weights = { "x" = -1, '),
                            "test", "local")
