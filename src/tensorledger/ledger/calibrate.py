"""Calibrate a probed profile on whole eager steps of calibration models.

The probe times kernels in isolated loops; a training step runs them between others (cold
caches, strided inputs, allocator traffic) and spends framework time between them (Python,
module code, autograd, the optimizer's loop).  ``calibrate`` runs small reference
Transformers (``CALIBRATION_MODELS``: shapes no benchmark workload uses) for real, times each
call with the profiler (matched to the trace's ops by position, so an op name two categories
share is measured in each) and the whole step with the harness, in rounds taken in turn over
every step (a spell when the machine runs slower then falls on every model alike, and a step
whose rounds disagree is named unreliable), and fits, in relative terms over the models:

- ``op_cost_s``: a view's own time (it runs no kernel, so its time is entering an op), and
  ``op_cost_by_footprint``: the same per step against the step's footprint (the mean bytes
  its ops move), a log-log line, since entering an op costs more in a step whose kernels
  stream more through the caches (a view took 5 µs in the smallest model, 14 µs in the
  largest); ``view_weights``: each view op's own time against ``aten.view``'s, scaled so
  that the calibration's views weigh as many as they are (one collection over the seven
  models: an unbind 3.5, a t 2.0, a permute 1.6, a view 0.9, a detach 0.06), since the views
  a step makes are not alike: the Llama-like models' views (expand, permute, unbind) cost
  more than the GPT-2-like models' at the same footprint, and one line through both priced
  the tiny preset's views 24% short in a collection timed op by op, 17% with the weights;
- per cost class (``roofline.model.cost_class``: the category, with costly and dividing
  elementwise ops, the optimizer's elementwise ops and fused norms apart), ``scale`` on the
  kernel time at the probed rates,
  ``call_cost_s`` (a kernel's fixed cost) and ``piece_cost_s`` (a cost for each row a copy
  writes, each block an attention loops over, batch × heads × query blocks, each FLOP
  of a costly elementwise op such as GELU, or each byte a matmul moves:
  ``roofline.model.pieces``),
  the non-negative least-squares fit of the class's measured time less the cost of entering
  its ops;
- ``between_ops_s``: the time per op between the calls — each round's whole step (no
  profiler) times its profiled steps' share outside their calls (``roofline.compare``) — one
  figure for forward and backward, one for the optimizer, each growing with its own ops'
  footprint (the activations the forward and backward stream, the parameters and state the
  optimizer streams) in proportion to the cost of entering an op, fitted by least squares
  over every step in relative terms.  One footprint for both, the whole step's, put the
  optimizer's time between ops too high where its parameters are small beside the
  activations: one collection of rounds predicted the time between the GPT-2-shaped d128
  step's ops 16% high, the d256 step's 23%, the held-aside model's 20%; by phase group,
  11%, 18% and 12% (the tiny preset's −6% became −11%).

The result is a :class:`~tensorledger.hardware.Calibration` that ``profile_toml`` writes into
the profile; ``roofline --hardware local`` then predicts with it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorledger.costs import packet
from tensorledger.errors import InputError
from tensorledger.hardware import Calibration, Hardware
from tensorledger.hardware.catalog import BETWEEN_GROUPS, FACTOR_RANGE
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.roofline.model import cost_class, pieces, step_footprint

if TYPE_CHECKING:
    from tensorledger.bench.harness import Measurement
    from tensorledger.bench.optiming import ProfiledStep
    from tensorledger.roofline.model import RooflinePrediction
    from tensorledger.trace import OpRecord
    from tensorledger.workload.step import PreparedStep

__all__ = ["CALIBRATION_BUDGET_S", "CALIBRATION_MODELS", "CALIBRATION_ROUNDS", "ROUND_SPREAD",
           "CalibrationRounds", "Run", "StepSample", "calibrate", "calibration_toml", "fit",
           "nonnegative_least_squares", "round_spread"]

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
SCALE_RANGE = (0.05, 50.0)
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


@dataclass(frozen=True)
class Run:
    """One step of a calibration model, run for real."""

    step_s: float  # the harness's median time of the whole step (no profiler)
    # cost class (roofline.model.cost_class) → (ops, kernel s at the probed rates, the
    # profiler's own s of its calls)
    classes: Mapping[str, tuple[int, float, float]]
    kernel_by_phase: Mapping[tuple[str, str], float]  # (phase group, class) → kernel s
    ops_by_phase: Mapping[str, int]  # "forward-backward" / "optimizer" → ops
    pieces: Mapping[str, float] = dataclasses.field(default_factory=dict)  # class → pieces
    # each op at the probed rates: (class, phase group, compute s, memory s, roofline bound
    # s, bytes moved, pieces), so the fit can price a step as the calibrated model will
    ops: tuple[tuple[str, str, float, float, float, float, float], ...] = ()
    # the profiler's own time of all the step's calls (0: not profiled); the step less it is
    # the time between ops that ``--measure`` shows
    ops_s: float = 0.0
    # the time between ops as measured round by round (compare's residual_s: each round's
    # step times its profiled steps' share outside their calls); None: not profiled
    between_s: float | None = None
    # each view op ("aten.t") → (calls, the profiler's own s of them: the median over the
    # profiled steps)
    views: Mapping[str, tuple[int, float]] = dataclasses.field(default_factory=dict)


def _footprint(run: Run, group: str | None = None) -> float | None:
    """The mean bytes an op of ``run`` moves (``roofline.model.step_footprint``); with
    ``group``, an op of that phase group (``Calibration.group``)."""
    return step_footprint(moved for _, of, *_, moved, _ in run.ops if group in (None, of))


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
    return _Timed(prepared, traced.records, predict(traced.records, hardware))


def _time_round(timed: _Timed, budget_s: float, name: str, profiled: int = 1) -> None:
    from tensorledger.bench.optiming import timed_round

    whole, calls = timed_round(timed.prepared.run, "cpu", {op.op for op in timed.prediction.ops},
                               budget_s=budget_s, name=name, warmup=1, profiled=profiled)
    timed.samples_s += whole.samples_s
    timed.round_medians_s.append(whole.median_s)
    timed.profiles.extend(calls)


def _run(timed: _Timed) -> Run:
    """The :class:`Run` of a step timed over every round: the median of all its samples, and
    each class's calls from the profiler, the median over the rounds."""
    from tensorledger.roofline.compare import compare

    # the prediction with each op's class as its category: compare() then measures classes
    prediction = dataclasses.replace(timed.prediction, ops=tuple(
        dataclasses.replace(op, category=cost_class(op.op, op.category, op.phase))
        for op in timed.prediction.ops))
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
    for op, traced in zip(prediction.ops, timed.records, strict=True):
        kernel[op.category] += op.time_s - op.overhead_s
        by_phase[Calibration.group(op.phase), op.category] += op.time_s - op.overhead_s
        ops[Calibration.group(op.phase)] += 1
        counted[op.category] += pieces(traced)
    return Run(step_s=step_s,
               classes={c.category: (c.ops, kernel[c.category], c.measured_s)
                           for c in result.categories if c.ops},
               kernel_by_phase=dict(by_phase), ops_by_phase=dict(ops), pieces=dict(counted),
               ops=tuple((op.category, Calibration.group(op.phase), op.compute_time_s,
                          op.memory_time_s, op.ideal_time_s, float(op.bytes), pieces(traced))
                         for op, traced in zip(prediction.ops, timed.records, strict=True)),
               ops_s=result.measured_ops_s, between_s=result.residual_s, views=views)


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

    The cost of entering an op, by the step's footprint, comes from the views' own times.
    Each class's kernel scale, cost a call and cost a piece come from the profiler's own
    times of its calls in every run (those times carry the profiler's cost per op, as a
    view's time does, so the figures are free of it): the measured time less the cost of
    entering the ops is fitted by :func:`nonnegative_least_squares` as scale × kernel time +
    cost a call × ops + cost a piece × pieces, in relative terms (each run's row divided by
    its measured time), so a small model counts as much as a large one.  The framework's
    time between ops, one figure for the forward-backward ops and one for the optimizer's,
    comes from whole step times, which carry no profiler: each round's step times its
    profiled steps' share outside their calls, the median over the rounds
    (``Run.between_s``, the residual ``--measure`` sets beside the prediction; the step
    less its ops as priced where a run was not profiled) is what it spends between ops,
    and the two figures are the relative fit of every step ((ops × r / step,
    optimizer ops × r' / step, rest / step), r and r' the cost of entering an op at the
    footprint of the forward-backward ops and of the optimizer's over ``op_cost_s``: the
    framework's time grows with the footprint as an op's entry does).
    Four calibrations pooled, beside three timings of the benchmark's workloads: one figure
    an op whatever the footprint, fitted on the priced ops, put 5.3 ms between the ops of the
    GPT-2-shaped d256 step, 8.6 ms with the footprint, 13.2 ms fitted on the measured ops,
    where 23 to 32 ms were measured; the held-aside model's 1.2, 1.5 and 2.1 ms against 1.7
    to 2.5 ms (the priced ops took up the calibration's kernel error).  A fit of sums instead lets
    the large models' kernel error set the small models' framework time: 84 µs an op where
    the relative fit found 19 µs, and the tiny preset's step predicted +172% against +18%
    (the same measured runs).
    """
    ops = 0
    views = 0.0
    for sample in samples:
        count, _, measured_s = sample.train.classes.get("view", (0, 0.0, 0.0))
        ops += count
        views += measured_s
    weights = _view_weights(samples)
    entering = Calibration(scale={}, op_cost_s=views / ops if ops else 0.0, between_ops_s={},
                           op_cost_by_footprint=_entry_by_footprint(samples, weights),
                           view_weights=weights)

    def entry(run: Run) -> float:
        return entering.entry(_footprint(run))

    rows: dict[str, list[tuple[float, ...]]] = defaultdict(list)
    for sample in samples:
        for run in (sample.forward_backward, sample.train):
            for name, (count, kernel_s, measured_s) in run.classes.items():
                if name != "view" and measured_s > 0:
                    rows[name].append((kernel_s / measured_s, count / measured_s,
                                       run.pieces.get(name, 0.0) / measured_s,
                                       1.0 - count * entry(run) / measured_s))
    low, high = SCALE_RANGE
    scale, call, piece = {}, {}, {}
    for name, found in rows.items():
        factor, per_call, per_piece = nonnegative_least_squares(found)
        scale[name] = min(high, max(low, factor))
        if per_call:
            call[name] = per_call
        if per_piece:
            piece[name] = per_piece
    draft = dataclasses.replace(entering, scale=scale, call_cost_s=call, piece_cost_s=piece,
                                source=source)

    def priced(run: Run) -> float:
        """The run's ops as the calibrated model prices them, less the time between ops
        (each op's scaled kernel, never below its roofline bound, its class's costs and the
        cost of entering it); by class sums where no ops were kept."""
        if run.ops:
            return sum(max(compute * draft.factor(kind, kind), memory * draft.factor(kind, kind),
                           bound) + call.get(kind, 0.0) + piece.get(kind, 0.0) * parts
                       for kind, _, compute, memory, bound, _, parts in run.ops
                       ) + len(run.ops) * entry(run)
        return sum(scale.get(kind, 1.0) * seconds
                   for (_, kind), seconds in run.kernel_by_phase.items()) + sum(
            run.ops_by_phase.values()) * entry(run)

    between = []
    for sample in samples:
        for run in (sample.forward_backward, sample.train):
            if run.step_s > 0:
                rest = (run.between_s if run.between_s is not None else
                        run.step_s - (run.ops_s or priced(run)))  # not profiled: as priced
                # an op's time between ops grows with its phase group's footprint
                between.append((*(run.ops_by_phase.get(group, 0) * entering.footprint_ratio(
                    _footprint(run, group)) / run.step_s for group in BETWEEN_GROUPS),
                                rest / run.step_s))
    return dataclasses.replace(draft, between_ops_s=dict(zip(
        BETWEEN_GROUPS, nonnegative_least_squares(between), strict=True)))


def nonnegative_least_squares(rows: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    """x ≥ 0 minimising Σ (a·x − c)² over the rows (a₁, …, aₙ, c): of the least-squares
    solutions on each subset of the columns (the others held at 0), the best with no
    negative figure.  n is small (at most 3 here), so trying every subset is exact and cheap;
    a column of zeros is left at 0, and columns of any size are solved alike:

    >>> [round(v, 9) for v in nonnegative_least_squares([(1, 0, 2), (0, 1, 3), (1, 1, 5)])]
    [2.0, 3.0]
    >>> # x alone would be negative
    >>> [round(v, 9) for v in nonnegative_least_squares([(1, 0, -1), (1, 1, 1)])]
    [0.0, 1.0]
    >>> # 2·2 + 1 = 5 and 2·4 + 1 = 9; the third column is all zeros
    >>> [round(v, 9) for v in nonnegative_least_squares([(2, 1, 0, 5), (4, 1, 0, 9)])]
    [2.0, 1.0, 0.0]
    >>> # seconds, calls and bytes (1.2 × kernel + 20 µs a call + 0.1 ns a byte, each row
    >>> # over its total): columns 10¹⁰ apart, which elimination on the raw sums took for
    >>> # singular (it returned 1.30, 0 and 0.105 ns)
    >>> rows = [(k / m, c / m, b / m, 1.0) for k, c, b in
    ...         ((1e-3, 10, 1e6), (2e-3, 20, 4e7), (5e-3, 10, 3e6))
    ...         for m in [1.2 * k + 20e-6 * c + 0.1e-9 * b]]
    >>> [round(v / unit, 6) for v, unit in zip(nonnegative_least_squares(rows), (1, 1e-6, 1e-9))]
    [1.2, 20.0, 0.1]
    """
    width = len(rows[0]) - 1 if rows else 0
    # each column divided by its norm, so that columns of very different sizes (a matmul's
    # kernel seconds beside the bytes it moves) are solved as precisely as each other
    norms = [math.sqrt(sum(r[i] ** 2 for r in rows)) for i in range(width)]
    scaled = [[r[i] / norms[i] if norms[i] else 0.0 for i in range(width)] + [r[-1]]
              for r in rows]
    best: tuple[float, tuple[float, ...]] = (math.inf, (0.0,) * width)
    for size in range(1, width + 1):
        for columns in itertools.combinations(range(width), size):
            solved = _solve([[sum(r[i] * r[j] for r in scaled) for j in columns]
                             for i in columns],
                            [sum(r[i] * r[-1] for r in scaled) for i in columns])
            if solved is None or min(solved) < 0:
                continue
            x = [0.0] * width
            for column, value in zip(columns, solved, strict=True):
                x[column] = value / norms[column] if norms[column] else 0.0
            cost = sum((sum(a * v for a, v in zip(r, x, strict=False)) - r[-1]) ** 2
                       for r in rows)
            if cost < best[0] * (1 - 1e-12):  # a larger subset must fit better, not as well
                best = (cost, tuple(x))
    return best[1]


def _solve(matrix: list[list[float]], right: list[float]) -> list[float] | None:
    """The solution of a small linear system by elimination with partial pivoting; None when
    it is singular."""
    n = len(right)
    rows = [[*row, value] for row, value in zip(matrix, right, strict=True)]
    scale = max((abs(v) for row in matrix for v in row), default=0.0)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) <= 1e-12 * scale:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col:
                f = rows[r][col] / rows[col][col]
                rows[r] = [a - f * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] / rows[i][i] for i in range(n)]


def _entry_by_footprint(samples: Sequence[StepSample], weights: Mapping[str, float]
                        ) -> tuple[tuple[float, float], ...]:
    """The cost of entering an op against the step's footprint: each run's views (they run
    no kernel, so their own time is entering an op) per view, each view counted at its op's
    weight (``weights``), and the least-squares line through them in log-log, kept as its two
    ends; empty where the runs' footprints do not spread over a factor of 2."""
    points = []
    for sample in samples:
        for run in (sample.forward_backward, sample.train):
            count, _, measured_s = run.classes.get("view", (0, 0.0, 0.0))
            units = (sum(weights.get(op, 1.0) * calls for op, (calls, _) in run.views.items())
                     if run.views else count)
            footprint = _footprint(run)
            if units and measured_s > 0 and footprint:
                points.append((footprint, measured_s / units))
    return _log_line(points, (1e-9, 1e-3))


#: The view every step makes, against which the others are weighed.
REFERENCE_VIEW = "aten.view"


def _view_weights(samples: Sequence[StepSample]) -> dict[str, float]:
    """Each view op's cost of entering against an average view's: in every run that makes
    ``aten.view``, the op's mean call over ``aten.view``'s, the geometric mean over the runs,
    scaled so that the runs' views weigh as many as they are (their calls at those weights
    sum to their count); empty where no run timed its views by op."""
    logs: dict[str, list[float]] = defaultdict(list)
    runs = [run for sample in samples for run in (sample.forward_backward, sample.train)
            if run.views.get(REFERENCE_VIEW, (0, 0.0))[1] > 0]
    for run in runs:
        calls, seconds = run.views[REFERENCE_VIEW]
        for op, (n, own) in run.views.items():
            if n and own > 0:
                logs[op].append(math.log(own / n / (seconds / calls)))
    relative = {op: math.exp(statistics.fmean(found)) for op, found in logs.items()}
    weighed = sum(relative.get(op, 1.0) * n for run in runs for op, (n, _) in run.views.items())
    count = sum(n for run in runs for n, _ in run.views.values())
    if not weighed:
        return {}
    low, high = FACTOR_RANGE  # what a profile holds
    return {op: min(high, max(low, value * count / weighed))
            for op, value in sorted(relative.items())}


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


def calibrate(hardware: Hardware, *, budget_s: float = CALIBRATION_BUDGET_S,
              rounds: int = CALIBRATION_ROUNDS,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Fit ``hardware``'s (a probed profile's) calibration on this CPU; see the module.

    Each calibration step is timed in ``rounds`` rounds of ``budget_s / rounds`` seconds (and
    one profiled step), taken in turn over every step, so that a spell when the machine runs
    slower falls on all of them alike rather than on one model.  Where a step's rounds differ
    by more than ``ROUND_SPREAD`` of its median, every step is measured again in as many
    rounds more (the fit pools both sets, more of the machine's spells), and a step whose two
    sets' medians still differ by more than ``ROUND_SPREAD`` is named in the calibration's
    ``unreliable``: its figure did not reproduce.
    """
    if rounds < 1 or not budget_s > 0:
        raise InputError(f"calibrate needs rounds >= 1 and a budget above 0, got {rounds} "
                         f"and {budget_s:g} s")
    session = CalibrationRounds(hardware, progress=progress)
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
    bent that way moves every matmul a workload has at that size."""

    def __init__(self, hardware: Hardware, *,
                 progress: Callable[[str], None] | None = None, profiled: int = 1,
                 sweep: bool = False) -> None:
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
        self.steps: list[tuple[str, _Timed]] = []
        for config, batch, seq in CALIBRATION_MODELS:
            for step in ("forward-backward", "train"):
                self._say(f"calibration: building {config.name}, {step} step")
                self.steps.append((f"{config.name} {step} step",
                                   _build(config, batch, seq, step, self.hardware)))
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
        runs = [_run(timed) for _, timed in self.steps]
        return fit([StepSample(*runs[i:i + 2]) for i in range(0, len(runs), 2)],
                   source="fitted by tensorledger probe on " + ", ".join(
                       f"{c.name} (batch {b} × seq {s})" for c, b, s in CALIBRATION_MODELS) +
                   f": forward-backward and train steps in fp32, {self.taken} rounds each"
                   f"{f' ({self.profiled} steps profiled a round)' if self.profiled > 1 else ''}; "
                   "class scales and costs from the profiler's own time of each call, the time "
                   "between ops from the harness's whole-step times and the profiled steps' "
                   "share outside their calls" +
                   ("; the fp32 matmul curve timed again in the same rounds" if curve else ""))


def _moved(before: Sequence[float], after: Sequence[float]) -> float:
    """How far a figure measured again moved: |median after − median before| over the
    median of both.

    >>> _moved([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])  # medians 2 and 3, of 2.5 pooled
    0.4
    """
    pooled = statistics.median([*before, *after])
    return (abs(statistics.median(after) - statistics.median(before)) / pooled
            if pooled > 0 else 0.0)


def calibration_toml(calibration: Calibration) -> str:
    """The ``[calibration]`` table of a profile (``load_hardware_file`` reads it back)."""
    scales = ", ".join(f'{name} = {value!r}' for name, value in sorted(
        calibration.scale.items()))
    between = ", ".join(f'"{k}" = "{v * 1e9!r}ns"' for k, v in
                        calibration.between_ops_s.items())
    costs = {key: ", ".join(f'{name} = "{value * 1e9!r}ns"' for name, value in sorted(
        table.items())) for key, table in (("call_cost", calibration.call_cost_s),
                                           ("piece_cost", calibration.piece_cost_s))}
    unreliable = ", ".join(f'"{u}"' for u in calibration.unreliable)
    footprint = ", ".join(f"[{x!r}, {y!r}]" for x, y in calibration.op_cost_by_footprint)
    weights = ", ".join(f'"{op}" = {value!r}' for op, value in sorted(
        calibration.view_weights.items()))
    return "\n".join([
        "[calibration]  # whole eager steps: see tensorledger.ledger.calibrate",
        f'source = "{calibration.source}"',
        f'op_cost = "{calibration.op_cost_s * 1e9!r}ns"',
        f"scale = {{ {scales} }}",
        f"between_ops = {{ {between} }}",
        *(f"{key} = {{ {table} }}" for key, table in costs.items() if table),
        *([f"op_cost_by_footprint = [{footprint}]"] if footprint else []),
        *([f"view_weights = {{ {weights} }}"] if weights else []),
        *([f"unreliable = [{unreliable}]"] if unreliable else []),
    ]) + "\n"
