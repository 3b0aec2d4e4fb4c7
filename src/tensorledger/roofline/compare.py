"""Predicted against measured: per category and for the whole step, with the error shown.

Measured per-call times (from dispatch timing, or the profiler's calls in order) are matched
to the predicted ops by position, where the two sequences of names agree (an op one side lacks
shifts nothing after it), else by op name; each category's measured time is the median over
the runs of its calls' sum, so one slow run does not move it.
The whole-step time comes from the benchmark harness; what it holds beyond the ops' own
times (Python, autograd bookkeeping, module code) is reported as ``unattributed_s``: where the
runs were taken in rounds beside whole steps, the median over the rounds of each round's
step less its profiled runs' calls, their median where a round profiles several (a
difference of two measurements seconds apart: on a 2-core VM whose speed wanders, it put
8.2, 10.0 and 8.7 ms between the ops of one step in three runs, where the pooled step less
the pooled calls put −3.4, 9.5 and 5.4 ms; three profiled steps a round rather than one
narrowed the tiny preset's spread over three runs from 19.8% to 10.5% in a quiet spell,
though a spell when the machine wandered still spread it 99%).  The two come from
separate runs, so on a busy machine the ops can sum to more than the step: then the
residual is 0, not negative, and ``ops_exceed_step`` says the measurement is noisy.
Where each profiled step carries its span (``bench.optiming.ProfiledStep``: the profiler's
wall time from its first call's start to its last call's end), everything is measured as a
share of the profiled step instead and set on the step timed without the profiler: each
run's calls times the step over the run's span, and the time between ops the step times the
median share of a span that lies outside its calls' own times.  A profiled step's calls and
its span slow down together, so those shares hold still where the difference does not: on
the same VM, twelve rounds of the tiny preset's 4 × 32 train step gave round-by-round
differences from −1.4 to 6.0 ms (steps of 8.5 to 14.8 ms, the profiled steps' calls summing to
6.6 to 12.5 ms), where the share outside the calls of twelve profiled steps lay between 0.39
and 0.43 (3rd smallest and largest).  And the profiler's own cost on every call, which
makes a profiled step slower than the step (its calls and the time between them added up to
1.17 times the step of the tiny preset, 1.13 times own_model's, 1.05 times a 450 ms GPT-2-
shaped step's), is left out of both rather than counted in the calls.  The ops can still sum
to more than the step (``ops_exceed_step``), but the time between them is never negative.
Each of those medians over runs or rounds comes with its distribution-free interval
(:func:`median_interval`), so that an error can be set beside what the measurement itself can
tell apart: twelve rounds of a GPT-2-shaped step on that VM put the time between ops at a
median of 1.5 ms with an interval from −1.4 to 3.9 ms.
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tensorledger.costs import lookup, packet
from tensorledger.roofline.model import RooflinePrediction
from tensorledger.summary import show_time, summary

__all__ = ["MEDIAN_COVERAGE", "CategoryComparison", "Comparison", "TimedOp", "compare",
           "median_interval"]

#: The least probability with which :func:`median_interval` holds the true median.
MEDIAN_COVERAGE = 0.95


class TimedOp(Protocol):
    @property
    def op(self) -> str: ...
    @property
    def time_s(self) -> float: ...


@dataclass(frozen=True)
class CategoryComparison:
    category: str
    ops: int
    predicted_s: float
    measured_s: float
    error: float  # predicted / measured − 1
    # the measured median's interval over the runs (median_interval); None: too few runs
    measured_interval_s: tuple[float, float] | None = None


@dataclass(frozen=True)
class Comparison:
    hardware: str
    predicted_step_s: float
    measured_step_s: float
    error: float  # predicted / measured − 1
    predicted_between_s: float  # of the predicted step, the framework's time between ops
    between_error: float  # predicted between / measured residual − 1; nan when either is 0
    measured_ops_s: float  # the sum of the ops' own measured times
    unattributed_s: float  # residual_s, never below 0
    ops_exceed_step: bool  # the ops' own times sum to more than the step: a noisy measurement
    # the time between ops as measured: the step less its ops (below 0 when they exceed it),
    # or, where the runs have spans, the step times their share outside their calls
    residual_s: float
    matched_by: str  # "position", "op name", or "position (N of M calls by op name)"
    categories: tuple[CategoryComparison, ...]
    flops: int
    peak_flop_per_s: float
    predicted_mfu: float
    measured_mfu: float  # counted FLOPs / measured step time / peak
    # the interval of the median round's residual (median_interval); None: not measured in
    # rounds, or too few of them
    residual_interval_s: tuple[float, float] | None = None

    def __repr__(self) -> str:
        return summary("Comparison", self.hardware, f"predicted {show_time(self.predicted_step_s)}",
                       f"measured {show_time(self.measured_step_s)}", f"error {self.error:+.1%}")


def median_interval(values: Sequence[float], coverage: float = MEDIAN_COVERAGE
                    ) -> tuple[float, float] | None:
    """A distribution-free interval for the median of what ``values`` sample: the k-th
    smallest and k-th largest value, k the largest for which the count of values below the
    median, Binomial(n, ½), falls below k with probability at most (1 − coverage) / 2 on each
    side; ``None`` when even the smallest and largest do not reach ``coverage`` (n < 6 at 95%).

    >>> # n = 12: P(B ≤ 2) = (1 + 12 + 66) / 4096 = 1.9% ≤ 2.5% (and P(B ≤ 3) = 7.3% is not):
    >>> # the 3rd smallest and 3rd largest, which hold the median with probability 96.1%
    >>> median_interval([9, 1, 8, 2, 7, 3, 6, 4, 5, 10, 11, 12])
    (3, 10)
    >>> median_interval([1, 2, 3, 4, 5]) is None  # P(B = 0) = 1/32 = 3.1% > 2.5%
    True
    """
    n = len(values)
    tail = (1 - coverage) / 2
    k, below = 0, 0.0  # below: P(B ≤ k − 1), the chance that the k-th smallest exceeds it
    while k < n and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def _aligned(predicted: Sequence[str], timed: Sequence[str]) -> dict[int, int]:
    """Which predicted op each timed call is, where the two sequences of names agree, so an
    op that one side has and the other lacks (a ``detach`` the profiler does not show, the
    entry of a ``linear`` the trace does not see) shifts nothing after it.

    Anchors first: each name that both sides make equally often pairs its k-th calls, and the
    longest chain of pairs in order on both sides is kept; the stretches between anchors are
    matched by ``difflib``.  A whole-step ``difflib`` match is quadratic in the ops (88 s for
    5,000), the anchors leave it short stretches.

    An op and its in-place variant (``aten.add`` and ``aten.add_``) are matched as one name
    (``_out_of_place``): autograd adds a gradient that reaches a tensor twice into the first
    in place where it may, which the trace on fake tensors records out of place.

    >>> _aligned(["mm", "detach", "add", "mm"], ["mm", "linear", "add", "mm"])
    {0: 0, 2: 2, 3: 3}
    >>> _aligned(["aten.mm", "aten.add", "aten.add_"], ["aten.mm", "aten.add_", "aten.add_"])
    {0: 0, 1: 1, 2: 2}
    """
    predicted = [_out_of_place(name) for name in predicted]
    timed = [_out_of_place(name) for name in timed]
    where_p: dict[str, list[int]] = defaultdict(list)
    where_t: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(predicted):
        where_p[name].append(i)
    for j, name in enumerate(timed):
        where_t[name].append(j)
    pairs = sorted((i, j) for name, ps in where_p.items()
                   if len(ps) == len(where_t.get(name, ())) for i, j in zip(ps, where_t[name],
                                                                            strict=True))
    found = dict((j, i) for i, j in _increasing(pairs))
    anchors = sorted(found.items())  # (timed, predicted), increasing on both sides
    bounds = [(-1, -1), *((i, j) for j, i in anchors), (len(predicted), len(timed))]
    for (i0, j0), (i1, j1) in itertools.pairwise(bounds):
        if i1 - i0 > 1 and j1 - j0 > 1:  # a stretch between anchors: match it on its own
            matcher = difflib.SequenceMatcher(a=predicted[i0 + 1:i1], b=timed[j0 + 1:j1],
                                              autojunk=False)
            for a, b, size in matcher.get_matching_blocks():
                found.update((j0 + 1 + b + k, i0 + 1 + a + k) for k in range(size))
    return found


def _out_of_place(name: str) -> str:
    """An op's name with an in-place variant's trailing underscore dropped (a dunder kept).

    >>> _out_of_place("aten.add_"), _out_of_place("aten.add"), _out_of_place("aten.__and__")
    ('aten.add', 'aten.add', 'aten.__and__')
    """
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _increasing(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest chain of ``pairs`` (sorted by their first) whose seconds increase too
    (patience sorting, n log n).

    >>> _increasing([(0, 0), (1, 5), (2, 1), (3, 2), (4, 9)])
    [(0, 0), (2, 1), (3, 2), (4, 9)]
    """
    tails: list[int] = []  # tails[k]: the pair ending the best chain of k + 1 found so far
    ends: list[int] = []  # the seconds of those pairs, increasing
    before = [-1] * len(pairs)  # each pair's predecessor in its chain
    for index, (_, second) in enumerate(pairs):
        k = bisect.bisect_left(ends, second)
        before[index] = tails[k - 1] if k else -1
        if k == len(tails):
            tails.append(index)
            ends.append(second)
        else:
            tails[k] = index
            ends[k] = second
    chain = []
    index = tails[-1] if tails else -1
    while index >= 0:
        chain.append(pairs[index])
        index = before[index]
    return chain[::-1]


def _category(op: str, known: dict[str, str]) -> str:
    """The category of a measured op: as traced, else by its cost rule (ops the profiler sees
    inside or around traced ones, such as ``copy_`` inside ``clone``), else ``untraced``."""
    if op in known:
        return known[op]
    rule = lookup(op)
    return rule.category if rule is not None else "untraced"


def compare(prediction: RooflinePrediction, runs: Sequence[Sequence[TimedOp]],
            measured_step_s: float, peak_flop_per_s: float,
            round_steps_s: Sequence[float] | None = None,
            spans_s: Sequence[float | None] | None = None) -> Comparison:
    """Set the prediction beside per-op timing runs and the measured step time.

    ``round_steps_s``: where the runs were taken in rounds, each beside whole steps timed
    just before it, the median step of each round; ``runs`` then holds the same number of
    profiled steps from each round, in round order (one or more a round).  The time between
    ops is the median over the rounds of the round's step less the median of its runs'
    calls, a difference of two measurements seconds apart rather than minutes, and the more
    profiled steps a round has, the less one slow profiled step moves it.

    ``spans_s``: each run's wall time from its first call's start to its last call's end
    (``bench.optiming.ProfiledStep.span_s``).  Where every run has one, each run's calls are
    set on the step timed without the profiler (its round's, else ``measured_step_s``):
    times that step over the run's span; and the time between ops is measured inside the
    profiled steps: the step (each round's) times the median share of a run's span that lies
    outside its calls' own times.  Both are shares of one profiled step, so a machine whose
    speed moves between the whole steps and the profiled ones moves them no more than it
    moves the step, and the profiler's own cost, which makes a profiled step slower, is left
    out of them (see the module)."""
    measured: dict[str, float] = defaultdict(float)
    predicted: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for op in prediction.ops:  # the time between ops is set beside the measured residual
        predicted[op.category] += op.time_s - op.between_ops_s
        counts[op.category] += 1
    names = [packet(o.op) for o in prediction.ops]
    category_of = {name: o.category for name, o in zip(names, prediction.ops, strict=True)}
    category_of.update({o.op: o.category for o in prediction.ops})
    totals = []  # per run: category → its calls' own time
    by_name = 0
    alignments: dict[tuple[str, ...], dict[int, int]] = {}  # runs mostly make the same calls
    for run in runs:
        spelled = tuple(packet(call.op) for call in run)
        if spelled not in alignments:
            alignments[spelled] = _aligned(names, spelled)
        found = alignments[spelled]
        total: dict[str, float] = defaultdict(float)
        for j, call in enumerate(run):
            if j in found:
                total[prediction.ops[found[j]].category] += call.time_s
            else:
                total[_category(call.op, category_of)] += call.time_s
                by_name += 1
        totals.append(total)
    if round_steps_s is not None and runs and (
            not round_steps_s or len(runs) % len(round_steps_s)):
        raise ValueError(f"{len(runs)} profiled steps do not divide among "
                         f"{len(round_steps_s)} rounds")
    shares = None  # each run's share of its span outside its calls
    if spans_s is not None and len(spans_s) == len(runs) and runs and all(
            span is not None and span > 0 for span in spans_s):
        spans = [span for span in spans_s if span is not None]
        shares = [max(0.0, 1.0 - sum(call.time_s for call in run) / span)
                  for run, span in zip(runs, spans, strict=True)]
        # each run's calls set on the step timed without the profiler (its round's)
        steps = ([measured_step_s] * len(runs) if round_steps_s is None else
                 [round_steps_s[i * len(round_steps_s) // len(runs)] for i in range(len(runs))])
        totals = [{c: t * step / span for c, t in total.items()}
                  for total, step, span in zip(totals, steps, spans, strict=True)]
    intervals: dict[str, tuple[float, float] | None] = {}
    for category in {c for total in totals for c in total}:
        each = [total.get(category, 0.0) for total in totals]
        measured[category] = statistics.median(each)
        intervals[category] = median_interval(each)
    calls = sum(len(run) for run in runs)
    matched_by = ("position" if not by_name else "op name" if by_name == calls else
                  f"position ({by_name} of {calls} calls by op name)")
    categories = tuple(sorted(
        (CategoryComparison(category=c, ops=counts.get(c, 0), predicted_s=predicted.get(c, 0.0),
                            measured_s=measured.get(c, 0.0),
                            error=(predicted.get(c, 0.0) / measured[c] - 1
                                   if measured.get(c) else float("nan")),
                            measured_interval_s=intervals.get(c))
         for c in set(predicted) | set(measured)),
        key=lambda c: -c.measured_s))
    ops_s = sum(measured.values())
    between = sum(o.between_ops_s for o in prediction.ops)
    interval = None
    if round_steps_s is not None and runs:
        each_round = len(runs) // len(round_steps_s)
        if shares is None:
            each = [step - statistics.median(sum(call.time_s for call in run) for run in
                                             runs[i * each_round:(i + 1) * each_round])
                    for i, step in enumerate(round_steps_s)]
        else:
            each = [step * statistics.median(shares[i * each_round:(i + 1) * each_round])
                    for i, step in enumerate(round_steps_s)]
        raw = statistics.median(each)
        interval = median_interval(each)
    elif shares is not None and shares:
        raw = measured_step_s * statistics.median(shares)
        interval = median_interval([measured_step_s * share for share in shares])
    else:
        raw = measured_step_s - ops_s
    exceeded = (raw if shares is None else measured_step_s - ops_s) < 0
    residual = max(0.0, raw)
    return Comparison(
        hardware=prediction.hardware, predicted_step_s=prediction.time_s,
        measured_step_s=measured_step_s, error=prediction.time_s / measured_step_s - 1,
        predicted_between_s=between,
        between_error=between / residual - 1 if between and residual else float("nan"),
        measured_ops_s=ops_s, unattributed_s=residual,
        ops_exceed_step=exceeded, residual_s=raw, matched_by=matched_by,
        categories=categories, flops=prediction.flops, peak_flop_per_s=peak_flop_per_s,
        predicted_mfu=prediction.flops / prediction.time_s / peak_flop_per_s
        if prediction.time_s else 0.0,
        measured_mfu=prediction.flops / measured_step_s / peak_flop_per_s,
        residual_interval_s=interval)
