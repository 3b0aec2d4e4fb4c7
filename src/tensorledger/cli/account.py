"""``tensorledger account``: one workload, the whole ledger, one page."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.cli.workload import (
    Batch,
    Checkpoint,
    Device,
    Model,
    Optimizer,
    Precision,
    Seq,
    Step,
    workload,
)
from tensorledger.workload.spec import DEFAULTS

__all__ = ["register"]


def account_command(
    model: Model,
    hardware: Annotated[str, typer.Option("--hardware", "-H", help=(
        "Catalog chip, a TOML file, or `local` (this machine, as probed)."))] = "h100",
    count: Annotated[int, typer.Option("--count", "-n", help=(
        "Devices, data parallel: each runs the step on its own batch."))] = 1,
    tokens: Annotated[str | None, typer.Option("--tokens", help=(
        "Tokens of the whole run (15T, 300B, ...): its days, device-hours and cost."))] = None,
    usd_per_device_hour: Annotated[float | None, typer.Option(
        "--usd-per-device-hour", help="Price of one device for one hour, for the cost.")
    ] = None,
    batch: Batch = DEFAULTS.batch,
    seq: Seq = DEFAULTS.seq,
    step: Step = DEFAULTS.step,
    precision: Precision = DEFAULTS.precision,
    optimizer: Optimizer = DEFAULTS.optimizer,
    device: Device = DEFAULTS.device,
    checkpoint: Checkpoint = DEFAULTS.checkpoint,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """The whole ledger of one workload from one trace: parameters, FLOPs against 6·N·D,
    memory and whether it fits, time by category, step time, tokens/s, MFU, and the run."""
    from tensorledger.hardware import get_hardware
    from tensorledger.units import parse_count

    work = workload(model, batch, seq, step, precision, optimizer, device, checkpoint)
    chip = get_hardware(hardware)
    run_tokens = parse_count(tokens) if tokens is not None else None
    from tensorledger.ledger.account import account_workload
    from tensorledger.report.account import account_view

    ledger = account_workload(work, chip, count=count, run_tokens=run_tokens,
                              usd_per_device_hour=usd_per_device_hour)
    emit("account", ledger, as_json, *account_view(ledger))


def register(app: typer.Typer) -> None:
    app.command("account")(account_command)
