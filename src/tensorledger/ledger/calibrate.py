"""Calibrate a probed profile on whole eager steps of calibration models.

The probe times kernels in isolated loops; a training step runs them between others (cold
caches, strided inputs, allocator traffic) and spends framework time between them (Python,
module code, autograd, the optimizer's loop).  ``calibrate`` runs small reference
Transformers (``CALIBRATION_MODELS``: shapes no benchmark workload uses) for real, times each
call with the profiler (matched to the trace's ops by position, so an op name two categories
share is measured in each) and the whole step with the harness, in rounds taken in turn over
every step (a spell when the machine runs slower then falls on every model alike, and a step
whose rounds disagree is named unreliable), and fits them: an op's cost of entering by the
step's footprint, each cost class's kernel scale and costs, the time between ops by phase
group (:mod:`tensorledger.ledger.calibration_fit`, whose names this module re-exports).
Every model's steps run in each precision recipe (``CALIBRATION_RECIPES``: fp32, mixed-bf16,
bf16), and an op in bf16 or fp16 is a cost class of its own (``matmul-bf16``, ...), so each
dtype's kernels are fitted on the steps that run them.

The result is a :class:`~tensorledger.hardware.Calibration` that ``profile_toml`` writes into
the profile; ``roofline --hardware local`` then predicts with it.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorledger.costs import packet
from tensorledger.errors import InputError
from tensorledger.hardware import Calibration, Hardware
from tensorledger.ledger.calibration_fit import (
    REFERENCE_VIEW,
    SCALE_RANGE,
    Run,
    StepSample,
    calibration_toml,
    fit,
    fit_recipes,
    nonnegative_least_squares,
)
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.roofline.cost_classes import cost_class, pieces
from tensorledger.roofline.kernel_rates import op_precision, own_call_curve, own_kernel_curve

if TYPE_CHECKING:
    from tensorledger.bench.harness import Measurement
    from tensorledger.bench.optiming import ProfiledStep
    from tensorledger.roofline.model import RooflinePrediction
    from tensorledger.trace import OpRecord
    from tensorledger.workload.step import PreparedStep

__all__ = ["CALIBRATION_BUDGET_S", "CALIBRATION_MODELS", "CALIBRATION_RECIPES",
           "CALIBRATION_ROUNDS", "REFERENCE_VIEW",
           "ROUND_SPREAD", "SCALE_RANGE", "CalibrationRounds", "Run", "StepSample", "calibrate",
           "calibration_toml", "fit", "fit_recipes", "nonnegative_least_squares",
           "round_spread"]

#: The calibration models: Llama-like (RMSNorm, RoPE, SwiGLU) and GPT-2-like (LayerNorm,
#: learned positions, GELU), small (activations in cache), larger (beyond it) and wide (many
#: narrow heads), at shapes no benchmark workload uses.
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
    # wide: many short sequences of narrow heads, so that the blocks an attention kernel
    # loops over (batch × heads × query blocks) and the rows of a copy vary apart from the
    # bytes they move
    (TransformerConfig(name="calibration-llama-wide", vocab_size=500, context_length=24,
                       d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=96,
                       mlp="swiglu", norm="rmsnorm", positions="rope", tied_embeddings=False,
                       bias=False), 24, 24),
    (TransformerConfig(name="calibration-gpt-wide", vocab_size=600, context_length=20,
                       d_model=48, n_layers=2, n_heads=6, mlp="gelu", norm="layernorm",
                       positions="learned", tied_embeddings=True, bias=True), 20, 20),
)
#: A calibration step whose rounds' medians differ by more than this share of their median is
#: measured again (every step, in as many rounds more), and named unreliable where the second
#: set's median moved from the first's by more than it: the machine's speed changed while it
#: was calibrated, and the figure did not reproduce.
ROUND_SPREAD = 0.10
#: Rounds and seconds of whole steps a calibration takes by default.  A machine whose speed
#: wanders over tens of seconds moves a short calibration with it: four calibrations of five
#: rounds in 3 s, back to back on a 2-core VM, predicted the tiny preset's 4 × 32 step at 18.1,
#: 20.9, 22.1 and 19.5 ms; the same samples pooled in pairs (ten rounds in 6 s) at 19.3 to
#: 21.2 ms, half the spread.
CALIBRATION_ROUNDS, CALIBRATION_BUDGET_S = 10, 6.0
#: The precision recipes whose steps a calibration runs: each op in bf16 or fp16 is a cost
#: class of its own (``roofline.cost_classes.cost_class``), so each recipe's kernels are fitted on
#: its own steps (an fp32 calibration priced the tiny preset's mixed-bf16 step at a quarter
#: of its measured time: issue 43).
CALIBRATION_RECIPES = ("fp32", "mixed-bf16", "bf16")


@dataclass
class _Timed:
    """One calibration step built and traced, and what its rounds measured."""

    prepared: PreparedStep
    records: tuple[OpRecord, ...]  # its trace
    prediction: RooflinePrediction  # of the records, at the probed rates
    samples_s: list[float] = dataclasses.field(default_factory=list)  # whole-step samples
    round_medians_s: list[float] = dataclasses.field(default_factory=list)
    # the profiler's own time of each call, in order, the same number of profiled steps
    # each round, in round order
    profiles: list[ProfiledStep] = dataclasses.field(default_factory=list)

    @property
    def recipe(self) -> str:
        """The precision recipe the step runs in (``CALIBRATION_RECIPES``)."""
        return self.prepared.work.precision.name


def _build(config: TransformerConfig, batch: int, seq: int, step: str,
           hardware: Hardware, precision: str = "fp32") -> _Timed:
    from tensorledger.roofline import predict
    from tensorledger.workload import ModelSource, prepare, record_step
    from tensorledger.workload.spec import resolve_workload

    source = ModelSource(label=config.name, kind="preset", builder="reference",
                         name=config.name, config=config)
    work = resolve_workload(source, batch=batch, seq=seq, step=step, precision=precision,
                            device="cpu")
    prepared = prepare(work, "cpu")
    prepared.run()
    traced, _ = record_step(prepared)
    return _Timed(prepared, traced.records, predict(traced.records, hardware))


def _time_round(timed: _Timed, budget_s: float, name: str, profiled: int = 1) -> None:
    from tensorledger.bench.optiming import timed_round

    whole, calls = timed_round(timed.prepared.run, "cpu", {op.op for op in timed.prediction.ops},
                               budget_s=budget_s, name=name, warmup=1, profiled=profiled)
    timed.samples_s += whole.samples_s
    timed.round_medians_s.append(whole.median_s)
    timed.profiles.extend(calls)


def fresh_pages_by_class(classes: Sequence[str], records: Sequence[Any],
                         hardware: Hardware) -> dict[str, float]:
    """Seconds of fresh pages (``Hardware.fresh_pages_s``: a CPU's new tensors of its mmap
    threshold or more) of each class, from the tensors each op makes: a known part of the
    measured times, which the fit leaves out of what it fits (the roofline adds it again).

    >>> from types import SimpleNamespace as Rec
    >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
    ...                 dense_flop_per_s={"fp32": 1.0}, fresh_pages_from_bytes=32e6,
    ...                 fresh_page_bytes_per_s=4e9)
    >>> made = [Rec(storages_created=((1, 40_000_000),)), Rec(storages_created=((2, 8_000_000),)),
    ...         Rec(storages_created=((3, 80_000_000), (4, 1))), Rec()]
    >>> fresh_pages_by_class(["embedding", "matmul", "embedding", "view"], made, chip)
    {'embedding': 0.03}
    """
    found: dict[str, float] = defaultdict(float)
    for kind, record in zip(classes, records, strict=True):
        seconds = hardware.fresh_pages_s(
            size for _, size in getattr(record, "storages_created", ()))
        if seconds > 0:
            found[kind] += seconds  # (40 + 80) MB / 4 GB/s above: 30 ms
    return dict(found)


def _run(timed: _Timed, hardware: Hardware) -> Run:
    """The :class:`Run` of a step timed over every round: the median of all its samples, and
    each class's calls from the profiler, the median over the rounds, each less its fresh
    pages (:func:`fresh_pages_by_class`)."""
    from tensorledger.roofline.compare import compare

    # the prediction with each op's class (by its dtype too) as its category: compare() then
    # measures classes
    prediction = dataclasses.replace(timed.prediction, ops=tuple(
        dataclasses.replace(op, category=cost_class(op.op, op.category, op.phase,
                                                    op_precision(record)))
        for op, record in zip(timed.prediction.ops, timed.records, strict=True)))
    step_s = statistics.median(timed.samples_s)
    spans = [run.span_s for run in timed.profiles]
    result = compare(prediction, timed.profiles, step_s, 1.0, timed.round_medians_s, spans)
    kernel: dict[str, float] = defaultdict(float)
    by_phase: dict[tuple[str, str], float] = defaultdict(float)
    ops: dict[str, int] = defaultdict(int)
    counted: dict[str, float] = defaultdict(float)
    # the views by op: each view's category its op, the rest as before
    by_view = compare(dataclasses.replace(prediction, ops=tuple(
        dataclasses.replace(op, category=f"view {packet(op.op)}") if op.category == "view"
        else op for op in prediction.ops)), timed.profiles, step_s, 1.0,
        timed.round_medians_s, spans)
    views = {c.category.removeprefix("view "): (c.ops, c.measured_s)
             for c in by_view.categories if c.category.startswith("view ") and c.ops}
    pages = fresh_pages_by_class([op.category for op in prediction.ops], timed.records,
                                 hardware)
    fresh_s = sum(pages.values())
    # an op priced from its own kernel's curves counts no pieces (as predict_op reads it)
    parts = [0.0 if own_kernel_curve(traced, hardware, op.compute_key) else pieces(traced)
             for op, traced in zip(prediction.ops, timed.records, strict=True)]
    for op, part in zip(prediction.ops, parts, strict=True):
        kernel[op.category] += op.time_s - op.overhead_s
        by_phase[Calibration.group(op.phase), op.category] += op.time_s - op.overhead_s
        ops[Calibration.group(op.phase)] += 1
        counted[op.category] += part
    return Run(step_s=step_s - fresh_s,
               classes={c.category: (c.ops, kernel[c.category],
                                     max(c.measured_s - pages.get(c.category, 0.0), 0.0))
                        for c in result.categories if c.ops},
               kernel_by_phase=dict(by_phase), ops_by_phase=dict(ops), pieces=dict(counted),
               ops=tuple((op.category, Calibration.group(op.phase), op.compute_time_s,
                          op.memory_time_s, op.ideal_time_s, float(op.bytes), part)
                         for op, part in zip(prediction.ops, parts, strict=True)),
               ops_s=max(result.measured_ops_s - fresh_s, 0.0), between_s=result.residual_s,
               views=views, own_calls=frozenset(
                   op.category for op, traced in zip(prediction.ops, timed.records, strict=True)
                   if own_call_curve(traced, hardware, op.compute_key)))


def round_spread(medians: Sequence[float]) -> float:
    """How far a step's rounds disagree: (slowest − fastest) / their median.

    >>> round_spread([10.0, 11.0, 12.0])
    0.18181818181818182
    """
    middle = statistics.median(medians)
    return (max(medians) - min(medians)) / middle if middle > 0 else 0.0



def calibrate(hardware: Hardware, *, budget_s: float = CALIBRATION_BUDGET_S,
              rounds: int = CALIBRATION_ROUNDS,
              progress: Callable[[str], None] | None = None,
              recipes: Sequence[str] | None = None) -> Calibration:
    """Fit ``hardware``'s (a probed profile's) calibration on this CPU; see the module.

    Each calibration step is timed in ``rounds`` rounds of ``budget_s / rounds`` seconds (and
    one profiled step), taken in turn over every step, so that a spell when the machine runs
    slower falls on all of them alike rather than on one model.  Where a step's rounds differ
    by more than ``ROUND_SPREAD`` of its median, every step is measured again in as many
    rounds more (the fit pools both sets, more of the machine's spells), and a step whose two
    sets' medians still differ by more than ``ROUND_SPREAD`` is named in the calibration's
    ``unreliable``: its figure did not reproduce.  ``recipes``: the precision recipes whose
    steps are run (by default ``CALIBRATION_RECIPES``).
    """
    if rounds < 1 or not budget_s > 0:
        raise InputError(f"calibrate needs rounds >= 1 and a budget above 0, got {rounds} "
                         f"and {budget_s:g} s")
    session = CalibrationRounds(hardware, progress=progress, recipes=recipes)
    say = progress or (lambda _: None)

    def take(first: int, last: int) -> None:
        for index in range(first, last):
            session.round(budget_s / rounds, f"{index + 1} of {last}")

    take(0, rounds)
    steps = session.steps
    wide = {name: round_spread(timed.round_medians_s) for name, timed in steps}
    unreliable: tuple[str, ...] = ()
    if max(wide.values()) > ROUND_SPREAD:
        say(f"calibration: the rounds of {sum(v > ROUND_SPREAD for v in wide.values())} of "
            f"{len(steps)} steps differ by more than {ROUND_SPREAD:.0%}; measuring every step "
            f"again in {rounds} rounds more")
        first = {name: len(timed.samples_s) for name, timed in steps}
        take(rounds, 2 * rounds)
        unreliable = tuple(
            f"calibration {name} (rounds differ by {wide[name]:.0%}; measured again, its "
            f"median moved by {drift:.0%})" for name, timed in steps
            for drift in (_moved(timed.samples_s[:first[name]], timed.samples_s[first[name]:]),)
            if drift > ROUND_SPREAD)
    return dataclasses.replace(session.fitted(), unreliable=unreliable)


class CalibrationRounds:
    """The calibration steps of ``CALIBRATION_MODELS`` built on ``hardware`` (a probed
    profile; any calibration it has is set aside) and timed round by round: each
    :meth:`round` times every step in turn, :meth:`fitted` fits the rounds so far.
    :func:`calibrate` takes its rounds on their own; a benchmark can take them in turn with
    the steps it judges, so that a spell when the machine runs slower falls on the
    calibration and on those steps alike (never on the steps it judges themselves: the
    calibration sees only its own models).  ``profiled``: the steps of each model a round
    profiles call by call (the time between ops is each round's step times their median
    share outside their calls, so more of them steady it).

    ``sweep``: each round also times one round of the probe's fp32 matmul sweep (the sizes of
    ``hardware``'s ``matmul.fp32`` curve), and :meth:`fitted` prices the steps on the curve
    those rounds pooled, which :attr:`hardware` then holds (its fp32 peak the curve's best):
    the matmul curve is then measured in the same spells as the steps it is fitted on, not
    minutes before them.  Four probes of one 2-core VM, each before half an hour of rounds,
    put its 512² fp32 matmul at 121, 99, 111 and 76 GFLOP/s; a calibration fitted on a curve
    bent that way moves every matmul a workload has at that size.

    ``recipes``: the precision recipes whose steps are built (by default
    ``CALIBRATION_RECIPES``): each model's forward-backward and train step in each."""

    def __init__(self, hardware: Hardware, *,
                 progress: Callable[[str], None] | None = None, profiled: int = 1,
                 sweep: bool = False, recipes: Sequence[str] | None = None) -> None:
        from tensorledger.bench.probe import matmul_sizes

        if profiled < 1:
            raise InputError(f"a round profiles one step at least, got {profiled}")
        self._say = progress or (lambda _: None)
        self.profiled = profiled
        self.hardware = dataclasses.replace(hardware, calibration=None)
        # the matmul sizes the sweep times: those of the probed curve
        self._sweep: dict[int, list[Measurement]] = {
            n: [] for n in matmul_sizes(self.hardware.curves.get("matmul.fp32", ()))
        } if sweep else {}
        self.recipes = tuple(CALIBRATION_RECIPES if recipes is None else recipes)
        if not self.recipes:
            raise InputError("a calibration runs the steps of one precision recipe at least")
        self.steps: list[tuple[str, _Timed]] = []
        for recipe in self.recipes:
            for config, batch, seq in CALIBRATION_MODELS:
                for step in ("forward-backward", "train"):
                    # fp32's steps keep the names they had before the other recipes came
                    name = f"{config.name} {'' if recipe == 'fp32' else recipe + ' '}{step}"
                    self._say(f"calibration: building {name} step")
                    self.steps.append((f"{name} step", _build(config, batch, seq, step,
                                                              self.hardware, recipe)))
        self.taken = 0

    def round(self, budget_s: float, label: str = "") -> None:
        """Time every step once: ``budget_s`` of whole steps and ``profiled`` steps
        profiled call by call, each; and, with ``sweep``, each matmul size for ``budget_s``."""
        from tensorledger.bench.probe import matmul_round

        self.taken += 1
        for name, timed in self.steps:
            self._say(f"calibration round {label or self.taken}: {name}")
            _time_round(timed, budget_s, name, self.profiled)
        for n, found in self._sweep.items():
            self._say(f"calibration round {label or self.taken}: matmul fp32 {n}×{n}")
            found.append(matmul_round(n, budget_s))

    def fitted(self) -> Calibration:
        """The :func:`fit` of every round so far (with ``sweep``, on the curve they timed)."""
        from tensorledger.bench.probe import matmul_curve
        from tensorledger.roofline import predict

        if not self.taken:
            raise InputError("a calibration fits its rounds: take one round at least")
        curve = matmul_curve(self._sweep)
        if curve:
            self.hardware = dataclasses.replace(
                self.hardware, curves={**self.hardware.curves, "matmul.fp32": curve},
                dense_flop_per_s={**self.hardware.dense_flop_per_s,
                                  "fp32": max(rate for _, rate in curve)})
            for _, timed in self.steps:
                timed.prediction = predict(timed.records, self.hardware)
        runs = [_run(timed, self.hardware) for _, timed in self.steps]
        source = (
            "fitted by tensorledger probe on " + ", ".join(
                f"{c.name} (batch {b} × seq {s})" for c, b, s in CALIBRATION_MODELS) +
            f": forward-backward and train steps in {', '.join(self.recipes)}, "
            f"{self.taken} rounds each"
            f"{f' ({self.profiled} steps profiled a round)' if self.profiled > 1 else ''}; "
            "class scales and costs from the profiler's own time of each call, the time "
            "between ops from the harness's whole-step times and the profiled steps' share "
            "outside their calls" +
            ("; the fp32 matmul curve timed again in the same rounds" if curve else ""))
        return fit_recipes([(self.steps[i][1].recipe, StepSample(*runs[i:i + 2]))
                            for i in range(0, len(runs), 2)], source)


def _moved(before: Sequence[float], after: Sequence[float]) -> float:
    """How far a figure measured again moved: |median after − median before| over the
    median of both.

    >>> _moved([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])  # medians 2 and 3, of 2.5 pooled
    0.4
    """
    pooled = statistics.median([*before, *after])
    return (abs(statistics.median(after) - statistics.median(before)) / pooled
            if pooled > 0 else 0.0)
