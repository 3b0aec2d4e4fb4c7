"""Terminal views of napkin answers: the working, then the answer in one sentence."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table

from tensorledger.napkin import (
    DevicesForDuration,
    DevicesNeeded,
    FlopBudget,
    LargestModel,
    LargestModelWithActivations,
    TensorMemory,
    TrainingTime,
    ZeroSummary,
)
from tensorledger.napkin.recipes import BytesPerParam
from tensorledger.report.terminal import format_value, steps_table
from tensorledger.units import format_bytes, format_count, format_duration, format_sci

__all__ = [
    "breakdown_table",
    "budget_view",
    "devices_for_duration_view",
    "devices_needed_view",
    "largest_model_view",
    "largest_model_with_activations_view",
    "tensor_view",
    "training_time_view",
    "zero_view",
]

View = list[RenderableType | str]


def training_time_view(result: TrainingTime) -> View:
    return [
        steps_table(result.steps, "Training time"),
        f"≈ {format_duration(result.time_s)} ({format_sci(result.flops)} FLOPs on {result.count} × "
        f"{result.hardware} at MFU {result.mfu:g}, dense {result.dtype} peak"
        f"{_active(result.active_params)})",
    ]


def _active(active: float | None) -> str:
    """A mixture of experts' count, named on the headline it moves."""
    return "" if active is None else f"; 6·N_active·D with N_active {format_sci(active)}"


def devices_for_duration_view(result: DevicesForDuration) -> View:
    return [
        steps_table(result.steps, "Devices for a deadline"),
        f"≈ {result.devices:,} × {result.hardware} finish {format_sci(result.flops)} FLOPs in "
        f"{format_value(result.time_days_with_devices, 'days')} at MFU {result.mfu:g} "
        f"({result.devices_exact:,.1f} exactly{_active(result.active_params)})",
    ]


def budget_view(result: FlopBudget) -> View:
    return [
        steps_table(result.steps, "FLOP budget"),
        f"≈ {format_sci(result.flops)} FLOPs from {result.count} × {result.hardware} "
        f"at MFU {result.mfu:g}",
    ]


def breakdown_table(breakdown: BytesPerParam) -> Table:
    table = Table(title=f"Bytes per parameter: {breakdown.precision} + {breakdown.optimizer}",
                  title_justify="left", header_style="bold")
    for column in ("params", "grads", "master", "optimizer state", "total"):
        table.add_column(column, justify="right")
    table.add_row(*(f"{v:g}" for v in (
        breakdown.params_bytes_per_param, breakdown.grads_bytes_per_param,
        breakdown.master_bytes_per_param, breakdown.optimizer_bytes_per_param,
        breakdown.total_bytes_per_param)))
    return table


def largest_model_view(result: LargestModel) -> View:
    return [
        breakdown_table(result.breakdown),
        steps_table(result.steps, "Largest model"),
        f"≈ {format_count(result.params)} parameters ({format_sci(result.params)}) fit on "
        f"{result.count} × {result.hardware}" + _fit_active(result.active_params),
        f"note: {result.caveat}",
    ]


def _fit_active(active: float | None) -> str:
    return "" if active is None else (
        f", of which a token runs ≈ {format_count(active)} (every expert's state is held)")


def largest_model_with_activations_view(result: LargestModelWithActivations) -> View:
    return [
        breakdown_table(result.breakdown),
        steps_table(result.steps, "Largest model, with activations"),
        f"≈ {format_count(result.params)} parameters ({format_sci(result.params)}) fit on "
        f"{result.count} × {result.hardware} beside the activations of {result.batch:,} × "
        f"{result.seq_len:,} tokens (checkpoint {result.checkpoint}); "
        f"{format_count(result.params_without_activations)} without activations"
        + _fit_active(result.active_params),
        f"note: a model of d_model = {result.aspect}·L ({result.n_layers:.1f} layers of "
        f"{result.d_model:,.0f}), {result.layer_params_per_d2}·L·d² parameters"
        + (f" ({result.experts} experts, top-{result.top_k})" if result.experts > 1 else "")
        + ", memory pooled over the devices (ZeRO-3 with the batch split over them); flash "
        "attention",
    ]


def devices_needed_view(result: DevicesNeeded) -> View:
    return [
        breakdown_table(result.breakdown),
        steps_table(result.steps, "Devices needed"),
        f"≥ {result.devices} × {result.hardware} for {format_count(result.params)} parameters",
        f"note: {result.caveat}",
    ]


def tensor_view(result: TensorMemory) -> View:
    shape = "×".join(str(d) for d in result.shape)
    return [
        f"{shape} {result.dtype}: {result.elements:,} elements × {result.bits_per_element} bits "
        f"= {result.bytes:,} bytes",
        *([] if result.bytes < 1000 else [" = ".join(dict.fromkeys(
            (f"  = {format_bytes(result.bytes, 'auto')}",
             *([format_bytes(result.bytes, "MiB")] if result.bytes >= 2**20 else []),
             format_bytes(result.bytes, "auto-binary"))))]),
    ]


_SHARDED = ("nothing (DDP)", "optimizer state", "+ gradients", "+ parameters (FSDP)")


def zero_view(result: ZeroSummary) -> View:
    table = Table(title=f"Per rank: {format_count(result.params)} parameters on "
                  f"{result.ranks:,} ranks, {result.precision} + {result.optimizer}",
                  title_justify="left", header_style="bold")
    for column in ("ZeRO", "sharded", "params", "grads", "master", "optimizer state",
                   "total", "sent per step"):
        table.add_column(column, justify="left" if column == "sharded" else "right")
    for row, comm in zip(result.stages, result.comm, strict=True):
        table.add_row(str(row.stage), _SHARDED[row.stage], *(format_bytes(v) for v in (
            row.params_bytes, row.grads_bytes, row.master_bytes, row.optimizer_bytes,
            row.total_bytes, comm.sent_bytes_per_rank)))
    return [
        breakdown_table(result.stages[0].breakdown),
        table,
        "sent per step: stage 0 all-reduces the gradients (2(N−1)/N of them); stages 1 and 2 "
        "reduce-scatter them and all-gather the parameters; stage 3 all-gathers the parameters "
        "twice (forward, backward) and reduce-scatters the gradients, each (N−1)/N",
        "not counted: activations, buffers, and the optimizer's per-tensor step counters",
    ]
