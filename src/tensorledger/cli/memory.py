"""``tensorledger memory``: the memory of one training step, measured and in closed form."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.report.plots import check_figure_path

__all__ = ["register"]


def memory_command(
    model: Annotated[str, typer.Option("--model", "-m", help="A preset or a config.json.")],
    batch: Annotated[int, typer.Option("--batch", "-b", help="Sequences per step.")] = 1,
    seq: Annotated[int, typer.Option("--seq", "-s", help="Tokens per sequence.")] = 1024,
    optimizer: Annotated[str, typer.Option("--optimizer", help="sgd, adamw, lion, ...")] = "adamw",
    precision: Annotated[str, typer.Option(
        "--precision", help="fp32, bf16, mixed-bf16, bf16-master, bf16-fp32-states.")
    ] = "mixed-bf16",
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-H", help="Say whether the step fits on this device.")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="Number of devices.")] = 1,
    checkpoint: Annotated[bool, typer.Option(
        "--checkpoint", help="Checkpoint every block, and explain what that saves.")] = False,
    device: Annotated[str, typer.Option(
        "--device", help=("fake (default), meta, cpu, or cuda (also measures "
                             "torch.cuda.max_memory_allocated): where the step runs."))] = "fake",
    plot: Annotated[str | None, typer.Option(
        "--plot", help="Write memory over the step's ops, stacked by category (PNG/SVG).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Trace one training step and account its memory: parameters, gradients, optimizer
    state, saved activations, the peak, and whether it fits."""
    from tensorledger.errors import InputError
    from tensorledger.memory.ledger import memory_ledger
    from tensorledger.models.spec import load_model_spec
    from tensorledger.report.memory import memory_view, write_memory_plot

    spec = load_model_spec(model)
    if spec.config is None:
        raise InputError(f"--model {model!r}: memory needs a preset or a config.json (a "
                         "factory's module has no tokens and loss to step)")
    for name, value in (("batch", batch), ("seq", seq)):
        if value < 1:
            raise InputError(f"--{name} must be at least 1, got {value}")
    if plot is not None:
        check_figure_path(plot)  # refuse a bad path before the work, not after
    ledger = memory_ledger(spec.config, batch, seq, optimizer, precision, device, checkpoint,
                           hardware, count)
    views = memory_view(ledger)
    if plot is not None:
        views.append(f"plot written to {write_memory_plot(ledger, plot)}")
    emit("memory", ledger, as_json, *views)


def register(app: typer.Typer) -> None:
    app.command("memory")(memory_command)
