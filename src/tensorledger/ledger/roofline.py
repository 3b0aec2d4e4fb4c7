"""The ``roofline`` pipeline: trace a workload's step, predict it, and optionally run it for real.

The prediction comes from the trace of one (steady-state) step; the measurement runs the very
same prepared step on this machine (``measure`` for the whole step, the profiler for the split
between ops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorledger.display import view
from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.ledger.cluster import ClusterStep, cluster_step
from tensorledger.ledger.header import WorkloadHeader, header_of
from tensorledger.roofline.compare import Comparison, compare
from tensorledger.roofline.decode import ServingFigures, serving_figures
from tensorledger.roofline.model import RooflinePrediction, predict
from tensorledger.roofline.modules import ModuleTime, module_times
from tensorledger.summary import show_time, summary
from tensorledger.workload import (
    Workload,
    device_records,
    placement,
    prepare,
    record_step,
    trace_workload,
)

if TYPE_CHECKING:
    from tensorledger.trace import Trace
    from tensorledger.workload.schedule_order import OrderTimeline

__all__ = ["RooflineRun", "StepTiming", "roofline_report"]


@dataclass(frozen=True)
class RooflineRun(WorkloadHeader):
    """One step predicted on a chip (and, with a measurement, run beside its prediction)."""

    tokens: int
    uncovered: dict[str, int]
    prediction: RooflinePrediction
    comparison: Comparison | None  # with --measure
    measurement_warning: str | None
    hardware_unreliable: tuple[str, ...]  # figures a probed profile marks as noisy
    modules: tuple[ModuleTime, ...] = ()  # by module, cut to a depth, repeats grouped
    ranks: int = 1  # the step is one rank of a layout of this many devices
    layout: str = ""
    cluster: ClusterStep | None = None  # the cluster's step, as this rank sets it
    serving: ServingFigures | None = None  # prefill and decode: time per token, what bounds it

    @property
    def step_s(self) -> float:
        """The cluster's step: this rank's expected time, stretched by the pipeline bubble."""
        return self.prediction.time_s if self.cluster is None else self.cluster.step_s

    def __repr__(self) -> str:
        p = self.prediction
        measured = "" if self.comparison is None else (
            f"measured {show_time(self.comparison.measured_step_s)}")
        return summary("RooflineRun", f"{self.model} {self.step} on {p.hardware}",
                       f"{show_time(p.time_s)} per step expected", measured,
                       f"MFU {p.mfu:.3f}", f"bound {show_time(p.ideal_time_s)}")

    def __rich__(self) -> object:  # rich: the command's tables, from the presentation layer
        return view("rich", self)

    def _repr_html_(self) -> str:  # Jupyter: the same tables as HTML, from presentation
        return str(view("html", self))


class StepTiming:
    """A workload's step run for real beside its prediction, in rounds.

    Built, the step is made on the workload's device (cpu or cuda), run once to warm up
    (optimizer state, allocator, caches), traced and predicted.  Each :meth:`round` then
    times ``budget_s`` of whole steps (``measure``) and ``profiled`` steps op by op (the
    profiler's own time of each call); :meth:`compared` sets every round beside the
    prediction: the step's time is the median of every sample, a category's the median over
    the profiled steps, the time between ops the median over the rounds of the round's step
    less its profiled steps' median (``roofline.compare``).
    ``roofline_report`` takes one workload's rounds one after another; a benchmark of
    several workloads can take theirs in turn, so that a spell when the machine runs slower
    falls on every workload alike rather than on one.
    """

    def __init__(self, work: Workload, hardware: Hardware, *,
                 progress: Callable[[str], None] | None = None, profiled: int = 1) -> None:
        if profiled < 1:
            raise InputError(f"a round profiles one step at least, got {profiled}")
        if not work.layout.single:
            raise InputError(f"--measure runs one device for real; a layout of "
                             f"{work.layout.count} is traced on fake ranks (measure it under "
                             "torchrun)")
        if work.device not in ("cpu", "cuda"):
            raise InputError(f"--measure runs the step for real: use --device cpu or cuda "
                             f"(got {work.device})")
        from tensorledger.bench.harness import Measurement
        from tensorledger.bench.optiming import ProfiledStep
        from tensorledger.workload.step import routed  # (imports torch)

        say = progress or (lambda _: None)
        self.work, self.hardware, self.profiled = work, hardware, profiled
        with placement(work.device) as target, routed(work):
            say(f"building {work.model} on {work.device}")
            self.step = prepare(work, target)
            say("running the first step")
            self.step.run()  # steady state: the first step creates optimizer state
            self.traced, _ = record_step(self.step)
        self.prediction = predict(self.traced.records, hardware, tokens=work.tokens)
        self.names = {record.op for record in self.traced.records}
        self.parts: list[Measurement] = []  # each round's whole steps
        self.calls: list[ProfiledStep] = []  # each round's profiled steps, in order

    def round(self, budget_s: float, *, warmup: int = 0) -> None:
        """One round: ``warmup`` steps untimed, whole steps for ``budget_s``, then
        ``profiled`` steps profiled call by call."""
        from tensorledger.bench.optiming import timed_round

        work = self.work
        whole, steps = timed_round(self.step.run, work.device, self.names,
                                   budget_s=budget_s,
                                   name=f"{work.model} {work.step.name}", warmup=warmup,
                                   min_repeats=1, profiled=self.profiled)
        self.parts.append(whole)
        self.calls.extend(steps)

    def reprice(self, hardware: Hardware) -> None:
        """Predict the traced step again on ``hardware`` (a calibration fitted while the
        rounds were taken, say); the rounds already taken stay."""
        self.hardware = hardware
        self.prediction = predict(self.traced.records, hardware, tokens=self.work.tokens)

    def compared(self) -> tuple[Comparison, str | None]:
        """The rounds so far beside the prediction, and the harness's warning, if any."""
        from tensorledger.bench.harness import pooled

        if not self.parts:
            raise InputError("a step timing compares its rounds: take one round at least")
        whole = pooled(self.parts)
        return compare(self.prediction, self.calls, whole.median_s,
                       self.hardware.peak_flop_per_s(self.prediction.mfu_peak_key),
                       [part.median_s for part in self.parts],
                       [run.span_s for run in self.calls]), whole.warning

    def report(self, *, depth: int | None = None) -> RooflineRun:
        """The :class:`RooflineRun` of the rounds so far."""
        comparison, warning = self.compared()
        return _report(self.work, self.hardware, self.traced, self.prediction, comparison,
                       warning, depth)


def roofline_report(work: Workload, hardware: Hardware, *, measure_step: bool = False,
                    budget_s: float = 2.0, timing_runs: int = 6,
                    depth: int | None = None,
                    progress: Callable[[str], None] | None = None) -> RooflineRun:
    """Predict (and with ``measure_step``, measure) one step of ``work`` on ``hardware``.

    With a measurement the step is a :class:`StepTiming`, timed in ``timing_runs`` rounds of
    ``budget_s / timing_runs`` each, one after another: six by default, the fewest whose
    smallest and largest hold the median with 95% probability (1 − 2/2⁶ = 96.9%,
    ``roofline.compare.median_interval``), so each measured figure has its interval.
    ``depth`` cuts the module names of the by-module rows to that many components (``None``:
    the innermost module).
    """
    if timing_runs < 1:
        raise InputError(f"timing runs must be at least 1, got {timing_runs}")
    if not budget_s >= 0 or budget_s == float("inf"):
        raise InputError(f"--budget must be a number of seconds, 0 or more, got {budget_s:g}")
    if not measure_step:
        run = trace_workload(work, progress=progress)
        traced = run.trace
        return _report(work, hardware, traced, predict(device_records(run), hardware,
                                                       tokens=work.tokens), None, None, depth,
                       run.pipeline)
    say = progress or (lambda _: None)
    timing = StepTiming(work, hardware, progress=progress)
    for index in range(timing_runs):
        say(f"timing the whole step and each op (profiler), round {index + 1} of "
            f"{timing_runs}")
        # the rounds follow one another: after the first, the step's caches are warm
        timing.round(budget_s / timing_runs, warmup=2 if index == 0 else 0)
    return timing.report(depth=depth)


def _report(work: Workload, hardware: Hardware, traced: Trace, prediction: RooflinePrediction,
            comparison: Comparison | None, warning: str | None,
            depth: int | None, pipeline: OrderTimeline | None = None) -> RooflineRun:
    cluster = cluster_step(work, prediction, hardware.peak_flop_per_s(prediction.mfu_peak_key),
                           pipeline=pipeline)
    return RooflineRun(**header_of(work), tokens=work.tokens,
                       uncovered=dict(traced.uncovered), prediction=prediction,
                       comparison=comparison, measurement_warning=warning,
                       hardware_unreliable=hardware.unreliable,
                       modules=module_times(prediction.by_module, depth),
                       ranks=work.layout.count, layout=work.layout.describe(),
                       cluster=cluster,
                       serving=serving_figures(prediction, work.batch, work.context)
                       if work.step.cached else None)
