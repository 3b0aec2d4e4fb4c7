"""The main job: one workload, one trace, the whole ledger.

:func:`account_workload` traces the workload's first and steady-state steps once and hands the
same trace to every analysis: the FLOPs by phase against 6·N·D, the memory ledger (peak,
categories, fit), the roofline prediction (time by category, step time, tokens/s, MFU), and the
cost of a whole run of ``run_tokens`` tokens on ``count`` devices.  Data parallel: every device
runs the step on its own batch, so the cluster takes ``count`` steps' tokens per step time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from tensorledger.display import view
from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.ledger.cluster import ClusterStep, cluster_step
from tensorledger.ledger.header import WorkloadHeader, header_of
from tensorledger.ledger.memory import memory_of
from tensorledger.ledger.roofline import RooflineRun, roofline_report
from tensorledger.ledger.trace import step_summary
from tensorledger.memory.ledger import MemoryLedger
from tensorledger.plan.estimate import LayoutEstimate
from tensorledger.roofline.decode import ServingFigures, serving_figures
from tensorledger.roofline.model import RooflinePrediction, predict
from tensorledger.summary import show_bytes, show_flops, show_time, summary
from tensorledger.trace.aggregate import TraceSummary
from tensorledger.workload import StepTrace, Workload, device_records, trace_workload

__all__ = ["Ledger", "RunCost", "account_run", "account_workload"]

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class RunCost:
    """A whole training run: ``tokens`` tokens at the expected step time on ``count`` devices
    (and, beside it, at the roofline bound)."""

    tokens: float
    steps: float  # optimizer steps of the whole cluster: tokens / (count · tokens per step)
    time_s: float  # at the expected step time
    days: float
    device_hours: float
    usd_per_device_hour: float | None
    cost_usd: float | None
    bound_time_s: float  # at the roofline bound: no run is shorter


@dataclass(frozen=True)
class Ledger(WorkloadHeader):
    """Everything one workload costs, from one trace."""

    tokens_per_step: int  # per device
    hardware: str
    count: int  # devices of the cluster
    params: int  # held on this rank: its shards under FSDP/TP, its stage's under PP
    params_by_part: dict[str, int]  # the model this rank runs (its stage), whole tensors
    trace: TraceSummary  # FLOPs by category, phase, module; 6·N·D; uncovered ops
    memory: MemoryLedger
    roofline: RooflinePrediction
    step_time_s: float  # expected, per device (all devices step together); see roofline.basis
    cluster_tokens_per_s: float  # serial: communication after compute, the bubble included
    mfu: float  # the cluster's model FLOPs utilisation, against the dense peak its matmuls
    # ran at (mfu_peak_key); a recomputed forward is not a model FLOP
    peak_flop_per_s: float  # that dense peak
    memory_bandwidth_bytes_per_s: float
    run: RunCost | None  # with run tokens
    cluster_bound_tokens_per_s: float = 0.0  # at the roofline bound
    # with a measurement: the same step run for real on this machine, predicted for its
    # probed profile and measured beside it
    measured: RooflineRun | None = None
    # the cluster's step as the traced rank sets it: its layout, bubble, exposed communication
    cluster: ClusterStep | None = None
    # when the step does not fit: the planner's fastest layout of the same devices that does
    # (its closed form), or why none does; None when it fits or the model has no closed form
    fits_with: LayoutEstimate | None = None
    fits_nowhere: str | None = None
    serving: ServingFigures | None = None  # prefill and decode: time per token, its bound
    hfu: float = 0.0  # the cluster's hardware FLOPs utilisation: the recomputed forward too

    @property
    def part_params(self) -> int:
        """Parameters of the model this rank runs (its stage under PP), whole tensors: the
        sum of ``params_by_part``, what each part's share is of."""
        return sum(self.params_by_part.values())

    @property
    def part_shares(self) -> dict[str, float]:
        """Each part's share of :attr:`part_params` (the shares sum to 1, sharded or not)."""
        total = self.part_params
        return {part: n / total if total else 0.0 for part, n in self.params_by_part.items()}

    def _repr_html_(self) -> str:  # Jupyter: the presentation layer renders it
        return str(view("html", self))

    def __rich__(self) -> object:  # rich: the terminal view, from the presentation layer
        return view("rich", self)

    def __repr__(self) -> str:
        return summary("Ledger", f"{self.model} {self.step}",
                       f"{show_flops(self.trace.flops)} per step",
                       f"peak {show_bytes(self.memory.peak_bytes)}",
                       f"{show_time(self.step_time_s)} per step expected on {self.count} × "
                       f"{self.hardware}", f"MFU {self.mfu:.3f}",
                       f"bound {show_time(self.roofline.ideal_time_s)}")


def account_workload(work: Workload, hardware: Hardware, *, count: int = 1,
                     run_tokens: float | None = None,
                     usd_per_device_hour: float | None = None, depth: int | None = 3,
                     progress: Callable[[str], None] | None = None,
                     measure_on: Hardware | None = None) -> Ledger:
    """Trace ``work`` once and account it on ``count`` devices of ``hardware``.

    >>> from tensorledger.hardware import get_hardware
    >>> from tensorledger.workload import resolve_workload
    >>> ledger = account_workload(resolve_workload("tiny", batch=2, seq=16), get_hardware("h100"))
    >>> ledger.trace.flops == ledger.roofline.flops
    True
    """
    return account_run(work, hardware, count=count, run_tokens=run_tokens,
                       usd_per_device_hour=usd_per_device_hour, depth=depth,
                       progress=progress, measure_on=measure_on)[0]


def account_run(work: Workload, hardware: Hardware, *, count: int = 1,
                run_tokens: float | None = None, usd_per_device_hour: float | None = None,
                depth: int | None = 3, progress: Callable[[str], None] | None = None,
                measure_on: Hardware | None = None, budget_bytes: float | None = None
                ) -> tuple[Ledger, StepTrace]:
    """:func:`account_workload`, and the traced step it was computed from (for exports).

    ``measure_on``: a probed profile of this machine; the step is then also run for real here
    (on the workload's device when it is cpu or cuda, else the CPU), predicted for that
    profile and measured beside it (``Ledger.measured``).  It must fit in this machine's
    memory; a refusal says so.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"--count must be a whole number >= 1, got {count!r}")
    if not work.layout.single and count not in (1, work.layout.count):
        raise InputError(f"--count {count} is not the layout's {work.layout.count} devices "
                         f"({work.layout.describe()}); drop --count or make them agree")
    count = work.layout.count if not work.layout.single else count
    for name, value in (("--tokens", run_tokens), ("--usd-per-device-hour",
                                                   usd_per_device_hour)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"{name} must be a positive number, got {value!r}")
    say = progress or (lambda _: None)
    run = trace_workload(work, first_step=True, progress=progress)
    say("accounting memory and time")
    summary = step_summary(run, depth)
    memory = memory_of(run, hardware, count, budget_bytes)
    # with --offload params the optimizer step is the host's, not the device's
    prediction = predict(device_records(run), hardware, tokens=work.tokens)
    peak = hardware.peak_flop_per_s(prediction.mfu_peak_key)
    cluster = cluster_step(work, prediction, peak, count=count, pipeline=run.pipeline)
    step_s = prediction.time_s
    cluster_tokens_per_s = cluster.tokens_per_s[0]
    tokens_per_step = cluster.data_parallel * work.tokens
    bound_step_s = prediction.ideal_time_s * cluster.stretch
    cost = None
    if run_tokens is not None and cluster_tokens_per_s > 0:
        time_s = run_tokens / cluster_tokens_per_s
        hours = time_s / 3600.0 * count
        cost = RunCost(tokens=run_tokens, steps=run_tokens / tokens_per_step,
                       time_s=time_s, days=time_s / SECONDS_PER_DAY, device_hours=hours,
                       usd_per_device_hour=usd_per_device_hour,
                       cost_usd=hours * usd_per_device_hour if usd_per_device_hour else None,
                       bound_time_s=run_tokens / tokens_per_step * bound_step_s)
    ledger = Ledger(**header_of(work), tokens_per_step=work.tokens,
                    hardware=hardware.id, count=count, params=run.params,
                    params_by_part=dict(run.param_parts), trace=summary, memory=memory,
                    roofline=prediction, step_time_s=step_s,
                    cluster_tokens_per_s=cluster_tokens_per_s,
                    cluster_bound_tokens_per_s=tokens_per_step / bound_step_s
                    if bound_step_s > 0 else 0.0, mfu=cluster.mfu, hfu=cluster.hfu,
                    peak_flop_per_s=peak,
                    memory_bandwidth_bytes_per_s=hardware.memory_bandwidth_bytes_per_s,
                    run=cost, cluster=cluster,
                    serving=serving_figures(prediction, work.batch, work.context)
                    if work.step.cached else None)
    if memory.fit is not None and not memory.fit.fits_replicated and \
            work.source.config is not None:
        say("planning a layout that fits")
        fits_with, fits_nowhere = _what_fits(work, hardware, count, budget_bytes)
        ledger = dataclasses.replace(ledger, fits_with=fits_with, fits_nowhere=fits_nowhere)
    if measure_on is not None:
        say("measuring the step on this machine")
        local = work if work.device in ("cpu", "cuda") else work.on_device("cpu")
        ledger = dataclasses.replace(ledger, measured=roofline_report(
            local, measure_on, measure_step=True, progress=progress))
    return ledger, run


def _what_fits(work: Workload, hardware: Hardware, count: int, budget_bytes: float | None
               ) -> tuple[LayoutEstimate | None, str | None]:
    """The planner's fastest layout of ``count`` devices that fits ``work``'s global batch
    (its data-parallel ranks' sequences), or why none does."""
    from tensorledger.ledger.schedules import ActionListPricer
    from tensorledger.plan import plan_layouts

    config = work.source.config
    assert config is not None
    sequences = work.batch * (work.layout.data_parallel if not work.layout.single else count)
    try:
        plan = plan_layouts(config, hardware, count, seq_len=work.seq,
                            global_batch_seqs=sequences, precision=work.precision.name,
                            optimizer=work.optimizer.name, budget_bytes=budget_bytes, top=1,
                            schedules=ActionListPricer())
    except InputError as error:  # none fits (NoLayoutError), or the planner cannot plan it
        return None, str(error)
    return plan.best, None
