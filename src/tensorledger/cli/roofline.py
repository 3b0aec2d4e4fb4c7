"""``tensorledger roofline``: predicted time per op and per step, optionally set beside a
measurement of the same step on this machine, and a roofline plot."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.hardware import get_hardware
from tensorledger.report.plots import check_figure_path

__all__ = ["register"]


def roofline_command(
    model: Annotated[str, typer.Option("--model", "-m", help=(
        "A preset (tiny, gpt2, llama-3-8b, ...), a config.json, or file.py:make_model."))],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help=(
        "Catalog chip, a TOML file, or `local` (this machine, as probed)."))] = "h100",
    batch: Annotated[int, typer.Option(help="Sequences per step.")] = 8,
    seq: Annotated[int, typer.Option(help="Tokens per sequence.")] = 256,
    step: Annotated[str, typer.Option(help="forward, forward-backward or train.")
                    ] = "forward-backward",
    optimizer: Annotated[str, typer.Option(help="For --step train.")] = "adamw",
    dtype: Annotated[str, typer.Option(help="Parameter dtype: fp32, bf16, ...")] = "fp32",
    measure: Annotated[bool, typer.Option("--measure", help=(
        "Run the step for real on --device and show predicted against measured."))] = False,
    device: Annotated[str, typer.Option(help="Where --measure runs: cpu or cuda.")] = "cpu",
    budget: Annotated[float, typer.Option(help="Seconds of timed repeats with --measure.")
                      ] = 2.0,
    plot: Annotated[Path | None, typer.Option(help="Write a roofline plot (.png, .svg).")
                    ] = None,
    overlay: Annotated[str | None, typer.Option(help="Second chip drawn on the plot.")] = None,
    per_op: Annotated[bool, typer.Option("--per-op", help="Include every op in --json.")
                      ] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Roofline of one step: each op compute- or memory-bound, predicted time and MFU."""
    from tensorledger.report.roofline import comparison_table, plot_roofline, prediction_view
    from tensorledger.roofline.run import roofline_model

    chip = get_hardware(hardware)
    second = get_hardware(overlay) if overlay else None
    if plot is not None:
        check_figure_path(plot)  # refuse a bad path before the work, not after
    run = roofline_model(model, chip, batch=batch, seq=seq, step=step, optimizer=optimizer,
                         dtype=dtype, device=device, measure_step=measure, budget_s=budget)
    lines = [f"{run.model}, {run.step}, batch {run.batch} × seq {run.seq} ({run.tokens} tokens)"
             f", {run.dtype}, traced on {run.device}; hardware {chip.id}",
             *prediction_view(run.prediction)]
    if run.uncovered:
        lines.append("ops with no cost rule (counted as 0 FLOPs, 0 bytes): " + ", ".join(
            f"{op} ×{calls}" for op, calls in run.uncovered.items()))
    if run.comparison is not None:
        lines += comparison_table(run.comparison)
    if run.measurement_warning:
        lines.append(f"warning: {run.measurement_warning}")
    if plot is not None:
        written = plot_roofline(run.prediction, chip, plot, overlay=second)
        lines.append(f"roofline plot written to {written}")
    shown = run if per_op else dataclasses.replace(
        run, prediction=dataclasses.replace(run.prediction, ops=()))
    emit("roofline", shown, as_json, *lines)


def register(app: typer.Typer) -> None:
    app.command("roofline")(roofline_command)
