"""The fit of a calibration: the steps a calibration ran (:class:`Run`, :class:`StepSample`),
the figures fitted on them (:func:`fit`, by :func:`nonnegative_least_squares`), and the
``[calibration]`` table of a profile that holds them (:func:`calibration_toml`).

Running and timing the calibration models, round by round, is
:mod:`tensorledger.ledger.calibrate`, which re-exports these names.  The fit, in relative
terms over the models:

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
- per cost class (``roofline.cost_classes.cost_class``: the category, with costly and dividing
  elementwise ops, the optimizer's elementwise ops and fused norms apart), ``scale`` on the
  kernel time at the probed rates,
  ``call_cost_s`` (a kernel's fixed cost) and ``piece_cost_s`` (a cost for each row a copy
  writes, each block an attention loops over, batch × heads × query blocks, each FLOP
  of a costly elementwise op such as GELU, or each byte a matmul moves:
  ``roofline.cost_classes.pieces``),
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

The result is a :class:`~tensorledger.hardware.Calibration`.

A run's footprint, by which entering an op and the time between ops grow, is the mean bytes
its ops move (a view, moving none, left out), over the whole step or one phase group:

>>> run = Run(step_s=1e-3, classes={}, kernel_by_phase={}, ops_by_phase={},
...           ops=(("matmul", "forward-backward", 0.0, 0.0, 0.0, 4096.0, 1.0),
...                ("view", "forward-backward", 0.0, 0.0, 0.0, 0.0, 0.0),
...                ("elementwise-optimizer", "optimizer", 0.0, 0.0, 0.0, 1024.0, 1.0)))
>>> _footprint(run), _footprint(run, "optimizer")  # (4096 + 1024) / 2, and 1024 alone
(2560.0, 1024.0)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.hardware import Calibration
from tensorledger.hardware.catalog import BETWEEN_GROUPS, FACTOR_RANGE
from tensorledger.roofline.model import step_footprint

__all__ = ["REFERENCE_VIEW", "SCALE_RANGE", "Run", "StepSample", "calibration_toml", "fit",
           "fit_recipes", "nonnegative_least_squares"]

#: The range a class's kernel scale is clamped to.
SCALE_RANGE = (0.05, 50.0)


@dataclass(frozen=True)
class Run:
    """One step of a calibration model, run for real."""

    step_s: float  # the harness's median time of the whole step (no profiler)
    # cost class (roofline.cost_classes.cost_class) → (ops, kernel s at the probed rates, the
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
    # the classes whose ops the profile prices with a call's own cost from their kernel's
    # curves (``kernel_rates.own_call_curve``): the fit adds no cost a call to them
    own_calls: frozenset[str] = frozenset()


def _footprint(run: Run, group: str | None = None) -> float | None:
    """The mean bytes an op of ``run`` moves (``roofline.model.step_footprint``); with
    ``group``, an op of that phase group (``Calibration.group``)."""
    return step_footprint(moved for _, of, *_, moved, _ in run.ops if group in (None, of))


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
    cost a call × ops + cost a piece × pieces (no cost a call where the profile prices a
    call's own cost from the kernel's curves, ``Run.own_calls``), in relative terms (each
    run's row divided by its measured time), so a small model counts as much as a large
    one.  The framework's time between ops, one figure for the forward-backward ops and one
    for the optimizer's, comes from whole step times, which carry no profiler: each round's
    step times its profiled steps' share outside their calls, the median over the rounds
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
                    calls = 0 if name in run.own_calls else count  # a column of 0s stays at 0
                    rows[name].append((kernel_s / measured_s, calls / measured_s,
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
    if not between:
        raise InputError("a calibration fits the time between ops from whole steps' times, "
                         "and none of these runs timed its step")
    return dataclasses.replace(draft, between_ops_s=dict(zip(
        BETWEEN_GROUPS, nonnegative_least_squares(between), strict=True)))


def fit_recipes(samples: Sequence[tuple[str, StepSample]], source: str = "") -> Calibration:
    """The calibration of every recipe's steps, each ``(recipe, sample)``: the :func:`fit` of
    the fp32 steps, with the fit of the low-precision recipes' steps (mixed-bf16, bf16) as
    its ``low_precision``, which prices a step that runs any op in bf16 or fp16
    (``roofline.model.calibrated_for``): the framework's cost of an op (entering it, the time
    between ops) differs by recipe at the same footprint.  Steps of one kind alone: their one
    fit.
    The same measured rounds fitted both ways (three calibrations of one 2-core VM, each
    beside the benchmark's five workloads in three recipes, and the three pooled in pairs):
    the fp32 calibration model the benchmark times again came out 4.7% to 23.4% over its
    step with one fit, −3.5% to +12.7% fitted apart; the workloads' steps within 10%, fp32,
    mixed-bf16 and bf16, 11, 14, 14 of 15 and 10, 15, 14 pooled with one fit, 11, 13, 14 and
    14, 14, 15 fitted apart (81 of 90 against 78).
    """
    full = [sample for recipe, sample in samples if recipe == "fp32"]
    low = [sample for recipe, sample in samples if recipe != "fp32"]
    if not full or not low:
        return fit(full or low, source)
    recipes = ", ".join(dict.fromkeys(recipe for recipe, _ in samples if recipe != "fp32"))
    return dataclasses.replace(fit(full, source), low_precision=fit(
        low, f"the steps in {recipes} of the calibration above, fitted apart"))


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

def calibration_toml(calibration: Calibration, table: str = "calibration") -> str:
    """The ``[calibration]`` table of a profile (``load_hardware_file`` reads it back), and
    its low-precision recipes' fit (``Calibration.low_precision``) as the table
    ``[calibration.low_precision]`` after it."""
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
    header = (f"[{table}]  # whole eager steps: see tensorledger.ledger.calibrate"
              if table == "calibration" else
              f"[{table}]  # the steps of the bf16 and fp16 recipes, fitted apart")
    low = calibration.low_precision
    return "\n".join([
        header,
        f'source = "{calibration.source}"',
        f'op_cost = "{calibration.op_cost_s * 1e9!r}ns"',
        f"scale = {{ {scales} }}",
        f"between_ops = {{ {between} }}",
        *(f"{key} = {{ {table} }}" for key, table in costs.items() if table),
        *([f"op_cost_by_footprint = [{footprint}]"] if footprint else []),
        *([f"view_weights = {{ {weights} }}"] if weights else []),
        *([f"unreliable = [{unreliable}]"] if unreliable else []),
    ]) + "\n" + (calibration_toml(low, f"{table}.low_precision") if low else "")
