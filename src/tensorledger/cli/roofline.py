"""``tensorledger roofline``: predicted time per op and per step, optionally set beside a
measurement of the same step on this machine, and a roofline plot."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, Quiet, emit, progress
from tensorledger.cli.workload import (
    Chip,
    Depth,
    LayoutOptions,
    WorkloadOptions,
    check_depth,
    shared_options,
)
from tensorledger.hardware import get_hardware
from tensorledger.report.plots import check_figure_path
from tensorledger.workload.spec import DEFAULTS

__all__ = ["register"]


@shared_options
def roofline_command(
    *,
    hardware: Chip = "h100",
    options: WorkloadOptions,
    layout_options: LayoutOptions,
    depth: Depth = None,
    measure: Annotated[bool, typer.Option("--measure", help=(
        "Run the step for real on --device (cpu or cuda) and show predicted against "
        "measured."))] = False,
    budget: Annotated[float, typer.Option(help="Seconds of timed repeats with --measure.")
                      ] = 2.0,
    plot: Annotated[Path | None, typer.Option(help="Write a roofline plot (.png, .svg).")
                    ] = None,
    overlay: Annotated[str | None, typer.Option(help="Second chip drawn on the plot.")] = None,
    per_op: Annotated[bool, typer.Option("--per-op", help="Include every op in --json.")
                      ] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    quiet: Quiet = False,
) -> None:
    """Roofline of one step: each op compute- or memory-bound, predicted time and MFU."""
    check_depth(depth)
    laid_out = layout_options.resolve()
    if measure and options.device == DEFAULTS.device and laid_out.single:
        # a measurement runs on real tensors: here, unless told otherwise
        options = dataclasses.replace(options, device="cpu")
    chip = get_hardware(hardware)
    work = options.resolve(laid_out, chip)
    second = get_hardware(overlay) if overlay else None
    if plot is not None:
        check_figure_path(plot)  # refuse a bad path before the work, not after
    from tensorledger.ledger.roofline import roofline_report
    from tensorledger.report.roofline import plot_roofline, roofline_run_view

    with progress(quiet, as_json) as say:
        run = roofline_report(work, chip, measure_step=measure, budget_s=budget,
                              depth=depth, progress=say)
    lines = roofline_run_view(run)
    if plot is not None:
        written = plot_roofline(run.prediction, chip, plot, overlay=second)
        lines.append(f"roofline plot written to {written}")
    shown = run if per_op else dataclasses.replace(
        run, prediction=dataclasses.replace(run.prediction, ops=()))
    emit("roofline", shown, as_json, *lines)


def register(app: typer.Typer) -> None:
    app.command("roofline")(roofline_command)
