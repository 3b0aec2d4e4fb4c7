"""Calibrate a probed profile on whole eager steps of calibration models.

The probe times kernels in isolated loops; a training step runs them between others (cold
caches, strided inputs, allocator traffic) and spends framework time between them (Python,
module code, autograd, the optimizer's loop).  ``calibrate`` runs small reference
Transformers (``CALIBRATION_MODELS``: shapes no benchmark workload uses) for real, times each
op with the profiler and the whole step with the harness, in rounds taken in turn over every
step (a spell when the machine runs slower then falls on every model alike, and a step whose
rounds disagree is named unreliable), and fits, as ratios of sums over the models:

- ``op_cost_s``: a view's own time (it runs no kernel, so its time is entering an op), and
  ``op_cost_by_footprint``: the same per step against the step's footprint (the mean bytes
  its ops move), a log-log line, since entering an op costs more in a step whose kernels
  stream more through the caches (a view took 5 µs in the smallest model, 14 µs in the
  largest);
- ``scale[category]``: (measured time of the category − ops × each step's cost of entering
  an op) / its predicted kernel time at the probed rates;
- ``between_ops_s``: from whole step times (no profiler), the time per op beyond the scaled
  kernels and the cost of entering an op — one figure for forward and backward, one for the
  optimizer — fitted by least squares over every step in relative terms.

The result is a :class:`~tensorledger.hardware.Calibration` that ``profile_toml`` writes into
the profile; ``roofline --hardware local`` then predicts with it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorledger.errors import InputError
from tensorledger.hardware import Calibration, Hardware
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.roofline.model import step_footprint

if TYPE_CHECKING:
    from tensorledger.bench.optiming import OpTime
    from tensorledger.roofline.model import RooflinePrediction
    from tensorledger.workload.step import PreparedStep

__all__ = ["CALIBRATION_MODELS", "ROUND_SPREAD", "Run", "StepSample", "calibrate",
           "calibration_toml", "fit", "nonnegative_least_squares", "round_spread"]

#: The calibration models: Llama-like (RMSNorm, RoPE, SwiGLU) and GPT-2-like (LayerNorm,
#: learned positions, GELU), each small (activations in cache) and larger (beyond it), at
#: shapes no benchmark workload uses.
CALIBRATION_MODELS = (
    (TransformerConfig(name="calibration-llama-small", vocab_size=700, context_length=40,
                       d_model=48, n_layers=2, n_heads=3, n_kv_heads=3, d_ff=128,
                       mlp="swiglu", norm="rmsnorm", positions="rope", tied_embeddings=False,
                       bias=False), 3, 40),
    (TransformerConfig(name="calibration-llama", vocab_size=3000, context_length=96,
                       d_model=160, n_layers=3, n_heads=5, n_kv_heads=5, d_ff=432,
                       mlp="swiglu", norm="rmsnorm", positions="rope", tied_embeddings=False,
                       bias=False), 6, 96),
    (TransformerConfig(name="calibration-gpt", vocab_size=2500, context_length=80, d_model=192,
                       n_layers=2, n_heads=6, mlp="gelu", norm="layernorm",
                       positions="learned", tied_embeddings=True, bias=True), 6, 80),
    (TransformerConfig(name="calibration-llama-large", vocab_size=5000, context_length=160,
                       d_model=320, n_layers=2, n_heads=5, n_kv_heads=5, d_ff=864,
                       mlp="swiglu", norm="rmsnorm", positions="rope", tied_embeddings=False,
                       bias=False), 8, 160),
    (TransformerConfig(name="calibration-gpt-large", vocab_size=6000, context_length=192,
                       d_model=384, n_layers=2, n_heads=6, mlp="gelu", norm="layernorm",
                       positions="learned", tied_embeddings=True, bias=True), 6, 192),
)
SCALE_RANGE = (0.05, 50.0)
#: A calibration step whose rounds' medians differ by more than this share of their median is
#: named unreliable: the machine's speed changed while it was calibrated.
ROUND_SPREAD = 0.10


@dataclass(frozen=True)
class Run:
    """One step of a calibration model, run for real."""

    step_s: float  # the harness's median time of the whole step (no profiler)
    categories: Mapping[str, tuple[int, float, float]]  # (ops, kernel s, the profiler's own s)
    kernel_by_phase: Mapping[tuple[str, str], float]  # (phase group, category) → kernel s
    ops_by_phase: Mapping[str, int]  # "forward-backward" / "optimizer" → ops
    # category → bytes an op moves, averaged with the ops' kernel times as weights
    bytes_by_category: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # each op at the probed rates: (category, phase group, compute s, memory s, roofline
    # bound s, bytes moved), so the fit can price a step as the calibrated model will
    ops: tuple[tuple[str, str, float, float, float, float], ...] = ()


def _group(phase: str) -> str:
    return "optimizer" if phase == "optimizer" else "forward-backward"


@dataclass
class _Timed:
    """One calibration step built and traced, and what its rounds measured."""

    prepared: PreparedStep
    prediction: RooflinePrediction  # at the probed rates
    samples_s: list[float] = dataclasses.field(default_factory=list)  # whole-step samples
    round_medians_s: list[float] = dataclasses.field(default_factory=list)
    # the profiler's own time of each op, one profiled step per round
    profiles: list[tuple[OpTime, ...]] = dataclasses.field(default_factory=list)


def _build(config: TransformerConfig, batch: int, seq: int, step: str,
           hardware: Hardware) -> _Timed:
    from tensorledger.roofline import predict
    from tensorledger.workload import ModelSource, prepare, record_step
    from tensorledger.workload.spec import resolve_workload

    source = ModelSource(label=config.name, kind="preset", builder="reference",
                         name=config.name, config=config)
    work = resolve_workload(source, batch=batch, seq=seq, step=step, precision="fp32",
                            device="cpu")
    prepared = prepare(work, "cpu")
    prepared.run()
    traced, _ = record_step(prepared)
    return _Timed(prepared, predict(traced.records, hardware))


def _time_round(timed: _Timed, budget_s: float, name: str) -> None:
    from tensorledger.bench.harness import measure
    from tensorledger.bench.optiming import profile_ops

    whole = measure(timed.prepared.run, budget_s=budget_s, warmup=1, name=name)
    timed.samples_s += whole.samples_s
    timed.round_medians_s.append(whole.median_s)
    timed.profiles.append(profile_ops(timed.prepared.run, "cpu", repeats=1,
                                      traced={op.op for op in timed.prediction.ops}))


def _run(timed: _Timed) -> Run:
    """The :class:`Run` of a step timed over every round: the median of all its samples, and
    the profiler's own time of each op averaged over the rounds."""
    from tensorledger.roofline.compare import compare

    prediction = timed.prediction
    step_s = statistics.median(timed.samples_s)
    result = compare(prediction, timed.profiles, step_s, 1.0)
    kernel: dict[str, float] = defaultdict(float)
    by_phase: dict[tuple[str, str], float] = defaultdict(float)
    ops: dict[str, int] = defaultdict(int)
    weighted: dict[str, float] = defaultdict(float)
    for op in prediction.ops:
        weighted[op.category] += (op.time_s - op.overhead_s) * op.bytes
        kernel[op.category] += op.time_s - op.overhead_s
        by_phase[_group(op.phase), op.category] += op.time_s - op.overhead_s
        ops[_group(op.phase)] += 1
    return Run(step_s=step_s,
               categories={c.category: (c.ops, kernel[c.category], c.measured_s)
                           for c in result.categories if c.ops},
               kernel_by_phase=dict(by_phase), ops_by_phase=dict(ops),
               bytes_by_category={c: weighted[c] / k for c, k in kernel.items() if k > 0},
               ops=tuple((op.category, _group(op.phase), op.compute_time_s, op.memory_time_s,
                          op.ideal_time_s, float(op.bytes)) for op in prediction.ops))


def round_spread(medians: Sequence[float]) -> float:
    """How far a step's rounds disagree: (slowest − fastest) / their median.

    >>> round_spread([10.0, 11.0, 12.0])
    0.18181818181818182
    """
    middle = statistics.median(medians)
    return (max(medians) - min(medians)) / middle if middle > 0 else 0.0


@dataclass(frozen=True)
class StepSample:
    """One calibration model: its forward-backward step and its train step."""

    forward_backward: Run
    train: Run


def fit(samples: Sequence[StepSample], source: str = "") -> Calibration:
    """The calibration that reproduces ``samples``.

    The cost of entering an op, by the step's footprint, comes from the views' own times;
    category scales from the profiler's own times of the train steps' ops, as ratios of sums
    (those times carry the profiler's cost per op, as a view's time does, so the scale of a
    category is free of it).  The framework's time
    between ops, one figure for the forward-backward ops and one for the optimizer's, comes
    from whole step times, which carry no profiler: each step's time less its scaled kernels
    and the cost of entering its ops is what its ops spend between them, and the two figures
    are the non-negative least-squares fit of every step in relative terms
    (:func:`nonnegative_least_squares` of (ops / step, optimizer ops / step, rest / step)).
    A fit of sums instead lets the large models' kernel error set the small models'
    framework time: 84 µs an op where the relative fit found 19 µs, and the tiny preset's
    step predicted +172% against +18% (the same measured runs).
    """
    ops: dict[str, int] = defaultdict(int)
    kernel: dict[str, float] = defaultdict(float)
    measured: dict[str, float] = defaultdict(float)
    for sample in samples:
        for name, (count, kernel_s, measured_s) in sample.train.categories.items():
            ops[name] += count
            kernel[name] += kernel_s
            measured[name] += measured_s
    op_cost = measured["view"] / ops["view"] if ops.get("view") else 0.0
    entering = Calibration(scale={}, op_cost_s=op_cost, between_ops_s={},
                           op_cost_by_footprint=_entry_by_footprint(samples))

    def entry(run: Run) -> float:
        return entering.entry(step_footprint(moved for *_, moved in run.ops))

    low, high = SCALE_RANGE
    beyond: dict[str, float] = defaultdict(float)  # measured less each run's cost of entry
    for sample in samples:
        for name, (count, _, measured_s) in sample.train.categories.items():
            beyond[name] += measured_s - count * entry(sample.train)
    scale = {name: min(high, max(low, beyond[name] / kernel[name]))
             for name in kernel if kernel[name] > 0 and name != "view"}

    curves = _by_size(samples, entry)
    draft = dataclasses.replace(entering, scale=scale, source=source, scale_by_size=curves)

    def kernels(run: Run) -> float:
        """The run's kernels as the calibrated model prices them (each op's factor at its
        size, never below its roofline bound); by category sums where no ops were kept."""
        if run.ops:
            return sum(max(compute * factor, memory * factor, bound)
                       for category, _, compute, memory, bound, moved in run.ops
                       for factor in (draft.factor(category, moved),))
        return sum(scale.get(category, 1.0) * seconds
                   for (_, category), seconds in run.kernel_by_phase.items())

    # the framework's time per op beyond entering it, by phase: the least-squares fit of every
    # whole step (forward-backward and train, each model) in relative terms, so a small
    # model, whose step is mostly this time, counts as much as a large one
    rows = []
    for sample in samples:
        for run in (sample.forward_backward, sample.train):
            if run.step_s <= 0:
                continue
            fb = run.ops_by_phase.get("forward-backward", 0)
            opt = run.ops_by_phase.get("optimizer", 0)
            known = kernels(run) + (fb + opt) * entry(run)
            rows.append((fb / run.step_s, opt / run.step_s, 1.0 - known / run.step_s))
    fb_between, opt_between = nonnegative_least_squares(rows)
    return dataclasses.replace(draft, between_ops_s={"forward-backward": fb_between,
                                                     "optimizer": opt_between})


def nonnegative_least_squares(rows: Sequence[tuple[float, float, float]]
                              ) -> tuple[float, float]:
    """(x, y) ≥ 0 minimising Σ (a·x + b·y − c)² over the rows (a, b, c): the normal
    equations, and where a figure would come out negative it is 0 and the other is fitted
    alone.

    >>> nonnegative_least_squares([(1, 0, 2), (0, 1, 3), (1, 1, 5)])
    (2.0, 3.0)
    >>> nonnegative_least_squares([(1, 0, -1), (1, 1, 1)])  # x alone would be negative
    (0.0, 1.0)
    """
    aa = sum(a * a for a, _, _ in rows)
    bb = sum(b * b for _, b, _ in rows)
    ab = sum(a * b for a, b, _ in rows)
    ac = sum(a * c for a, _, c in rows)
    bc = sum(b * c for _, b, c in rows)
    det = aa * bb - ab * ab
    if det > 1e-12 * max(aa * bb, 1e-300):
        x, y = (ac * bb - bc * ab) / det, (bc * aa - ac * ab) / det
        if x >= 0 and y >= 0:
            return x, y
    only_x = max(0.0, ac / aa) if aa else 0.0
    only_y = max(0.0, bc / bb) if bb else 0.0

    def cost(x: float, y: float) -> float:
        return sum((a * x + b * y - c) ** 2 for a, b, c in rows)

    return min(((only_x, 0.0), (0.0, only_y)), key=lambda xy: cost(*xy))


def _entry_by_footprint(samples: Sequence[StepSample]) -> tuple[tuple[float, float], ...]:
    """The cost of entering an op against the step's footprint: each run's views (they run
    no kernel, so their own time is entering an op) per view, and the least-squares line
    through them in log-log, kept as its two ends; empty where the runs' footprints do not
    spread over a factor of 2."""
    points = []
    for sample in samples:
        for run in (sample.forward_backward, sample.train):
            count, _, measured_s = run.categories.get("view", (0, 0.0, 0.0))
            footprint = step_footprint(moved for *_, moved in run.ops)
            if count and measured_s > 0 and footprint:
                points.append((footprint, measured_s / count))
    return _log_line(points, (1e-9, 1e-3))


def _log_line(points: Sequence[tuple[float, float]], clamp: tuple[float, float]
              ) -> tuple[tuple[float, float], ...]:
    """The least-squares line through ``points`` in log-log, kept as its two ends (values
    clamped to ``clamp``); empty with fewer than 2 points or sizes within a factor of 2.

    >>> ends = _log_line([(1.0, 2.0), (4.0, 8.0), (16.0, 32.0)], (0.0, 100.0))
    >>> [(round(x, 9), round(y, 9)) for x, y in ends]
    [(1.0, 2.0), (16.0, 32.0)]
    """
    xs = [math.log(x) for x, _ in points]
    if len(points) < 2 or max(xs) - min(xs) < math.log(2):
        return ()
    ys = [math.log(y) for _, y in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs)
    low, high = clamp
    return tuple((math.exp(x), min(high, max(low, math.exp(mean_y + slope * (x - mean_x)))))
                 for x in (min(xs), max(xs)))


def _by_size(samples: Sequence[StepSample], entry: Callable[[Run], float]
             ) -> dict[str, tuple[tuple[float, float], ...]]:
    """Per category, each model's own scale at its typical op size, and the least-squares
    line through them in log-log, kept as its two ends (flat beyond them)."""
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for sample in samples:
        run = sample.train
        for name, (count, kernel_s, measured_s) in run.categories.items():
            size = run.bytes_by_category.get(name, 0.0)
            value = (measured_s - count * entry(run)) / kernel_s if kernel_s > 0 else 0.0
            if name != "view" and size > 0 and value > 0:
                points[name].append((size, value))
    curves = {name: _log_line(found, SCALE_RANGE) for name, found in points.items()}
    return {name: curve for name, curve in curves.items() if curve}


def calibrate(hardware: Hardware, *, budget_s: float = 2.0, rounds: int = 3,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Fit ``hardware``'s (a probed profile's) calibration on this CPU; see the module.

    Each calibration step is timed in ``rounds`` rounds of ``budget_s / rounds`` seconds (and
    one profiled step), taken in turn over every step, so that a spell when the machine runs
    slower falls on all of them alike rather than on one model.  A step whose rounds differ by
    more than ``ROUND_SPREAD`` of its median is named in the calibration's ``unreliable``.
    """
    if rounds < 1 or not budget_s > 0:
        raise InputError(f"calibrate needs rounds >= 1 and a budget above 0, got {rounds} "
                         f"and {budget_s:g} s")
    say = progress or (lambda _: None)
    bare = dataclasses.replace(hardware, calibration=None)
    steps: list[tuple[str, _Timed]] = []
    for config, batch, seq in CALIBRATION_MODELS:
        for step in ("forward-backward", "train"):
            say(f"calibration: building {config.name}, {step} step")
            steps.append((f"{config.name} {step} step", _build(config, batch, seq, step, bare)))
    for index in range(rounds):
        for name, timed in steps:
            say(f"calibration round {index + 1} of {rounds}: {name}")
            _time_round(timed, budget_s / rounds, name)
    runs = [_run(timed) for _, timed in steps]
    unreliable = tuple(f"calibration {name} (rounds differ by {spread:.0%})"
                       for name, timed in steps
                       for spread in (round_spread(timed.round_medians_s),)
                       if spread > ROUND_SPREAD)
    fitted = fit([StepSample(*runs[i:i + 2]) for i in range(0, len(runs), 2)],
                 source="fitted by tensorledger probe on " + ", ".join(
                     f"{c.name} (batch {b} × seq {s})" for c, b, s in CALIBRATION_MODELS) +
                 f": forward-backward and train steps in fp32, {rounds} rounds each; category "
                 "scales from the profiler's own time per op, the time between ops from the "
                 "harness's whole-step times")
    return dataclasses.replace(fitted, unreliable=unreliable)


def calibration_toml(calibration: Calibration) -> str:
    """The ``[calibration]`` table of a profile (``load_hardware_file`` reads it back)."""
    scales = ", ".join(f'{name} = {value!r}' for name, value in sorted(
        calibration.scale.items()))
    between = ", ".join(f'"{k}" = "{v * 1e9!r}ns"' for k, v in
                        calibration.between_ops_s.items())
    by_size = ", ".join(f"{name} = [{', '.join(f'[{x!r}, {y!r}]' for x, y in points)}]"
                        for name, points in sorted(calibration.scale_by_size.items()))
    unreliable = ", ".join(f'"{u}"' for u in calibration.unreliable)
    footprint = ", ".join(f"[{x!r}, {y!r}]" for x, y in calibration.op_cost_by_footprint)
    return "\n".join([
        "[calibration]  # whole eager steps: see tensorledger.ledger.calibrate",
        f'source = "{calibration.source}"',
        f'op_cost = "{calibration.op_cost_s * 1e9!r}ns"',
        f"scale = {{ {scales} }}",
        f"between_ops = {{ {between} }}",
        *([f"scale_by_size = {{ {by_size} }}"] if by_size else []),
        *([f"op_cost_by_footprint = [{footprint}]"] if footprint else []),
        *([f"unreliable = [{unreliable}]"] if unreliable else []),
    ]) + "\n"
