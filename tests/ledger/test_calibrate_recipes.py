"""A calibration fits every precision recipe's steps: the ops of each low-precision dtype are
classes of their own, fitted on the steps that run them."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.ledger.calibrate import Run, StepSample, fit
from tensorledger.napkin.transformer import TransformerConfig


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
    # fp32's matmuls and bf16's each have a class, fitted on their own steps' calls
    assert cal.scale["matmul"] > 0 and cal.scale["matmul-bf16"] > 0
    # the bf16 recipe's AdamW updates bf16 parameters: its own class beside fp32's
    assert cal.scale["elementwise-optimizer"] > 0 and cal.scale["elementwise-optimizer-bf16"] > 0
    assert "view-bf16" not in cal.scale  # a view is a view whatever its dtype
    with pytest.raises(InputError, match="one precision recipe"):
        calibration.CalibrationRounds(chip, recipes=())
