"""``tensorledger memory``: the memory of one training step, traced and in closed form."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, Quiet, emit_with_plot, progress
from tensorledger.cli.workload import (
    LayoutOptions,
    MemoryBudget,
    WorkloadOptions,
    memory_budget,
    shared_options,
)
from tensorledger.report.plots import check_figure_path

__all__ = ["register"]


@shared_options
def memory_command(
    *,
    options: WorkloadOptions,
    layout_options: LayoutOptions,
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-H", help=(
            "Say whether the step fits on this device, traced as its program (attention "
            "kernels, optimizer kernels); an H100's when none is named."))] = None,
    budget: MemoryBudget = None,
    count: Annotated[int | None, typer.Option("--count", "-n", help=(
        "Number of devices: alone, the traced step's state divided over them in closed form "
        "(ZeRO-3); with a layout, its product (checked)."))] = None,
    plot: Annotated[str | None, typer.Option(
        "--plot", help="Write memory over the step's ops, stacked by category (PNG/SVG).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    quiet: Quiet = False,
) -> None:
    """Trace the steady-state training step and account its memory: parameters, gradients,
    optimizer state, saved activations, the peak (first step's beside it), and whether it
    fits."""
    from tensorledger.errors import InputError
    from tensorledger.hardware import get_hardware

    if count is not None and (isinstance(count, bool) or count < 1):
        raise InputError(f"--count must be a whole number >= 1, got {count}")
    budget_bytes = memory_budget(budget)
    laid_out = layout_options.resolve(count)
    chip = get_hardware(hardware) if hardware is not None else None
    work = options.resolve(laid_out, chip)
    count = count if count is not None and laid_out.single else 1
    if plot is not None:
        check_figure_path(plot)  # refuse a bad path before the work, not after
    from tensorledger.ledger.memory import memory_report
    from tensorledger.report.memory import memory_view, write_memory_plot

    with progress(quiet, as_json) as say:
        ledger = memory_report(work, chip, count, progress=say, budget_bytes=budget_bytes)
    emit_with_plot("memory", ledger, as_json, memory_view(ledger), plot, write_memory_plot)


def register(app: typer.Typer) -> None:
    app.command("memory")(memory_command)
