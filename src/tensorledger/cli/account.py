"""``tensorledger account``: one workload, the whole ledger, one page."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, Quiet, emit, progress
from tensorledger.cli.workload import (
    Chip,
    Depth,
    LayoutOptions,
    MemoryBudget,
    WorkloadOptions,
    check_depth,
    memory_budget,
    shared_options,
)
from tensorledger.errors import InputError
from tensorledger.workload.layout import resolve_layout

__all__ = ["register"]


@shared_options
def account_command(
    *,
    hardware: Chip = "h100",
    count: Annotated[int | None, typer.Option("--count", "-n", help=(
        "Devices.  Alone: data parallel (DDP: each runs the step on its own batch, the "
        "gradients all-reduced on the chip's links); with layout options, their product "
        "(checked)."))] = None,
    tokens: Annotated[str | None, typer.Option("--tokens", help=(
        "Tokens of the whole run (15T, 300B, ...): its days, device-hours and cost."))] = None,
    usd_per_device_hour: Annotated[float | None, typer.Option(
        "--usd-per-device-hour", help="Price of one device for one hour, for the cost.")
    ] = None,
    options: WorkloadOptions,
    layout_options: LayoutOptions,
    budget: MemoryBudget = None,
    depth: Depth = 3,
    html_report: Annotated[str | None, typer.Option("--html", help=(
        "Write one self-contained HTML report (tables and interactive plots; opens offline)."
    ))] = None,
    per_op: Annotated[bool, typer.Option("--per-op", help=(
        "Include every op and every point of the memory timeline in --json."))] = False,
    chrome_trace: Annotated[str | None, typer.Option("--chrome-trace", help=(
        "Write the predicted per-op timeline as a Chrome/Perfetto trace (.json)."))] = None,
    memory_snapshot: Annotated[str | None, typer.Option("--memory-snapshot", help=(
        "Write the step's allocations as a torch.cuda.memory._dump_snapshot pickle (.pickle), "
        "for PyTorch's memory visualiser."))] = None,
    measure: Annotated[bool, typer.Option("--measure", help=(
        "Also run the step for real on this machine (--device cpu or cuda; else the CPU) and "
        "set it beside the prediction for this machine's probed profile (`tensorledger "
        "probe`); the step must fit in this machine's memory."))] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    quiet: Quiet = False,
) -> None:
    """The whole ledger of one workload from one trace: parameters, FLOPs against 6·N·D,
    memory and whether it fits, time by category, step time, tokens/s, MFU, and the run."""
    from tensorledger.hardware import LOCAL, get_hardware
    from tensorledger.units import parse_count

    check_depth(depth)
    chip = get_hardware(hardware)
    if count is not None and (isinstance(count, bool) or count < 1):
        raise InputError(f"--count must be a whole number >= 1, got {count}")
    budget_bytes = memory_budget(budget)
    laid_out = layout_options.resolve(count)
    devices = count or 1
    if laid_out.single and devices > 1 and options.device in ("auto", "fake"):
        # --count alone: data parallel, its all-reduce traced on a fake process group
        laid_out = resolve_layout(dp=devices)
    work = options.resolve(laid_out, chip)
    local = get_hardware(LOCAL) if measure else None  # no profile: refused before the work
    run_tokens = parse_count(tokens) if tokens is not None else None
    from tensorledger.report.files import check_output_path, write_atomic

    outputs = [(path, suffix) for path, suffix in ((html_report, ".html"), (chrome_trace, ".json"),
                                                   (memory_snapshot, ".pickle"))
               if path is not None]
    for path, suffix in outputs:  # refuse a bad path before the work, not after
        check_output_path(path, (suffix,))
    from tensorledger.ledger.account import account_run
    from tensorledger.report.account import account_view
    from tensorledger.report.exports import chrome_trace_json, memory_snapshot_pickle

    with progress(quiet, as_json) as say:
        ledger, traced = account_run(work, chip, count=devices, run_tokens=run_tokens,
                                     usd_per_device_hour=usd_per_device_hour, depth=depth,
                                     progress=say, measure_on=local,
                                     budget_bytes=budget_bytes)
    notes = []
    if html_report is not None:
        from tensorledger.report.html import ledger_report_html

        written = write_atomic(html_report, ledger_report_html(ledger))
        notes.append(f"HTML report written to {written}")
    if chrome_trace is not None:
        title = f"{ledger.model}: predicted {ledger.step} step on {ledger.hardware}"
        written = write_atomic(chrome_trace, chrome_trace_json(ledger.roofline, title))
        notes.append(f"Chrome/Perfetto trace written to {written} (open it in "
                     "ui.perfetto.dev or chrome://tracing)")
    if memory_snapshot is not None:
        written = write_atomic(memory_snapshot, memory_snapshot_pickle(
            traced.trace, traced.tags, ledger.step_time_s * 1e6))
        notes.append(f"memory snapshot written to {written} (open it in PyTorch's memory "
                     "visualiser, pytorch.org/memory_viz)")
    measured = ledger.measured
    shown = ledger if per_op else dataclasses.replace(
        ledger, roofline=dataclasses.replace(ledger.roofline, ops=()),
        memory=dataclasses.replace(ledger.memory, timeline=dataclasses.replace(
            ledger.memory.timeline, points=())),
        measured=None if measured is None else dataclasses.replace(
            measured, prediction=dataclasses.replace(measured.prediction, ops=())))
    emit("account", shown, as_json, *account_view(ledger), *notes)


def register(app: typer.Typer) -> None:
    app.command("account")(account_command)
