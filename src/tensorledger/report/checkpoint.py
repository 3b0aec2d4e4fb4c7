"""Terminal view and plot of a checkpointing study (``tensorledger checkpoint``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from tensorledger.report.plots import new_figure, save_figure
from tensorledger.units import format_bytes, format_duration, format_flops

__all__ = ["checkpoint_figure", "checkpoint_view", "write_checkpoint_plot"]

View = list[RenderableType | str]

_ACTIVATIONS = {"relu": "ReLU", "gelu": "GELU"}


def _b(value: float | None) -> str:
    return "—" if value is None else format_bytes(value, "auto")


def _error(value: float | None) -> str:
    return "—" if value is None else f"{value:+.2%}"


def _blocks(row: Any, n_blocks: int) -> str:
    if not row.segments:
        return f"0/{n_blocks}"
    kinds = {mode for _, _, mode in row.segments}
    mode = f" {kinds.pop()}" if len(kinds) == 1 else " mixed"
    return f"{row.checkpointed_blocks}/{n_blocks} ({row.n_segments}{mode})"


def checkpoint_view(study: Any) -> View:
    """One row per policy: what it checkpoints, keeps, peaks at and recomputes; the fit under
    the budget and, verified, the traced figures with their errors."""
    table = Table(title=f"Activation checkpointing, predicted from one trace: {study.model}; "
                        f"recompute time on {study.hardware}", title_justify="left",
                  header_style="bold")
    columns = ["policy", "blocks (segments)", "saved", "peak", "recompute FLOPs", "recompute time"]
    if study.budget_bytes is not None:
        columns.append("fits")
    for number, name in enumerate(columns):
        table.add_column(name, justify="left" if number < 2 else "right")
    for row in study.rows:
        cells = [row.policy, _blocks(row, study.n_blocks), _b(row.saved_bytes),
                 _b(row.peak_bytes), format_flops(row.recompute_flops),
                 format_duration(row.recompute_time_s)]
        if study.budget_bytes is not None:
            cells.append("yes" if row.fits else "no")
        table.add_row(*cells)
    view: View = [table]
    for row in study.rows:
        if row.policy == "sqrt(L) segments" and not row.segments and study.n_blocks > 1:
            view.append(f"sqrt(L) segments: ⌈√{study.n_blocks}⌉ = {study.sqrt_segment_blocks} "
                        "blocks a segment "
                        "leaves no segment but the last, which checkpoint_sequential does not "
                        "recompute (its backward starts as soon as its forward ends): the "
                        "same as none here")
    if study.budget_bytes is not None:
        if study.no_fit is not None:
            view.append(f"budget {_b(study.budget_bytes)}: {study.no_fit}")
        else:
            best = study.optimal
            view.append(f"budget {_b(study.budget_bytes)}: the fastest policy that fits "
                        f"recomputes {format_duration(best.recompute_time_s)}, segments "
                        + ", ".join(f"[{a}, {b}){' selective' if m == 'selective' else ''}"
                                    for a, b, m in best.segments) if best.segments else
                        f"budget {_b(study.budget_bytes)}: no checkpointing is needed")
    if study.verified:
        traced = Table(title="Traced with each policy applied (error: traced / predicted − 1)",
                       title_justify="left", header_style="bold")
        for number, name in enumerate(["policy", "saved", "error", "peak", "error",
                                       "recompute FLOPs", "error"]):
            traced.add_column(name, justify="left" if number < 1 else "right")
        for row in study.rows:
            traced.add_row(row.policy, _b(row.traced_saved_bytes), _error(row.saved_error),
                           _b(row.traced_peak_bytes), _error(row.peak_error),
                           format_flops(row.traced_recompute_flops or 0),
                           _error(row.recompute_flops_error))
        view += [traced, "selective's predicted peak is an upper bound (its cached outputs are "
                 "counted beside the recomputed insides); the traced bytes include the loss "
                 "and its gradient seed"]
    if study.deep is not None:
        deep = study.deep
        name = _ACTIVATIONS.get(deep.activation, deep.activation)
        view.append(f"checkpointing each block keeps only the block's input. Without it, with "
                    f"{name} {deep.explanation}; checkpointed, "
                    f"{deep.n_layers} tensors of B·D ({deep.kept_tensors} → {deep.n_layers}): "
                    "the napkin count, L·B·D, is what checkpointing leaves")
    return view


def checkpoint_figure(study: Any) -> Any:
    """Peak memory against recompute time, one labelled point per policy, the budget as a
    horizontal line."""
    figure, axes = new_figure(8, 5)
    peaks = [r.peak_bytes for r in study.rows] + (
        [study.budget_bytes] if study.budget_bytes is not None else [])
    unit, scale = next((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10),
                                           ("B", 1)) if max(peaks) >= s or s == 1)
    times = [r.recompute_time_s for r in study.rows]
    t_unit, t_scale = next((u, s) for u, s in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6),
                                               ("ns", 1e-9)) if max(times) >= s or s == 1e-9)
    seen: dict[tuple[float, float], int] = {}
    for number, row in enumerate(study.rows):
        x, y = row.recompute_time_s / t_scale, row.peak_bytes / scale
        colour = f"C{number}"
        # policies with the same figures (sqrt(L) of two blocks is none): each later point
        # drawn smaller inside the earlier one, its label below, so none is hidden
        place = (round(x, 9), round(y, 9))
        stacked = seen.get(place, 0)
        seen[place] = stacked + 1
        axes.plot([x], [y], marker="o", linestyle="", color=colour,
                  markersize=max(10 - 4 * stacked, 3), label=row.policy, zorder=3 + stacked)
        axes.annotate(row.policy, (x, y), xytext=(8, 6 - 12 * stacked),
                      textcoords="offset points", fontsize=8, color=colour, va="center",
                      bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8,
                            "edgecolor": "none"}, zorder=6)
    if study.budget_bytes is not None:
        axes.axhline(study.budget_bytes / scale, color="0.3", linestyle="--", linewidth=1,
                     label=f"budget {format_bytes(study.budget_bytes, 'auto-binary')}")
    top = max(peaks) / scale
    axes.set_ylim(0, top * 1.15 or 1.0)
    right = max(times) / t_scale
    axes.set_xlim(-0.05 * (right or 1.0), (right or 1.0) * 1.35)
    axes.set_xlabel(f"recompute time per step ({t_unit}, {study.hardware} roofline)")
    axes.set_ylabel(f"predicted peak memory ({unit})")
    axes.set_title(f"Checkpointing policies: {study.model}", fontsize=9)
    axes.legend(loc="lower left", fontsize="small")
    return figure


def write_checkpoint_plot(study: Any, path: str | Path) -> Path:
    """Write :func:`checkpoint_figure` to ``path`` (.png, .svg or .pdf), whole or not at all."""
    return save_figure(checkpoint_figure(study), path)
