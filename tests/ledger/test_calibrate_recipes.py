"""A calibration fits every precision recipe's steps: the ops of each low-precision dtype are
classes of their own, fitted on the steps that run them, and the low-precision recipes' steps
are fitted apart from fp32's (``Calibration.low_precision``)."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import Calibration, Hardware
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.ledger.calibrate import Run, StepSample, calibration_toml, fit, fit_recipes
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.roofline import calibrated_for
from tests.ledger.test_calibrate import CHIP  # uncalibrated: fp32 and bf16 at 1e11 FLOP/s


def _run(matmul: tuple[float, float], bf16: tuple[float, float]) -> Run:
    """A step of 10 fp32 matmuls and 10 bf16 ones: (kernel s at the probed rates, the
    profiler's own s) each; no views, so entering an op costs nothing."""
    return Run(step_s=sum(m for _, m in (matmul, bf16)), kernel_by_phase={},
               ops_by_phase={"forward-backward": 20},
               classes={"matmul": (10, *matmul), "matmul-bf16": (10, *bf16)})


def test_each_dtypes_class_is_fitted_on_its_own_ops_by_hand() -> None:
    # fp32's matmuls take 2× their probed time in both steps (1 → 2 ms, 4 → 8 ms), bf16's
    # 3× (1 → 3 ms, 2 → 6 ms); ten calls in each step: no cost a call fits better than none
    samples = [StepSample(_run((1e-3, 2e-3), (1e-3, 3e-3)), _run((4e-3, 8e-3), (2e-3, 6e-3)))]
    cal = fit(samples)
    assert cal.scale["matmul"] == pytest.approx(2.0)
    assert cal.scale["matmul-bf16"] == pytest.approx(3.0)
    assert not cal.call_cost_s.get("matmul") and not cal.call_cost_s.get("matmul-bf16")


def test_calibrate_runs_every_recipes_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.ledger.calibrate as calibration

    small = TransformerConfig(name="cal-a", vocab_size=64, context_length=8, d_model=16,
                              n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32, mlp="swiglu",
                              norm="rmsnorm", positions="rope", tied_embeddings=False,
                              bias=False)
    monkeypatch.setattr(calibration, "CALIBRATION_MODELS", ((small, 2, 8),))
    said: list[str] = []
    chip = Hardware(id="local", name="cpu", memory_bytes=8e9, memory_bandwidth_bytes_per_s=1e10,
                    dense_flop_per_s={"fp32": 1e11, "bf16": 2e11}, origin="test",
                    op_overhead_s=1e-6)
    session = calibration.CalibrationRounds(chip, progress=said.append)
    assert [name for name, _ in session.steps] == [
        f"cal-a {recipe}{step} step" for recipe in ("", "mixed-bf16 ", "bf16 ")
        for step in ("forward-backward", "train")]
    session.round(0.01)
    cal = session.fitted()
    assert "steps in fp32, mixed-bf16, bf16" in cal.source
    # the fp32 steps' fit, and the low-precision recipes' apart: fp32's matmuls have a class
    # in the first, bf16's in the second, each fitted on its own steps' calls
    low = cal.low_precision
    assert low is not None and low.low_precision is None
    assert low.source == ("the steps in mixed-bf16, bf16 of the calibration above, "
                          "fitted apart")
    assert cal.scale["matmul"] > 0 and low.scale["matmul-bf16"] > 0
    assert not any(name.endswith("-bf16") for name in cal.scale)  # no bf16 op in fp32 steps
    # the bf16 recipe's AdamW updates bf16 parameters: its own class beside mixed-bf16's
    # fp32 one
    assert low.scale["elementwise-optimizer"] > 0 and low.scale["elementwise-optimizer-bf16"] > 0
    assert "view-bf16" not in low.scale  # a view is a view whatever its dtype
    # one recipe's steps alone: one fit
    only = calibration.CalibrationRounds(chip, recipes=("bf16",))
    only.round(0.01)
    alone = only.fitted()
    assert alone.low_precision is None and alone.scale["matmul-bf16"] > 0
    with pytest.raises(InputError, match="one precision recipe"):
        calibration.CalibrationRounds(chip, recipes=())


def _sample(scale: float, view_s: float) -> StepSample:
    """A model's two steps: 10 matmuls of 2 ms (forward-backward) and 4 ms (train) at the
    probed rates, taking ``scale`` times that, and 20 views of ``view_s`` each, which is also
    what entering each matmul costs."""
    def run(kernel_s: float) -> Run:
        return Run(step_s=1.0, kernel_by_phase={}, ops_by_phase={"forward-backward": 30},
                   classes={"matmul": (10, kernel_s, scale * kernel_s + 10 * view_s),
                            "view": (20, 0.0, 20 * view_s)})
    return StepSample(run(2e-3), run(4e-3))


def test_the_low_precision_recipes_steps_are_fitted_apart_by_hand() -> None:
    # fp32's matmuls take 2× their probed time and its views 10 µs; bf16's 3× and 20 µs
    cal = fit_recipes([("fp32", _sample(2.0, 10e-6)), ("bf16", _sample(3.0, 20e-6))],
                      source="two")
    assert cal.source == "two"
    assert cal.op_cost_s == pytest.approx(10e-6) and cal.scale["matmul"] == pytest.approx(2.0)
    low = cal.low_precision
    assert low is not None and low.low_precision is None
    assert low.source == "the steps in bf16 of the calibration above, fitted apart"
    assert low.op_cost_s == pytest.approx(20e-6) and low.scale["matmul"] == pytest.approx(3.0)
    assert not cal.call_cost_s and not low.call_cost_s
    # one fit of both would price entering an op at (0.2 + 0.4 ms) / 40 views
    assert fit([_sample(2.0, 10e-6), _sample(3.0, 20e-6)]).op_cost_s == pytest.approx(15e-6)
    # the recipes named in order; steps of one kind alone: their one fit
    three = fit_recipes([("fp32", _sample(2.0, 10e-6)), ("bf16", _sample(3.0, 20e-6)),
                         ("mixed-bf16", _sample(3.0, 20e-6))])
    assert three.low_precision is not None and three.low_precision.source == (
        "the steps in bf16, mixed-bf16 of the calibration above, fitted apart")
    one = fit_recipes([("fp32", _sample(2.0, 10e-6))])
    assert one.low_precision is None and one.source == ""  # none given
    alone = fit_recipes([("bf16", _sample(3.0, 20e-6))], source="bf16 alone")
    assert alone.low_precision is None and alone.op_cost_s == pytest.approx(20e-6)
    assert alone.source == "bf16 alone"


def test_a_step_in_a_low_precision_is_priced_by_its_recipes_fit_by_hand() -> None:
    from tensorledger.roofline import predict
    from tests.roofline.test_model import Op

    low = Calibration(scale={"matmul": 3.0, "matmul-bf16": 4.0}, op_cost_s=2e-6,
                      between_ops_s={"forward-backward": 7e-6})
    chip = dataclasses.replace(CHIP, calibration=Calibration(
        scale={"matmul": 2.0}, op_cost_s=1e-6, between_ops_s={"forward-backward": 5e-6},
        low_precision=low))
    # 2e8 FLOPs at 1e11 FLOP/s: 2 ms at the probed rate, in either dtype
    fp32 = Op("aten.mm.default", "matmul", 2 * 10**8, 10**6, 0, ("fp32",), ("fp32",),
              phase="backward")
    bf16 = dataclasses.replace(fp32, input_dtypes=("bf16",), output_dtypes=("bf16",))
    # an fp32 step: the fp32 fit, 2 ms × 2 + 1 µs entering + 5 µs between ops
    assert predict([fp32], chip).time_s == pytest.approx(4e-3 + 1e-6 + 5e-6)
    # a step with a bf16 op: every op by the low-precision fit, its fp32 one too:
    # 2 ms × 3 + 2 µs + 7 µs, and 2 ms × 4 + 2 µs + 7 µs
    mixed = predict([fp32, bf16], chip)
    assert [op.time_s for op in mixed.ops] == pytest.approx([6e-3 + 9e-6, 8e-3 + 9e-6])
    assert calibrated_for(chip, [fp32, bf16]).calibration is low
    assert calibrated_for(chip, [fp32]) is chip
    # the profile's table holds both, and reads back
    text = ('name = "cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n[dense]\n'
            'fp32 = "100GFLOP/s"\n') + calibration_toml(chip.calibration)
    assert ("\n[calibration.low_precision]  # the steps of the bf16 and fp16 recipes, fitted "
            "apart\n") in text
    assert text.count("[calibration") == 2  # the table and the one within it
    read = parse_hardware_toml(text, "test", "local").calibration
    assert read is not None and read.low_precision is not None
    assert read.scale == pytest.approx({"matmul": 2.0})
    assert read.low_precision.scale == pytest.approx(low.scale)
    assert read.low_precision.op_cost_s == pytest.approx(2e-6)
    assert read.low_precision.between_ops_s == pytest.approx({"forward-backward": 7e-6})


def test_checkpointing_prices_a_mixed_bf16_step_by_the_low_precision_fit() -> None:
    from tensorledger.ledger.checkpointing import checkpoint_profile
    from tensorledger.plan.checkpoint import block_paths
    from tensorledger.roofline import predict
    from tensorledger.workload import resolve_workload
    from tensorledger.workload.checkpointing import trace_workload_with_policy

    work = resolve_workload("tiny", batch=2, seq=24, precision="mixed-bf16",
                            step="forward-backward", device="fake")
    plain = trace_workload_with_policy(work, None)
    low = Calibration(scale={"matmul-bf16": 4.0}, op_cost_s=2e-6,
                      between_ops_s={"forward-backward": 7e-6})
    chip = dataclasses.replace(CHIP, calibration=Calibration(
        scale={"matmul": 2.0}, op_cost_s=1e-6, between_ops_s={"forward-backward": 5e-6},
        low_precision=low))
    # the second code path: the whole step's prediction, which takes the recipe's fit (no
    # footprint curve, so an op alone is priced as in its step)
    ops = predict(plain.trace.records, chip).ops
    blocks = block_paths(plain.trace)
    profile = checkpoint_profile(plain, chip)
    for path, block in zip(blocks, profile.blocks, strict=True):
        mine = [op.time_s for op, r in zip(ops, plain.trace.records, strict=True)
                if r.phase == "forward" and (r.module == path or r.module.startswith(path + "."))]
        assert mine and block.forward_time_s == pytest.approx(sum(mine))
    # priced by the fp32 fit, the blocks would cost less: 1 µs entering and 5 µs between,
    # not 2 and 7
    fp32 = checkpoint_profile(plain, dataclasses.replace(chip, calibration=dataclasses.replace(
        chip.calibration, low_precision=None)))
    assert all(a.forward_time_s < b.forward_time_s
               for a, b in zip(fp32.blocks, profile.blocks, strict=True))
