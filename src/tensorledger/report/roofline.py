"""Roofline tables and the roofline plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from rich.console import RenderableType
from rich.table import Table

from tensorledger.hardware import Hardware
from tensorledger.report.plots import new_figure, save_figure
from tensorledger.roofline import RooflinePrediction, TimeTotal, ceiling
from tensorledger.roofline.compare import Comparison
from tensorledger.roofline.modules import ModuleTime
from tensorledger.units import format_bytes, format_duration, format_flop_rate, format_sci

__all__ = ["comparison_table", "plot_roofline", "prediction_view", "totals_table"]

View = list[RenderableType | str]

CATEGORY_COLOURS = {"matmul": "tab:blue", "attention": "tab:purple", "elementwise": "tab:orange",
                    "reduction": "tab:green", "normalization": "tab:red",
                    "embedding": "tab:brown", "copy": "tab:gray", "communication": "tab:pink",
                    "other": "tab:olive", "view": "tab:cyan"}


def _name(total: TimeTotal | ModuleTime) -> str:
    count = getattr(total, "count", 1)
    return (total.name or "(root)") + (f" ×{count}" if count > 1 else "")


def totals_table(title: str, totals: Sequence[TimeTotal] | Sequence[ModuleTime],
                 limit: int = 12) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in ("name", "ops", "FLOPs", "bytes", "predicted", "share", "bound c/m/o"):
        table.add_column(column, justify="left" if column == "name" else "right")
    for total in totals[:limit]:
        table.add_row(_name(total), str(total.ops), format_sci(total.flops),
                      format_bytes(total.bytes), format_duration(total.time_s),
                      f"{total.share_of_step:.1%}",
                      f"{total.compute_bound_ops}/{total.memory_bound_ops}/"
                      f"{total.overhead_bound_ops}")
    if len(totals) > limit:
        table.caption = f"{len(totals) - limit} more not shown (see --json)"
    return table


def prediction_view(prediction: RooflinePrediction,
                    modules: Sequence[ModuleTime] | None = None) -> View:
    """The tables and the step line; ``modules``: the by-module rows, repeated modules grouped
    (``module_times``), else the prediction's own."""
    lines: View = [
        totals_table("Predicted time by category", prediction.by_category),
        totals_table("by phase", prediction.by_phase),
        totals_table("by module (slowest first; ×N: N repeated modules summed)",
                     prediction.by_module if modules is None else modules, 8),
        f"predicted step: {format_duration(prediction.time_s)} for {format_sci(prediction.flops)}"
        f" FLOPs and {format_bytes(prediction.bytes)} moved on {prediction.hardware}; implied "
        f"MFU {prediction.mfu:.3f} against the dense {prediction.mfu_peak_key} peak",
    ]
    if prediction.tokens_per_s is not None:
        lines.append(f"tokens/s: {prediction.tokens_per_s:,.0f}")
    return lines


def _error(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:+.1%}"


def comparison_table(result: Comparison) -> View:
    table = Table(title=f"Predicted against measured on {result.hardware}",
                  title_justify="left", header_style="bold")
    for column in ("category", "ops", "predicted", "measured", "error"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for c in result.categories:
        table.add_row(c.category, str(c.ops), format_duration(c.predicted_s),
                      format_duration(c.measured_s), _error(c.error))
    table.add_row("(between ops: Python, autograd)", "", "",
                  format_duration(result.unattributed_s), "")
    table.add_row("whole step", "", format_duration(result.predicted_step_s),
                  format_duration(result.measured_step_s), _error(result.error), style="bold")
    return [table,
            f"MFU: predicted {result.predicted_mfu:.3f}, measured {result.measured_mfu:.3f} "
            f"(counted FLOPs / step time / {format_flop_rate(result.peak_flop_per_s)}); per-op "
            f"times matched by {result.matched_by}"]


def plot_roofline(prediction: RooflinePrediction, hardware: Hardware, path: str | Path,
                  overlay: Hardware | None = None) -> Path:
    """Log-log roofline: one ceiling per dtype, ops as points sized by their share of time."""
    figure, axes = new_figure(width_in=10.5, height_in=5.5)
    points = [o for o in prediction.ops if o.flops > 0 and o.bytes > 0]
    lows = [o.intensity_flop_per_byte for o in points] or [1.0]
    x_min, x_max = min(min(lows) / 4, 0.05), max(max(lows) * 4, 2e3)
    xs = [x_min * (x_max / x_min) ** (i / 200) for i in range(201)]
    for row, (chip, style) in enumerate(((hardware, "-"), (overlay, ":"))):
        if chip is None:
            continue
        for key in chip.dense_flop_per_s:
            if key.startswith("int"):
                continue
            axes.plot(xs, ceiling(chip, key, xs), style, linewidth=1.2,
                      label=f"{chip.id} {key} ({format_flop_rate(chip.dense_flop_per_s[key])})")
        ridge_key = "bf16" if "bf16" in chip.dense_flop_per_s else next(iter(
            chip.dense_flop_per_s))
        ridge = chip.intensity_flop_per_byte(ridge_key)
        axes.axvline(ridge, color="gray", linestyle="--", linewidth=0.8)
        axes.annotate(f"ridge {ridge:.0f} FLOP/B\n({chip.id} {ridge_key})",
                      (ridge, 0.98 - 0.08 * row),
                      xycoords=("data", "axes fraction"), fontsize=7, ha="right", va="top",
                      xytext=(-3, 0), textcoords="offset points")
    total = prediction.time_s or 1.0
    for category in sorted({o.category for o in points}):
        chosen = [o for o in points if o.category == category]
        axes.scatter([o.intensity_flop_per_byte for o in chosen],
                     [o.attained_flop_per_s for o in chosen],
                     s=[max(4.0, 400 * o.time_s / total) for o in chosen], alpha=0.6,
                     color=CATEGORY_COLOURS.get(category, "black"), label=category)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("attained FLOP/s")
    axes.set_title(f"Roofline on {hardware.id}: {len(points)} ops, point area ∝ share of time")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(figure, path)
