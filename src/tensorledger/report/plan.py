"""Terminal views of the planner: the ranked layouts, the rejections by reason, the working."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from tensorledger.napkin.adapters import FULL_FINE_TUNE
from tensorledger.plan import AccumulationPlan, LayoutPlan
from tensorledger.report.plots import new_figure, save_figure
from tensorledger.units import format_bytes, format_count, format_duration

__all__ = ["accumulation_view", "layout_plan_view", "plan_figure", "write_plan_plot"]

View = list[RenderableType | str]


def _reserve(plan: LayoutPlan) -> str:
    return "" if not plan.reserve else (
        f" (the device's memory less its reserve: {plan.reserve}; --budget to set it)")


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f}"


def _fine_tune(step: str) -> str:
    """The title's word on what a step trains: nothing for a full fine-tune."""
    return "" if step == FULL_FINE_TUNE else f"; {step}"


def layout_plan_view(plan: LayoutPlan) -> View:
    """The ranked table, then the counts, a few rejections and the assumptions."""
    table = Table(title=f"{plan.model} on {plan.count:,} × {plan.hardware}: global batch "
                  f"{plan.global_batch_seqs:,} × {plan.seq_len:,} = "
                  f"{format_count(plan.global_batch_tokens)} tokens, {plan.precision} + "
                  f"{plan.optimizer}{_fine_tune(plan.step)}", title_justify="left",
                  header_style="bold")
    columns = ["#", "layout", "micro × accum", "checkpoint", "memory/rank GB", "step",
               "tokens/s", "MFU"]
    if plan.tokens is not None:
        columns.append("days")
    for column in columns:
        table.add_column(column, justify="left" if column in ("layout", "checkpoint")
                         else "right")
    for rank, row in enumerate(plan.ranked, 1):
        choice, time = row.choice, row.time
        cells = [str(rank), row.layout, f"{choice.micro_batch} × {choice.accumulation}",
                 choice.checkpoint, _gb(row.memory.total_bytes),
                 format_duration(time.step_s), format_count(time.tokens_per_s),
                 f"{time.mfu:.1%}"]
        if row.train_days is not None:
            cells.append(f"{row.train_days:,.1f}")
        table.add_row(*cells)
    counts = ", ".join(f"{reason} {n:,}" for reason, n in plan.rejected_by_reason.items())
    rejected = Table(title="Rejected (a few per reason; the closest to fitting first for "
                     "memory)", title_justify="left", header_style="bold")
    for column in ("reason", "layout", "micro × accum", "checkpoint", "why"):
        rejected.add_column(column)
    for r in plan.rejected:
        rejected.add_row(r.reason, r.choice.describe(),
                         f"{r.choice.micro_batch} × {r.choice.accumulation}",
                         r.choice.checkpoint, r.detail)
    best = plan.best
    lines: View = [
        table,
        f"searched {plan.searched:,} configuration{'' if plan.searched == 1 else 's'}: "
        f"{plan.feasible:,} feasible, rejected by {counts}",
        f"best: {best.layout}, micro-batch {best.choice.micro_batch} × {best.choice.accumulation}"
        f", checkpoint {best.choice.checkpoint}: {_gb(best.memory.total_bytes)} GB per rank of "
        f"{_gb(plan.budget_bytes)} GB{_reserve(plan)}, {format_duration(best.time.step_s)} "
        "per step "
        f"({format_duration(best.time.compute_s)} compute, bubble "
        f"{best.time.bubble_to_compute:.1%}, TP comm {format_duration(best.time.tp_comm_s)}, "
        + (f"EP all-to-all {format_duration(best.time.ep_comm_s)}, "
           if best.time.ep_comm_s else "")
        + f"DP comm exposed {format_duration(best.time.dp_exposed_s)} of "
        f"{format_duration(best.time.dp_comm_s)}); MFU {best.time.mfu:.1%} (model FLOPs), "
        f"HFU {best.time.hfu:.1%} (recomputation included)",
    ]
    if plan.fixed is not None:
        lines.append(f"fixed by you: {plan.fixed.describe()}" + (
            "; one layout evaluated" if plan.searched == 1 else "; the search filled the rest"))
    if plan.rejected:
        lines.append(rejected)
    if plan.verified:
        lines.append(_verified_table(plan))
    lines.extend(f"note: {n}" for n in plan.notes)
    lines.extend(f"assumes: {a}" for a in plan.assumptions)
    checked = (f"the top {len(plan.verified)} traceable layouts traced" if plan.verified
               else "closed forms, not yet verified by a trace (--verify N)")
    efficiency = (f"the chip's published matmul efficiency ({plan.best.time.efficiency:.1%} "
                  "for the best layout's largest matmul)" if plan.efficiency is None else
                  f"efficiency {plan.efficiency:g} (--efficiency)")
    lines.append(f"peak: {plan.peak_flop_per_s / 1e12:g} TFLOP/s dense × {efficiency}; "
                 f"attention {plan.attention}; {checked}")
    return lines


def _verified_table(plan: LayoutPlan) -> Table:
    table = Table(title="Verified: one step traced on fake ranks (real parallel code; one "
                  "micro-batch, or under a pipeline the micro-batches named, on the busiest "
                  "stage), closed form / traced", title_justify="left", header_style="bold")
    for column in ("layout", "state", "activations", "peak", "sent"):
        table.add_column(column, justify="left" if column == "layout" else "right")
    for v in plan.verified:
        errors = v.errors()
        pairs = {"state": (v.closed_state_bytes, v.traced_state_bytes),
                 "activations": (v.closed_activation_bytes, v.traced_activation_bytes),
                 "peak": (v.closed_total_bytes, v.traced_peak_bytes),
                 "sent": (v.closed_sent_bytes, v.traced_sent_bytes)}
        table.add_row(v.layout, *(f"{format_bytes(closed)} / {format_bytes(traced)} "
                                  f"({errors[name]:+.1%})"
                                  for name, (closed, traced) in pairs.items()))
    return table


def accumulation_view(plan: AccumulationPlan) -> View:
    table = Table(title=f"{plan.model}: {plan.global_batch_seqs:,} sequences of "
                  f"{plan.seq_len:,} on {plan.count:,} × {plan.hardware}, ZeRO-{plan.zero}, "
                  f"checkpoint {plan.checkpoint}{_fine_tune(plan.step)}", title_justify="left",
                  header_style="bold")
    for column in ("micro × accum", "activations", "memory/rank", "fits", "FLOP/byte",
                   "step", "bound", "tokens/s", "MFU"):
        table.add_column(column, justify="right")
    for o in plan.options:
        table.add_row(f"{o.micro_batch} × {o.accumulation}", format_bytes(o.activation_bytes),
                      format_bytes(o.memory_bytes), "yes" if o.fits else "no",
                      f"{o.intensity_flop_per_byte:,.0f}"
                      + (" (memory-bound)" if o.memory_bound else ""),
                      format_duration(o.step_s), format_duration(o.ideal_step_s),
                      format_count(o.tokens_per_s), f"{o.mfu:.1%}")
    c = plan.chosen
    efficiency = (f"the chip's published matmul efficiency ({c.efficiency:.1%} at the chosen "
                  "split's largest matmul)" if plan.efficiency is None else
                  f"efficiency {plan.efficiency:g} (--efficiency)")
    source = "its traced profile" if plan.profiled else "the reference model's closed form"
    return [table, f"chosen: micro-batch {c.micro_batch} × {c.accumulation} accumulation steps "
            f"({format_bytes(c.memory_bytes)} per rank of {format_bytes(plan.budget_bytes)}): "
            f"{format_duration(c.step_s)} a step, MFU {c.mfu:.1%} (model FLOPs), HFU "
            f"{c.hfu:.1%} (recomputation included); bound {format_duration(c.ideal_step_s)} "
            "at the whole dense peak",
            f"step: {plan.peak_flop_per_s / 1e12:g} TFLOP/s dense × {efficiency}; bound: the "
            f"dense peak itself; the model from {source}"]


def plan_figure(plan: LayoutPlan) -> Any:
    """Memory per rank against step time: the ranked layouts as points, the frontier (no
    layout both faster and smaller) as a line through its layouts, the budget as a line."""
    figure, axes = new_figure(9.0, 5.5)
    ranked = plan.ranked
    axes.scatter([r.time.step_s for r in ranked], [r.memory.total_bytes / 1e9 for r in ranked],
                 s=18, color="0.6", label=f"the {len(ranked)} fastest layouts", zorder=2)
    front = plan.frontier
    axes.plot([r.time.step_s for r in front], [r.memory.total_bytes / 1e9 for r in front],
              "o-", color="C0", drawstyle="steps-post", markersize=5,
              label="frontier: no layout is both faster and smaller", zorder=3)
    axes.axhline(plan.budget_bytes / 1e9, color="C3", linestyle="--", linewidth=1,
                 label=f"budget {plan.budget_bytes / 1e9:g} GB per rank")
    axes.set_xlabel("step time (s, closed form)")
    axes.set_ylabel("memory per rank (GB)")
    axes.set_title(f"{plan.model} on {plan.count:,} × {plan.hardware}: "
                   f"{plan.global_batch_tokens:,} tokens per step, {plan.precision}")
    axes.grid(True, which="both", alpha=0.3)
    _label_frontier(axes, front[:_LABELLED])
    # below the axes, where no point or label can be
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=3, fontsize=8,
                frameon=False)
    return figure


#: Frontier layouts named on the plot, fastest first.
_LABELLED = 6


def _label_frontier(axes: Any, labelled: Sequence[Any]) -> None:
    """Name each layout in a column of labels spaced evenly down the plot, in the frontier's
    order (fastest and largest at the top), each joined to its point by a thin line: frontier
    points lie close together (two layouts 0.5 GB apart near 66 GB), their labels never do."""
    if not labelled:
        return
    x_low, x_high = axes.get_xlim()
    y_low, y_high = axes.get_ylim()
    points = [(r.time.step_s, r.memory.total_bytes / 1e9) for r in labelled]
    # the column goes on the side of the plot the labelled points leave free
    middle = sum((x - x_low) / (x_high - x_low) for x, _ in points) / len(points)
    column_x = 0.3 if middle < 0.5 else 0.02
    top, bottom = 0.93, max(0.93 - 0.075 * (len(labelled) - 1), 0.3)
    for number, (r, point) in enumerate(zip(labelled, points, strict=True)):
        at = top - (top - bottom) * number / max(len(labelled) - 1, 1)
        axes.annotate(f"{r.layout}, {r.choice.micro_batch}×{r.choice.accumulation}, "
                      f"{r.choice.checkpoint}", point, xytext=(column_x, at),
                      textcoords="axes fraction", fontsize=7, va="center", ha="left",
                      bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "alpha": 0.9,
                            "edgecolor": "none"},
                      arrowprops={"arrowstyle": "-", "color": "0.45", "linewidth": 0.6,
                                  "shrinkA": 0, "shrinkB": 3})
    axes.set_xlim(x_low, x_high)
    axes.set_ylim(y_low, y_high)


def write_plan_plot(plan: LayoutPlan, path: str | Path) -> Path:
    """Write :func:`plan_figure` to ``path`` (.png, .svg or .pdf), whole or not at all."""
    return save_figure(plan_figure(plan), path)
