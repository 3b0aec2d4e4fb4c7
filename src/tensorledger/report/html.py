"""One self-contained HTML page for a ledger: its tables and interactive plots (plotly, the
library inlined into the page, so it opens offline and makes no network request).

Plots: the roofline with every op (hover: op, module, phase, FLOPs, bytes), memory over the
step stacked by category with the peak marked (hover: what is live), the memory breakdown,
predicted time by category and by module, and FLOPs by phase.  Formats; computes nothing.
"""

from __future__ import annotations

import html
import io
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tensorledger.errors import InputError

if TYPE_CHECKING:
    from tensorledger.ledger.account import Ledger

__all__ = ["PLOT_IDS", "ledger_report_html"]

#: The plots of the page, in order; each is one ``<div id=...>`` holding a plotly figure.
PLOT_IDS = ("roofline", "memory-timeline", "memory-breakdown", "time-by-category",
            "time-by-module", "flops-by-phase")

_CATEGORY_COLORS = {"parameter": "#4c72b0", "gradient": "#dd8452",
                    "optimizer_state": "#55a868", "saved_activation": "#c44e52",
                    "temporary": "#8172b3"}


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise InputError("--html needs plotly: pip install 'tensorledger[report]'") from None
    return go


def _roofline(go: Any, ledger: Ledger) -> Any:
    ops = [o for o in ledger.roofline.ops if o.flops > 0 and o.bytes > 0]
    figure = go.Figure()
    for category in sorted({o.category for o in ops}):
        group = [o for o in ops if o.category == category]
        figure.add_trace(go.Scatter(
            x=[o.intensity_flop_per_byte for o in group],
            y=[o.attained_flop_per_s for o in group], mode="markers", name=category,
            customdata=[[o.op, o.module or "(root)", o.phase, o.flops, o.bytes] for o in group],
            hovertemplate=("%{customdata[0]}<br>module %{customdata[1]}<br>phase "
                           "%{customdata[2]}<br>%{customdata[3]:.4g} FLOPs, %{customdata[4]:.4g}"
                           " bytes<extra>" + category + "</extra>")))
    if ops:
        peak, bandwidth = ledger.peak_flop_per_s, ledger.memory_bandwidth_bytes_per_s
        ridge = peak / bandwidth
        low = min(min(o.intensity_flop_per_byte for o in ops) / 2, ridge / 4)
        high = max(max(o.intensity_flop_per_byte for o in ops) * 2, ridge * 4)
        figure.add_trace(go.Scatter(x=[low, ridge, high],
                                    y=[low * bandwidth, peak, peak], mode="lines",
                                    name=f"roof ({ledger.roofline.mfu_peak_key} peak)",
                                    line={"color": "black"}))
    figure.update_layout(title=f"Roofline on {ledger.hardware}: every op of the step",
                         xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
                         yaxis={"type": "log", "title": "attained FLOP/s"})
    return figure


def _memory_timeline(go: Any, ledger: Ledger) -> Any:
    points = ledger.memory.timeline.points
    figure = go.Figure()
    index = [p.index for p in points]
    for category, color in _CATEGORY_COLORS.items():
        figure.add_trace(go.Scatter(
            x=index, y=[getattr(p, f"{category}_bytes") / 1e9 for p in points],
            name=category.replace("_", " "), stackgroup="memory", line={"color": color},
            customdata=[[p.op, p.module or "(root)", p.phase, p.total_bytes / 1e9]
                        for p in points],
            hovertemplate=("after %{customdata[0]} (%{customdata[2]}, %{customdata[1]})<br>"
                           + category.replace("_", " ") + " %{y:.4g} GB of %{customdata[3]:.4g}"
                           " GB live<extra></extra>")))
    peak = ledger.memory.timeline.peak
    figure.add_annotation(x=peak.index, y=peak.total_bytes / 1e9, showarrow=True,
                          text=f"peak {peak.total_bytes / 1e9:.4g} GB ({peak.phase})")
    figure.update_layout(title="Memory over the step, stacked by category (GB)",
                         xaxis={"title": "op"}, yaxis={"title": "GB live"})
    return figure


def _bars(go: Any, title: str, names: list[str], values: list[float], unit: str) -> Any:
    figure = go.Figure(go.Bar(x=names, y=values, hovertemplate="%{x}: %{y:.4g} " + unit
                              + "<extra></extra>"))
    figure.update_layout(title=title, yaxis={"title": unit})
    return figure


def _tables(ledger: Ledger) -> str:
    from tensorledger.report.account import ledger_group

    console = Console(record=True, width=130, file=io.StringIO())
    console.print(ledger_group(ledger))
    return console.export_html(inline_styles=True, code_format="<pre>{code}</pre>")


def ledger_report_html(ledger: Ledger) -> str:
    """The whole page: tables (as the terminal shows them) and the plots of :data:`PLOT_IDS`."""
    go = _plotly()
    m = ledger.memory
    modules = sorted(ledger.roofline.by_module, key=lambda t: -t.time_s)[:15]
    figures = {
        "roofline": _roofline(go, ledger),
        "memory-timeline": _memory_timeline(go, ledger),
        "memory-breakdown": _bars(go, "Memory by category (GB)",
                                  ["parameters", "gradients", "optimizer state",
                                   "saved activations", "peak"],
                                  [m.params_bytes / 1e9, m.grads_bytes / 1e9,
                                   m.optimizer_state_bytes / 1e9,
                                   m.saved_activation_bytes / 1e9, m.peak_bytes / 1e9], "GB"),
        "time-by-category": _bars(go, f"Predicted time by category on {ledger.hardware} (ms)",
                                  [t.name for t in ledger.roofline.by_category],
                                  [t.time_s * 1e3 for t in ledger.roofline.by_category], "ms"),
        "time-by-module": _bars(go, "Predicted time by module, top 15 (ms)",
                                [t.name or "(root)" for t in modules],
                                [t.time_s * 1e3 for t in modules], "ms"),
        "flops-by-phase": _bars(go, "FLOPs by phase", [p.phase for p in ledger.trace.by_phase],
                                [float(p.flops) for p in ledger.trace.by_phase], "FLOPs"),
    }
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
