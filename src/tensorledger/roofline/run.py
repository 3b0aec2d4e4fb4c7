"""A model's step through the roofline: trace it, predict it, and optionally run it for real.

The prediction comes from the trace of one step; the measurement runs the very same step on
this machine (``measure`` for the whole step, dispatch timing for the split between ops).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.devices import resolve_device
from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.roofline.compare import Comparison, compare
from tensorledger.roofline.model import RooflinePrediction, predict

__all__ = ["RooflineRun", "roofline_model"]


@dataclass(frozen=True)
class RooflineRun:
    model: str
    step: str
    batch: int
    seq: int
    device: str
    dtype: str
    tokens: int
    uncovered: dict[str, int]
    prediction: RooflinePrediction
    comparison: Comparison | None  # with --measure
    measurement_warning: str | None


def roofline_model(model: str, hardware: Hardware, *, batch: int = 8, seq: int = 256,
                   step: str = "forward-backward", optimizer: str = "adamw",
                   dtype: str = "fp32", device: str = "cpu", measure_step: bool = False,
                   budget_s: float = 2.0, timing_runs: int = 5) -> RooflineRun:
    """Predict (and with ``measure_step``, measure) one step of ``model`` on ``hardware``.

    Without a measurement the step is traced on the meta device; with one it is built on
    ``device``, run once to warm up (optimizer state, allocator, caches), then traced, timed
    as a whole (``measure``) and op by op (the profiler's own time of each op).
    """
    from tensorledger.bench.harness import measure
    from tensorledger.bench.optiming import profile_ops
    from tensorledger.trace import trace
    from tensorledger.trace.workload import build_workload

    if timing_runs < 1:
        raise InputError(f"timing runs must be at least 1, got {timing_runs}")
    if budget_s < 0:
        raise InputError(f"--budget must be 0 seconds or more, got {budget_s:g}")
    if measure_step:
        resolve_device(device, ("cpu", "cuda"))
    work = build_workload(model, batch, seq, step, optimizer,
                          device if measure_step else "meta", dtype)
    if measure_step:
        work.run()  # steady state: the first step creates optimizer state and warms caches
    traced = trace(work.run)
    prediction = predict(traced.records, hardware, tokens=work.tokens)
    comparison = None
    warning = None
    if measure_step:
        whole = measure(work.run, device=device, budget_s=budget_s, warmup=2,
                        name=f"{work.model} {step}")
        warning = whole.warning
        per_op = profile_ops(work.run, device, repeats=timing_runs)
        comparison = compare(prediction, [per_op], whole.median_s,
                             hardware.peak_flop_per_s(prediction.mfu_peak_key))
    return RooflineRun(model=work.model, step=step, batch=batch, seq=seq,
                       device=device if measure_step else "meta", dtype=work.dtype,
                       tokens=work.tokens, uncovered=dict(traced.uncovered),
                       prediction=prediction, comparison=comparison,
                       measurement_warning=warning)
