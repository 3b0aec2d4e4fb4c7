"""The ``trace`` pipeline: a workload → its traced step → the summary the command shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tensorledger.display import view
from tensorledger.ledger.header import WorkloadHeader, header_of
from tensorledger.summary import show_count, summary
from tensorledger.trace.aggregate import TraceSummary, summarize
from tensorledger.workload import StepTrace, Workload, trace_workload

__all__ = ["TraceReport", "program_of", "step_summary", "trace_report"]


def step_summary(run: StepTrace, depth: int | None) -> TraceSummary:
    """The summary of a traced step; 6·N·D beside it when the step has a backward.  One rank
    of a data-parallel layout runs the whole model on its batch: N is the whole model's; a
    tensor-parallel rank runs a share of every matmul, a pipeline rank a share of the layers,
    which 6·N·D does not describe."""
    backward = (run.work.step.backward and run.work.layout.tp == 1
                and run.work.layout.pp == 1)
    params = run.model_params or run.params
    return summarize(run.trace, depth, params=params if backward else None,
                     tokens=run.tokens if backward else None,
                     mesh_dims=run.work.layout.group_names, program=program_of(run.work),
                     assumptions=run.assumptions, active_params=run.active_params)


def program_of(work: Workload) -> str:
    """One line: whose program the trace is, the optimizer's kernel, and any caveat."""
    optimizer = (f"; {work.optimizer.name} as {work.optimizer_kernel} kernels"
                 if work.step.optimizer else "")
    routed = ("" if work.target.native else
              f": attention forced to {work.target.attention} (--attention)"
              if work.target.attention != "auto" else
              ": attention as PyTorch dispatches it there")
    caveat = f" ({work.target.caveat})" if work.target.caveat else ""
    return f"program traced: {work.target.describe()}{routed}{optimizer}{caveat}"


@dataclass(frozen=True)
class TraceReport(WorkloadHeader):
    """What ``tensorledger trace`` prints: the run and its totals (not every op record)."""

    params: int  # the whole model's
    tokens: int
    summary: TraceSummary
    ranks: int = 1  # the step is one rank of a layout of this many devices
    layout: str = ""
    params_per_rank: int = 0  # the parameters that rank holds
    context: int | None = None  # decode: the tokens each sequence's KV cache held

    def __repr__(self) -> str:
        return summary("TraceReport", f"{self.model} {self.step}",
                       f"batch {self.batch} × seq {self.seq}", show_count(self.params, "params"),
                       repr(self.summary))

    def __rich__(self) -> object:  # rich: the command's tables, from the presentation layer
        return view("rich", self)

    def _repr_html_(self) -> str:  # Jupyter: the same tables as HTML, from presentation
        return str(view("html", self))

    @classmethod
    def of(cls, run: StepTrace, depth: int | None) -> TraceReport:
        work = run.work
        summary = step_summary(run, depth)
        return cls(**header_of(work), params=run.model_params or run.params,
                   tokens=run.tokens, summary=summary, ranks=work.layout.count,
                   layout=work.layout.describe(),
                   params_per_rank=run.params, context=work.context)


def trace_report(work: Workload, depth: int | None = 4,
                 progress: Callable[[str], None] | None = None) -> TraceReport:
    """Trace ``work``'s step and summarise it to ``depth`` levels of modules; ``progress`` is
    told each stage as it starts."""
    return TraceReport.of(trace_workload(work, progress=progress), depth)
