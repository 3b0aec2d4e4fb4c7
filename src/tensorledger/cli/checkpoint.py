"""``tensorledger checkpoint``: the activation-checkpointing policies of a step, predicted from
one trace without checkpointing (and with ``--verify`` traced with each applied)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, Quiet, emit_with_plot, integer_parser, progress
from tensorledger.cli.workload import WorkloadOptions, shared_options
from tensorledger.errors import InputError
from tensorledger.report.plots import check_figure_path

__all__ = ["parse_deep", "register"]

#: The largest deep network traced: a few seconds on meta tensors.
MAX_DEEP_LAYERS = 256
MAX_DEEP_SIZE = 2**20


def parse_deep(text: str) -> tuple[int, int, int, str]:
    """``D,L,B[,ACT]`` → (d_model, n_layers, batch, activation).

    >>> parse_deep("64,16,512,gelu")
    (64, 16, 512, 'gelu')
    """
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4) or not all(p.isascii() and p.isdigit() for p in parts[:3]):
        raise InputError(f"--deep takes D,L,B[,ACT] (width, blocks, batch, relu or gelu) such "
                         f"as 64,16,512,gelu; got {text[:40]!r}")
    d_model, n_layers, batch = (int(p) for p in parts[:3])
    activation = parts[3].lower() if len(parts) == 4 else "gelu"
    if not (1 <= d_model <= MAX_DEEP_SIZE and 1 <= n_layers <= MAX_DEEP_LAYERS
            and 1 <= batch <= MAX_DEEP_SIZE):
        raise InputError(f"--deep {text[:40]!r}: D and B must be 1 to {MAX_DEEP_SIZE:,} and L "
                         f"1 to {MAX_DEEP_LAYERS}")
    if activation not in ("relu", "gelu"):
        raise InputError(f"--deep activation {parts[3][:20]!r} unknown; known: relu, gelu")
    return d_model, n_layers, batch, activation


@shared_options(leave_out=("checkpoint",))
def checkpoint_command(
    *,
    model: Annotated[str | None, typer.Option("--model", "-m", help=(
        "A reference model, built by tensorledger: a preset (tiny, gpt2, llama-3-8b, ...); "
        "its .blocks are checkpointed. Or give --deep."))] = None,
    deep: Annotated[str | None, typer.Option("--deep", help=(
        "The lecture's deep network instead of --model: D,L,B[,ACT] (width, blocks, batch, "
        "relu or gelu; default gelu), fp32 on meta tensors, e.g. 64,16,512,gelu."))] = None,
    options: WorkloadOptions,
    hardware: Annotated[str, typer.Option("--hardware", "-H", help=(
        "The chip whose roofline prices the recomputed ops."))] = "h100",
    every: Annotated[int, typer.Option("--every", parser=integer_parser(1, MAX_DEEP_LAYERS * 4),
                                       help="k of the every-k-th-block policy.")] = 2,
    budget: Annotated[str | None, typer.Option("--budget", help=(
        "A memory budget (bytes, or 80GB, 2MiB, ...): adds the fastest policy whose predicted "
        "peak fits it and marks which policies fit."))] = None,
    verify: Annotated[bool, typer.Option("--verify", help=(
        "Trace the step with each policy applied (torch.utils.checkpoint; fake tensors for a "
        "model) and show the traced figures beside the prediction, with the errors."))] = False,
    plot: Annotated[str | None, typer.Option("--plot", help=(
        "Write peak memory against recompute time, one point per policy (PNG/SVG/PDF)."))
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
    quiet: Quiet = False,
) -> None:
    """Activation-checkpointing policies (none, every block, every k-th block, sqrt(L)
    segments, selective, and the budget's optimum): bytes kept for backward, peak, and the
    FLOPs and roofline time recomputed, predicted from one trace of the step."""
    from tensorledger.hardware import get_hardware
    from tensorledger.units import parse_bytes

    if (model is None) == (deep is None):
        raise InputError("give a reference model with --model (e.g. --model tiny) or the deep "
                         "network with --deep D,L,B[,ACT], one of them")
    chip = get_hardware(hardware)
    budget_bytes = None
    if budget is not None:
        try:
            value = parse_bytes(budget)
        except InputError as error:
            raise InputError(f"--budget: {error}") from None
        if not value >= 0:
            raise InputError(f"--budget must be 0 bytes or more, got {budget[:40]!r}")
        budget_bytes = int(value)
    if plot is not None:
        check_figure_path(plot)  # refuse a bad path before the work, not after
    from tensorledger.ledger.checkpointing import deep_network_study, workload_study
    from tensorledger.report.checkpoint import checkpoint_view, write_checkpoint_plot

    with progress(quiet, as_json) as say:
        if deep is not None:
            d_model, n_layers, deep_batch, activation = parse_deep(deep)
            study = deep_network_study(d_model, n_layers, deep_batch, activation, chip, every,
                                       budget_bytes, verify, progress=say)
        else:
            assert model is not None
            # a checkpointed step is traced on fake tensors: torch's checkpoint checks the
            # recomputed tensors' metadata, which meta tensors lack
            key = options.device.strip().lower()
            if verify and key == "meta":
                raise InputError("--verify traces checkpointed steps on fake or real tensors "
                                 "(torch's checkpoint checks recomputed metadata, which meta "
                                 "tensors lack); use --device fake or auto")
            chosen = "fake" if verify and key == "auto" else options.device
            work = dataclasses.replace(options, device=chosen, checkpoint=False).resolve(
                chip=chip)
            study = workload_study(work, chip, every, budget_bytes, verify, progress=say)
    emit_with_plot("checkpoint", study, as_json, checkpoint_view(study), plot,
                   write_checkpoint_plot)


def register(app: typer.Typer) -> None:
    app.command("checkpoint")(checkpoint_command)
