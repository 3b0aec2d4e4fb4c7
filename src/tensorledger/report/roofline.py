"""Roofline tables and the roofline plot."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from tensorledger.hardware import Hardware
from tensorledger.ledger.cluster import ClusterStep
from tensorledger.ledger.roofline import RooflineRun
from tensorledger.report.plots import new_figure, save_figure
from tensorledger.report.terminal import TailText
from tensorledger.roofline import OpPrediction, RooflinePrediction, TimeTotal
from tensorledger.roofline.compare import MEDIAN_COVERAGE, Comparison
from tensorledger.roofline.modules import ModuleTime
from tensorledger.units import format_bytes, format_duration, format_flop_rate, format_sci

__all__ = ["CATEGORY_COLOURS", "Roof", "comparison_table", "measurement_view", "op_spots",
           "plot_roofline", "point_area_pt2", "prediction_view", "roofline_figure",
           "roofline_run_view", "roofs", "step_lines", "totals_table"]

View = list[RenderableType | str]

#: Op categories in matplotlib's tab10 colours (hex, so plotly draws the same ones); copy in
#: gold rather than tab10's grey, which belongs to the roofs.
CATEGORY_COLOURS = {"matmul": "#1f77b4", "attention": "#9467bd", "elementwise": "#ff7f0e",
                    "reduction": "#2ca02c", "normalization": "#d62728", "embedding": "#8c564b",
                    "copy": "#e6ab02", "communication": "#e377c2", "other": "#bcbd22",
                    "view": "#17becf"}


def _name(total: TimeTotal | ModuleTime) -> str:
    count = getattr(total, "count", 1)
    return (total.name or "(root)") + (f" ×{count}" if count > 1 else "")


def totals_table(title: str, totals: Sequence[TimeTotal] | Sequence[ModuleTime],
                 limit: int = 12) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    shown: list[TimeTotal | ModuleTime] = list(totals[:limit])
    names = [_name(total) for total in shown]
    # a module path keeps its end when the column is narrow: the attention projections
    # (blocks.{0..11}.attention.query, .key, .value) differ only there
    paths = any("." in name for name in names)
    table.add_column("name", justify="left")
    for column in ("ops", "FLOPs", "bytes", "expected", "share", "roofline bound",
                   "bound c/m/o"):
        table.add_column(column, justify="right")
    for name, total in zip(names, shown, strict=True):
        table.add_row(TailText(name) if paths else name, str(total.ops), format_sci(total.flops),
                      format_bytes(total.bytes), format_duration(total.time_s),
                      f"{total.share_of_step:.1%}", format_duration(total.ideal_time_s),
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
        f"{format_sci(prediction.flops)} FLOPs and {format_bytes(prediction.bytes)} moved per "
        f"step on {prediction.hardware}",
        *step_lines(prediction),
    ]
    return lines


def step_lines(prediction: RooflinePrediction,
               tokens_per_s: tuple[float | None, float | None] | None = None
               ) -> list[str]:
    """The step's two figures, each with its MFU and tokens/s: the expected time (and what it
    rests on) and the roofline bound; ``tokens_per_s`` (expected, bound) replaces the
    prediction's own (a cluster's).  MFU counts the model's FLOPs; where the trace holds a
    checkpoint's recomputed forward the hardware FLOPs utilisation, every FLOP that ran, is
    named HFU beside it."""
    expected, bound = tokens_per_s or (prediction.tokens_per_s, prediction.ideal_tokens_per_s)

    def rate(value: float | None) -> str:
        return "" if value is None else f", {value:,.0f} tokens/s"

    peak = f"the dense {prediction.mfu_peak_key} peak"

    def utilisation(model: float, hardware: float) -> str:
        if not prediction.recomputed_flops:
            return f"MFU {format_sci(hardware, 3)}"
        return (f"MFU {format_sci(model, 3)}, HFU (the recomputed forward counted) "
                f"{format_sci(hardware, 3)}")

    return [
        f"expected step {format_duration(prediction.time_s)}: "
        f"{utilisation(prediction.model_mfu, prediction.mfu)} against {peak}{rate(expected)}"
        f" — from {prediction.basis}",
        f"roofline bound {format_duration(prediction.ideal_time_s)}: "
        f"{utilisation(prediction.ideal_model_mfu, prediction.ideal_mfu)}{rate(bound)} — peak "
        f"FLOP/s and {prediction.bound_bandwidth}, no overhead; no real step is faster",
    ]


def _error(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:+.1%}"


def _interval(found: tuple[float, float] | None) -> str:
    return "" if found is None else f"{format_duration(found[0])} to {format_duration(found[1])}"


def comparison_table(result: Comparison) -> View:
    table = Table(title=f"Predicted against measured on {result.hardware}",
                  title_justify="left", header_style="bold")
    interval = f"{MEDIAN_COVERAGE:.0%} interval"
    for column in ("category", "ops", "predicted", "measured", interval, "error"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for c in result.categories:
        table.add_row(c.category, str(c.ops), format_duration(c.predicted_s),
                      format_duration(c.measured_s), _interval(c.measured_interval_s),
                      _error(c.error))
    between = result.predicted_between_s
    table.add_row("(between ops: Python, autograd)", "",
                  format_duration(between) if between else "",
                  format_duration(result.unattributed_s),
                  _interval(result.residual_interval_s),
                  "" if math.isnan(result.between_error) else _error(result.between_error))
    table.add_row("whole step", "", format_duration(result.predicted_step_s),
                  format_duration(result.measured_step_s), "", _error(result.error),
                  style="bold")
    notes = ["warning: the ops' own times sum to more than the whole step ("
             f"{format_duration(result.measured_ops_s)} against "
             f"{format_duration(result.measured_step_s)}): the two runs disagree, so the "
             "machine was busy; measure again"
             ] if result.ops_exceed_step else []
    return [table, *notes,
            f"MFU: predicted {format_sci(result.predicted_mfu, 3)}, measured "
            f"{format_sci(result.measured_mfu, 3)} "
            f"(counted FLOPs / step time / {format_flop_rate(result.peak_flop_per_s)}); per-op "
            f"times matched by {result.matched_by}",
            f"{interval}: holds the median that each measured figure estimates (over the "
            f"profiled steps; between ops, over the rounds) with at least {MEDIAN_COVERAGE:.0%} "
            "probability, whatever the noise's shape; a prediction inside it is one the "
            "measurement cannot tell from right"]


#: Peaks closer than this fraction share one drawn line: apart they would be indistinguishable.
_COINCIDE = 0.01
#: Area in points² of an op that takes the whole step; an op's area is this × its share.
FULL_STEP_AREA_PT2 = 3000.0
#: The smallest area drawn, so that ops far below 0.1% of the step still show as dots.
MIN_AREA_PT2 = 1.5
SIZE_LEGEND_SHARES = (0.01, 0.1, 0.5)
#: Roofs in greys (the run's in black), so that they never share a colour with a category.
_ROOF_GREYS = ("0.35", "0.55", "0.7", "0.8")


@dataclass(frozen=True)
class Roof:
    """One drawn ceiling: the dtypes whose dense peaks coincide (within 1%) share a line."""

    keys: tuple[str, ...]  # fastest first
    peak_flop_per_s: float  # where the line is drawn: the run's dtype's peak if among them

    def label(self, hardware: Hardware) -> str:
        rates = [hardware.dense_flop_per_s[k] for k in self.keys]
        shown = (format_flop_rate(rates[0]) if len(set(rates)) == 1
                 else " / ".join(format_flop_rate(r) for r in rates))
        return f"{hardware.id} {'/'.join(self.keys)} ({shown})"


def roofs(hardware: Hardware, run_key: str | None = None) -> tuple[Roof, ...]:
    """The floating-point roofs of ``hardware``, fastest first, with coinciding peaks merged
    (H100: fp64 67 and fp32 66.9 TFLOP/s are one line; bf16 and fp16 another)."""
    keys = sorted((k for k in hardware.dense_flop_per_s if not k.startswith("int")),
                  key=lambda k: -hardware.dense_flop_per_s[k])
    groups: list[list[str]] = []
    for key in keys:
        rate = hardware.dense_flop_per_s[key]
        if groups and rate >= hardware.dense_flop_per_s[groups[-1][0]] * (1 - _COINCIDE):
            groups[-1].append(key)
        else:
            groups.append([key])
    return tuple(Roof(tuple(g), hardware.dense_flop_per_s[run_key if run_key in g else g[0]])
                 for g in groups)


def point_area_pt2(share: float) -> float:
    """Marker area of an op taking ``share`` of the step: proportional, with a visible floor."""
    return max(MIN_AREA_PT2, FULL_STEP_AREA_PT2 * share)


def op_spots(points: Sequence[OpPrediction]
             ) -> dict[str, dict[tuple[float, float], list[OpPrediction]]]:
    """The ops at each drawn point, by category (sorted): ops of one category that land on the
    same spot (the same op in every layer) are one point, its area their summed share."""
    spots: dict[str, dict[tuple[float, float], list[OpPrediction]]] = {}
    for o in sorted(points, key=lambda o: o.category):
        spot = (o.intensity_flop_per_byte, o.attained_flop_per_s)
        spots.setdefault(o.category, {}).setdefault(spot, []).append(o)
    return spots


def roofline_figure(prediction: RooflinePrediction, hardware: Hardware,
                    overlay: Hardware | None = None) -> Any:
    """The log-log roofline as a matplotlib figure: one line per distinct dense peak (the run's
    dtype, ``prediction.mfu_peak_key``, thick and black, with its ridge), every op a point of
    its category's colour with area ∝ its share of the step's time."""
    from matplotlib.lines import Line2D

    figure, axes = new_figure(width_in=11.5, height_in=6.0)
    points = [o for o in prediction.ops if o.flops > 0 and o.bytes > 0]
    lows = [o.intensity_flop_per_byte for o in points] or [1.0]
    run_key = prediction.mfu_peak_key
    ridges = [c.intensity_flop_per_byte(run_key) for c in (hardware, overlay)
              if c is not None and run_key in c.dense_flop_per_s]
    x_min = min(min(lows) / 4, 0.05)
    x_max = max(max(lows) * 4, 2e3, *(r * 4 for r in ridges))
    xs = [x_min * (x_max / x_min) ** (i / 200) for i in range(201)]
    roof_handles = []
    for row, (chip, style) in enumerate(((hardware, "-"), (overlay, ":"))):
        if chip is None:
            continue
        greys = iter(_ROOF_GREYS * 3)
        for roof in roofs(chip, run_key):
            ours = run_key in roof.keys
            ys = [min(roof.peak_flop_per_s, x * chip.memory_bandwidth_bytes_per_s) for x in xs]
            label = roof.label(chip) + (" — this run's dtype" if ours else "")
            (line,) = axes.plot(xs, ys, style, color="black" if ours else next(greys),
                                linewidth=2.0 if ours else 1.1, alpha=1.0 if ours else 0.85,
                                zorder=3 if ours else 2, label=label)
            roof_handles.append(line)
        if run_key in chip.dense_flop_per_s:
            ridge = chip.intensity_flop_per_byte(run_key)
            axes.axvline(ridge, color="black", linestyle=("--", "-.")[row], linewidth=0.9, zorder=1)
            axes.annotate(f"ridge {ridge:.3g} FLOP/B\n({chip.id} {run_key})",
                          (ridge, 0.98 - 0.1 * row), xycoords=("data", "axes fraction"),
                          fontsize=8, ha="right", va="top", xytext=(-4, 0),
                          textcoords="offset points")
    category_handles = []
    step_s = prediction.time_s
    for category, spots in op_spots(points).items():
        colour = CATEGORY_COLOURS.get(category, "black")
        # big points first and categories with smaller points above: a small point near a big
        # one of another category (attention beside the matmuls) stays in sight
        ordered = sorted(((spot, sum(o.time_s for o in ops) / step_s if step_s else 0.0)
                          for spot, ops in spots.items()), key=lambda item: -item[1])
        axes.scatter([x for (x, _), _ in ordered], [y for (_, y), _ in ordered],
                     s=[point_area_pt2(share) for _, share in ordered], alpha=0.7,
                     linewidths=0.5, edgecolors="white", color=colour, label=category,
                     zorder=5 - ordered[0][1])
        category_handles.append(Line2D([], [], linestyle="", marker="o", markersize=6,
                                       color=colour, alpha=0.8, label=category))
    size_handles = [Line2D([], [], linestyle="", marker="o", color="0.5", alpha=0.6,
                           markersize=math.sqrt(point_area_pt2(share)),
                           label=f"{share:.0%} of the step")
                    for share in SIZE_LEGEND_SHARES]
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(x_min, x_max)
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("attained FLOP/s")
    axes.set_title(f"Roofline on {hardware.id}"
                   + (f" (dotted: {overlay.id})" if overlay is not None else "")
                   + f": {len(points)} ops, matmuls at {run_key}\npoint area ∝ share of the step's "
                   "time (the ops of one category at one spot, as every layer's copy, are one "
                   "point)", fontsize=10)
    legends = [axes.legend(handles=roof_handles, title="roofs (dense peaks)", fontsize=7,
                           title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0)),
               axes.legend(handles=category_handles, title="op category", fontsize=7,
                           title_fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.42)),
               axes.legend(handles=size_handles, title="point area", fontsize=7,
                           title_fontsize=8, loc="lower left", bbox_to_anchor=(1.01, 0.0),
                           labelspacing=2.2, borderpad=1.0, handlelength=4.5)]
    for legend in legends[:-1]:
        axes.add_artist(legend)
    return figure


def plot_roofline(prediction: RooflinePrediction, hardware: Hardware, path: str | Path,
                  overlay: Hardware | None = None) -> Path:
    """Write :func:`roofline_figure` to ``path`` (.png, .svg or .pdf), whole or not at all."""
    return save_figure(roofline_figure(prediction, hardware, overlay), path)


def roofline_run_view(run: RooflineRun) -> View:
    """What ``tensorledger roofline`` prints, the plot left out."""
    view: View = [f"{run.model} (built by {run.built_by}), {run.step}, batch {run.batch} × seq "
                  f"{run.seq} ({run.tokens} tokens), {run.precision}, traced on {run.device}; "
                  f"hardware {run.prediction.hardware}",
                  *([run.routing] if run.routing else []),
                  *prediction_view(run.prediction, run.modules),
                  *layout_lines(run), *serving_lines(run.serving, run.step)]
    if run.uncovered:
        view.append("ops with no cost rule (counted as 0 FLOPs, 0 bytes): " + ", ".join(
            f"{op} ×{calls}" for op, calls in run.uncovered.items()))
    return view + measurement_view(run)


def serving_lines(figures: Any, step: str) -> list[str]:
    """A prefill or decode step's time per token (to first token), kernels back to back and
    eager, and what bounds it."""
    if figures is None:
        return []
    what = "time per output token" if step == "decode" else "time to first token"
    return [f"{what}: {format_duration(figures.streamed_time_s)} with the kernels back to back "
            f"(a captured graph, as serving engines run it), {figures.bound}-bound "
            f"({format_duration(figures.memory_time_s)} of memory, "
            f"{format_duration(figures.compute_time_s)} of compute at the expected rates): "
            f"{figures.tokens_per_s:,.0f} tokens/s for the batch of {figures.batch}"
            f"{'' if figures.context is None else f' at a context of {figures.context:,}'}, "
            f"{figures.tokens_per_s_per_user:,.1f} for each sequence",
            f"eager, each op launched: {format_duration(figures.eager_time_s)} "
            f"({format_duration(figures.launch_time_s)} of it the per-op cost)"]


def layout_lines(run: RooflineRun) -> list[str]:
    """One rank of a layout: see :func:`cluster_lines`."""
    return [] if run.cluster is None else cluster_lines(run.cluster)


def cluster_lines(cluster: ClusterStep) -> list[str]:
    """One rank of a layout: its communication on the links, the step between the two overlap
    bounds, and the cluster's tokens/s and MFU; nothing for one device."""
    if cluster.ranks == 1:
        return []
    c = cluster
    rates = [f"{rate:,.0f}" if rate > 0 else "—" for rate in c.tokens_per_s]
    bubble = [] if c.pipeline_bubble == 0 else [
        f"pipeline bubble {c.pipeline_bubble:.1%} of the step ({c.bubble_source}"
        + ("" if c.in_flight is None else
           f"; this rank holds up to {c.in_flight} micro-batches in flight") + "): "
        f"with every stage as busy as this one, the step takes "
        f"{format_duration(c.step_s)}"]
    if c.communication_s == 0 and c.data_parallel == c.ranks and not c.pipeline_bubble:
        return [f"{c.ranks} devices ({c.layout}): nothing exchanged between them; the "
                f"cluster: {c.data_parallel} × {c.tokens:,} tokens per step = {rates[0]} "
                "tokens/s"]
    return [*bubble,
        f"one rank of {c.ranks} ({c.layout}): its collectives take "
        f"{format_duration(c.communication_s)} on the links (ring formulas, the catalog's "
        "link bandwidths and latencies)",
        f"step {format_duration(c.rank_time_s)} with communication after compute (serial), "
        f"{format_duration(c.overlapped_time_s)} with each phase's communication hidden under "
        f"its compute (ideal overlap); exposed communication between 0 and "
        f"{format_duration(c.exposed_communication_s)}",
        f"the cluster: {c.data_parallel} × {c.tokens:,} tokens per step = {rates[0]} "
        f"tokens/s serial, {rates[1]} tokens/s overlapped"
        + (" (the bubble included)" if c.pipeline_bubble else "")
        + (f"; MFU of the cluster {format_sci(c.mfu, 3)}, HFU {format_sci(c.hfu, 3)} "
           "(serial; HFU: the FLOPs that ran, the recomputed forward included)"
           if c.recomputed_flops else f"; MFU of the cluster {format_sci(c.mfu, 3)} (serial)"),
    ]


def measurement_view(run: RooflineRun) -> View:
    """The measurement beside the prediction (when there is one) and the warnings on it: the
    harness's spread, the figures the profile marks unreliable."""
    view: View = [] if run.comparison is None else comparison_table(run.comparison)
    if run.measurement_warning:
        view.append(f"warning: {run.measurement_warning}")
    if run.hardware_unreliable:
        view.append(f"warning: the profile {run.prediction.hardware} marks "
                    f"{len(run.hardware_unreliable)} figure(s) unreliable (their probe was "
                    f"noisy): {', '.join(run.hardware_unreliable)}; the predictions and errors "
                    "above rest on them")
    return view
