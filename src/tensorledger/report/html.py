"""One self-contained HTML page for a ledger: its headline (the answers a reader came for,
first), its tables (:mod:`tensorledger.report.document`) and interactive plots (plotly, the
library inlined into the page, so it opens offline and makes no network request).

Plots: the roofline with every distinct roof of the chip (coinciding peaks merged, the run's
dtype thick, its ridge marked) and every op (ops of a category at one spot are one point, area
∝ share of the step; hover: ops, modules, phase, FLOPs, bytes), memory over the step stacked
by category with the peak's value and each phase's start marked (hover: what is live), the
memory breakdown (the peak in its title: a moment, not a category), predicted time by category
and by module (repeated modules summed as the terminal's table sums them, the ops outside every
module named), and FLOPs by phase.  Log axes carry their unit on every tick.  Formats;
computes nothing.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensorledger.errors import InputError
from tensorledger.units import format_bytes, format_flop_rate

if TYPE_CHECKING:
    from tensorledger.ledger.account import Ledger

__all__ = ["PLOT_IDS", "ledger_figures", "ledger_report_html"]

#: The plots of the page, in order; each is one ``<div id=...>`` holding a plotly figure.
PLOT_IDS = ("roofline", "memory-timeline", "memory-breakdown", "time-by-category",
            "time-by-module", "flops-by-phase")

_CATEGORY_COLORS = {"parameter": "#4c72b0", "gradient": "#dd8452",
                    "optimizer_state": "#55a868", "saved_activation": "#c44e52",
                    "kv_cache": "#937860", "temporary": "#8172b3"}


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise InputError("--html needs plotly: pip install 'tensorledger[report]'") from None
    return go


def _roofs(ledger: Ledger) -> list[tuple[str, float, bool]]:
    """(label, peak, the run's?) per drawn roof: the chip's distinct dense peaks when the
    catalog knows it, else the one peak the ledger carries."""
    from tensorledger.errors import TensorLedgerError
    from tensorledger.hardware import get_hardware
    from tensorledger.report.roofline import roofs

    key = ledger.roofline.mfu_peak_key
    try:
        chip = get_hardware(ledger.hardware)
    except TensorLedgerError:  # a chip from a file that is no longer there
        chip = None
    if chip is None or chip.dense_flop_per_s.get(key) != ledger.peak_flop_per_s:
        return [(f"{ledger.hardware} {key} ({format_flop_rate(ledger.peak_flop_per_s)}) — "
                 "this run's dtype", ledger.peak_flop_per_s, True)]
    return [(roof.label(chip) + (" — this run's dtype" if key in roof.keys else ""),
             roof.peak_flop_per_s, key in roof.keys) for roof in roofs(chip, key)]


def _names(names: list[str], shown: int = 3) -> str:
    """Distinct names in first-seen order, the first few, and how many more."""
    distinct = list(dict.fromkeys(names))
    more = f" and {len(distinct) - shown} more" if len(distinct) > shown else ""
    return ", ".join(distinct[:shown]) + more


def _roofline(go: Any, ledger: Ledger) -> Any:
    from tensorledger.report.roofline import CATEGORY_COLOURS, op_spots, point_area_pt2

    ops = [o for o in ledger.roofline.ops if o.flops > 0 and o.bytes > 0]
    total = ledger.roofline.time_s or 1.0
    figure = go.Figure()
    if ops:
        bandwidth = ledger.memory_bandwidth_bytes_per_s
        ridge = ledger.peak_flop_per_s / bandwidth
        low = min(min(o.intensity_flop_per_byte for o in ops) / 2, ridge / 4)
        high = max(max(o.intensity_flop_per_byte for o in ops) * 2, ridge * 4)
        greys = iter(("#595959", "#8c8c8c", "#b3b3b3", "#cccccc") * 3)
        # the run's roof last, over the others where they share the memory slope
        drawn = sorted(enumerate(_roofs(ledger)), key=lambda item: item[1][2])
        for rank, (label, peak, ours) in drawn:
            figure.add_trace(go.Scatter(legendrank=rank + 1,
                x=[low, peak / bandwidth, high], y=[low * bandwidth, peak, peak], mode="lines",
                name=label, legendgroup="roofs", legendgrouptitle_text="roofs (dense peaks)",
                line={"color": "black" if ours else next(greys), "width": 3 if ours else 1.2},
                hovertemplate=label + "<extra></extra>"))
        figure.add_shape(type="line", x0=ridge, x1=ridge, y0=0, y1=1, yref="paper",
                         line={"dash": "dash", "width": 1, "color": "black"})
        # plotly places annotations on a log axis by the exponent, shapes by the value
        figure.add_annotation(x=math.log10(ridge), y=1, yref="paper", showarrow=False,
                              xanchor="right", yanchor="top", xshift=-4,
                              text=f"ridge {ridge:.3g} FLOP/B ({ledger.roofline.mfu_peak_key})")
    for category, spots in op_spots(ops).items():
        shares = [sum(o.time_s for o in group) / total for group in spots.values()]
        data = [[_names([o.op for o in group]), _names([o.module or "(root)" for o in group]),
                 _names([o.phase for o in group]), sum(o.flops for o in group),
                 sum(o.bytes for o in group), share, len(group)]
                for group, share in zip(spots.values(), shares, strict=True)]
        figure.add_trace(go.Scatter(
            x=[x for x, _ in spots], y=[y for _, y in spots], mode="markers", name=category,
            legendgroup="categories", legendgrouptitle_text="op category",
            # plotly sizes markers by diameter: the square root of the area ∝ share of time
            marker={"size": [point_area_pt2(share) ** 0.5 for share in shares],
                    "color": CATEGORY_COLOURS.get(category, "black"), "opacity": 0.7,
                    "line": {"width": 0.5, "color": "white"}},
            customdata=data,
            hovertemplate=("%{customdata[6]} ops: %{customdata[0]}<br>modules %{customdata[1]}"
                           "<br>phase %{customdata[2]}<br>%{customdata[3]:.4g} FLOPs, "
                           "%{customdata[4]:.4g} bytes<br>%{customdata[5]:.2%} of the step<extra>"
                           + category + "</extra>")))
    # ticks at powers of ten written with their unit: plotly's own would write 1e10 FLOP/s as
    # "10B", read as bytes, beside "1T"
    ys = [y for _, y in (spot for spots in op_spots(ops).values() for spot in spots)]
    ys += [peak for _, peak, _ in _roofs(ledger)] if ops else []
    xs = [o.intensity_flop_per_byte for o in ops]
    figure.update_layout(title=f"Roofline on {ledger.hardware}: every op of the step, matmuls "
                               f"at {ledger.roofline.mfu_peak_key}; point area ∝ share of time",
                         xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)",
                                **_decade_ticks(xs, _intensity)},
                         yaxis={"type": "log", "title": "attained FLOP/s",
                                **_decade_ticks(ys, format_flop_rate)},
                         legend={"itemsizing": "constant"})
    return figure


def _intensity(value: float) -> str:
    return f"{value:g} FLOP/B"


def _decade_ticks(values: list[float], label: Callable[[float], str]) -> dict[str, Any]:
    """A tick at each power of ten over ``values`` (one decade either side), its text written
    by ``label`` with the unit; nothing when there are no positive values."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {}
    low = math.floor(math.log10(min(positive))) - 1
    high = math.ceil(math.log10(max(positive))) + 1
    powers = [10.0**k for k in range(low, high + 1)]
    return {"tickmode": "array", "tickvals": powers, "ticktext": [label(p) for p in powers]}


def _memory_timeline(go: Any, ledger: Ledger) -> Any:
    from tensorledger.memory import phase_spans

    points = ledger.memory.timeline.points
    figure = go.Figure()
    index = [p.index for p in points]
    for category, color in _CATEGORY_COLORS.items():
        figure.add_trace(go.Scatter(
            x=index, y=[getattr(p, f"{category}_bytes") / 1e9 for p in points],
            name=category.replace("_", " "), stackgroup="memory", line={"color": color},
            line_shape="hvh",
            customdata=[[p.op, p.module or "(root)", p.phase, p.total_bytes / 1e9]
                        for p in points],
            hovertemplate=("after %{customdata[0]} (%{customdata[2]}, %{customdata[1]})<br>"
                           + category.replace("_", " ") + " %{y:.4g} GB of %{customdata[3]:.4g}"
                           " GB live<extra></extra>")))
    for number, span in enumerate(phase_spans(points)):
        at = span.first_index - 0.5  # between the last op of one phase and the first of the next
        if number:
            figure.add_shape(type="line", x0=at, x1=at, y0=0, y1=1, yref="paper",
                             line={"dash": "dot", "width": 1, "color": "#404040"})
        figure.add_annotation(x=max(at, 0), y=1, yref="paper", xanchor="left", yanchor="bottom",
                              showarrow=False, text=f"{span.phase} →")
    peak = ledger.memory.timeline.peak
    figure.add_annotation(x=peak.index, y=peak.total_bytes / 1e9, showarrow=True, ay=-28,
                          text=f"peak {format_bytes(peak.total_bytes, 'auto')} after {peak.op} "
                               f"({peak.phase})", bgcolor="white")
    # the axis starts at the first op, not at plotly's padding before it (−500 on gpt2)
    figure.update_layout(title="Memory over the step, stacked by category (GB)",
                         xaxis={"title": "op (in the order the step runs them)",
                                "range": [0, max(index, default=0) + 0.5]},
                         yaxis={"title": "GB live", "range": [0, peak.total_bytes / 1e9 * 1.2]})
    return figure


def _bars(go: Any, title: str, names: list[str], values: list[float], unit: str) -> Any:
    figure = go.Figure(go.Bar(x=names, y=values, hovertemplate="%{x}: %{y:.4g} " + unit
                              + "<extra></extra>"))
    figure.update_layout(title=title, yaxis={"title": unit})
    return figure


#: What the ops outside every module are in a training step: the optimizer's, and the loss's
#: where the model's forward does not compute it.
ROOT_WITH_OPTIMIZER = "optimizer step and ops outside modules"
ROOT = "ops outside modules"


def _time_by_module(go: Any, ledger: Ledger, shown: int = 15) -> Any:
    """Predicted time by module as the terminal's table has it: repeated modules summed into
    one bar (``blocks.{0..11}.mlp.up ×12``), the ops outside every module named for what they
    are; horizontal, so that long paths read whole."""
    from tensorledger.roofline.modules import module_times

    optimizer = any(p.name == "optimizer" and p.ops for p in ledger.roofline.by_phase)
    rows = module_times(ledger.roofline.by_module)[:shown]
    names = [(m.name or (ROOT_WITH_OPTIMIZER if optimizer else ROOT))
             + (f" ×{m.count}" if m.count > 1 else "") for m in rows]
    values = [m.time_s * 1e3 for m in rows]
    figure = go.Figure(go.Bar(x=values[::-1], y=names[::-1], orientation="h",
                              hovertemplate="%{y}: %{x:.4g} ms<extra></extra>"))
    figure.update_layout(title=f"Predicted time by module, top {shown} (ms; ×N: N repeated "
                               "modules summed)",
                         xaxis={"title": "ms"}, yaxis={"automargin": True},
                         height=max(420, 28 * len(rows) + 160))
    return figure


def _tables(ledger: Ledger) -> str:
    """The headline, then the terminal's tables and lines as a document's tables and text."""
    from tensorledger.report.account import account_view
    from tensorledger.report.document import STYLE, headline_html, view_html

    return (f"<div class='tensorledger'>{STYLE}{headline_html(ledger)}\n"
            f"{view_html(account_view(ledger))}</div>")


def ledger_figures(ledger: Ledger) -> dict[str, Any]:
    """The plotly figures of the page, by the ids of :data:`PLOT_IDS`."""
    go = _plotly()
    m = ledger.memory
    return {
        "roofline": _roofline(go, ledger),
        "memory-timeline": _memory_timeline(go, ledger),
        # the peak is a moment of the step, not a category: it is said in the title
        "memory-breakdown": _bars(go, "Memory by category (GB); the step's peak, these and "
                                  "the temporaries live at one moment: "
                                  f"{format_bytes(m.peak_bytes, 'auto')}",
                                  ["parameters", "gradients", "optimizer state",
                                   "saved activations"],
                                  [m.params_bytes / 1e9, m.grads_bytes / 1e9,
                                   m.optimizer_state_bytes / 1e9,
                                   m.saved_activation_bytes / 1e9], "GB"),
        "time-by-category": _bars(go, f"Predicted time by category on {ledger.hardware} (ms)",
                                  [t.name for t in ledger.roofline.by_category],
                                  [t.time_s * 1e3 for t in ledger.roofline.by_category], "ms"),
        "time-by-module": _time_by_module(go, ledger),
        "flops-by-phase": _bars(go, "FLOPs by phase", [p.phase for p in ledger.trace.by_phase],
                                [float(p.flops) for p in ledger.trace.by_phase], "FLOPs"),
    }


def ledger_report_html(ledger: Ledger) -> str:
    """The whole page: the headline (the answers first: fit, step time, MFU, tokens/s, the
    run), the tables, and the plots of :data:`PLOT_IDS`."""
    figures = ledger_figures(ledger)
    parts = []
    for i, name in enumerate(PLOT_IDS):
        parts.append(figures[name].to_html(full_html=False, div_id=name,
                                           include_plotlyjs=(i == 0),
                                           config={"displaylogo": False}))
    title = html.escape(f"tensorledger: {ledger.model} on {ledger.count} × {ledger.hardware}")
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + title
            + "</title></head><body style='font-family: sans-serif; max-width: 1200px; "
            "margin: auto'>\n<h1>" + title + "</h1>\n" + _tables(ledger) + "\n"
            + "\n".join(parts) + "\n</body></html>\n")
