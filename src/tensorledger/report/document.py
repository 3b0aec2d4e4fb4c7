"""The results as a document's HTML: tables as ``<table>`` (caption, header row, body), lines
of prose as paragraphs, the ledger's headline (the answers a reader came for) first, and the
plots as inline SVG.  Jupyter's ``_repr_html_`` of every result and the head of
``account --html`` are drawn here.  Formats; computes nothing.

A notebook display is one fragment (no ``<html>`` page, no script): its plots are static SVG
drawn by matplotlib, so a displayed ledger weighs tens of kB, not the megabytes of an inlined
plotly bundle, and renders in any front end, trusted or not.
"""

from __future__ import annotations

import html
import io
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from tensorledger.errors import TensorLedgerError
from tensorledger.units import format_bytes, format_duration, format_sci

if TYPE_CHECKING:
    from tensorledger.ledger.account import Ledger
    from tensorledger.trace.records import Trace

__all__ = ["HEADLINE_ID", "STYLE", "headline_html", "headline_rows", "ledger_display_html",
           "result_display_html", "table_html", "trace_display_html", "view_html"]

View = list[RenderableType | str]

#: The id of the headline block: the first block of the report and of a ledger's display.
HEADLINE_ID = "headline"

#: The CSS of the tables, the headline and the plots (scoped to ``.tensorledger``).
STYLE = ("<style>.tensorledger table{border-collapse:collapse;margin:0.6em 0 1.2em}"
         ".tensorledger caption{text-align:left;font-weight:bold;padding:0.2em 0}"
         ".tensorledger th,.tensorledger td{border-bottom:1px solid #ddd;padding:0.15em 0.7em;"
         "text-align:right}.tensorledger th:first-child,.tensorledger td:first-child"
         "{text-align:left}.tensorledger th{border-bottom:2px solid #888}"
         ".tensorledger dl{display:grid;grid-template-columns:max-content auto;gap:0.2em 1em}"
         ".tensorledger dt{font-weight:bold}.tensorledger dd{margin:0}"
         ".tensorledger svg{max-width:100%;height:auto}</style>")


def _plain(part: object) -> str:
    """What rich would print of a cell, title or line, without its styles."""
    if part is None:
        return ""
    if isinstance(part, Text):
        return part.plain
    if isinstance(part, str):
        try:
            return Text.from_markup(part).plain
        except Exception:  # not markup after all: rich would fail too; show it as written
            return part
    if hasattr(part, "__rich_console__") and not isinstance(part, Table):
        text = getattr(part, "text", None)  # TailText and the like: the whole text
        if isinstance(text, str):
            return text
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(part)
    return console.export_text().rstrip("\n")


def _cell(part: object) -> str:
    return html.escape(_plain(part))


def table_html(table: Table) -> str:
    """A rich table as a document's table: its title the caption, its headers a header row."""
    caption = f"<caption>{_cell(table.title)}</caption>" if table.title else ""
    head = "".join(f"<th scope='col'>{_cell(c.header)}</th>" for c in table.columns)
    columns = [list(c.cells) for c in table.columns]
    rows = max((len(c) for c in columns), default=0)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c[i]) if i < len(c) else ''}</td>"
                                    for c in columns) + "</tr>" for i in range(rows))
    caption_below = f"<p>{_cell(table.caption)}</p>" if table.caption else ""
    return (f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + caption_below)


def view_html(view: Iterable[RenderableType | str]) -> str:
    """A terminal view (tables and lines) as HTML: tables as tables, lines as paragraphs."""
    parts = []
    for part in view:
        if isinstance(part, Table):
            parts.append(table_html(part))
        elif isinstance(part, str | Text) or hasattr(part, "text"):
            parts.append(f"<p>{_cell(part)}</p>")
        else:  # any other renderable: as the terminal draws it
            parts.append(f"<pre>{_cell(part)}</pre>")
    return "\n".join(parts)


def headline_rows(ledger: Ledger) -> list[tuple[str, str]]:
    """(question, answer) for the headline: the fit and its margin, the step time expected and
    at the roofline bound, MFU, the cluster's tokens/s, and the run's days and cost."""
    rows: list[tuple[str, str]] = []
    fit = ledger.memory.fit
    peak = format_bytes(ledger.memory.peak_bytes, "auto")
    if fit is None:
        rows.append(("memory", f"peak {peak} per device (no device to fit it on)"))
    else:
        if fit.budget_bytes is not None:
            against = f"the budget of {format_bytes(fit.usable_bytes, 'auto')} given"
        else:
            against = (f"{format_bytes(fit.usable_bytes, 'auto')} usable: "
                       f"{format_bytes(fit.device_memory_bytes, 'auto')} less a reserve of "
                       f"{format_bytes(fit.reserve_bytes, 'auto')}")
        verdict = (f"fits, {format_bytes(fit.margin_bytes, 'auto')} to spare"
                   if fit.fits_replicated
                   else f"does not fit, {format_bytes(-fit.margin_bytes, 'auto')} over")
        rows.append(("fits?", f"{verdict}: peak {format_bytes(fit.replica_peak_bytes, 'auto')}"
                              f" per device against {against} ({fit.hardware})"))
    rows.append(("step time", f"{format_duration(ledger.step_time_s)} expected, "
                              f"{format_duration(ledger.roofline.ideal_time_s)} at the roofline "
                              "bound"))
    rows.append(("MFU", f"{format_sci(ledger.mfu, 3)} expected, "
                        f"{format_sci(ledger.roofline.ideal_model_mfu, 3)} at the bound "
                        f"(against the dense {ledger.roofline.mfu_peak_key} peak)"))
    if ledger.roofline.recomputed_flops:
        rows.append(("HFU (the recomputed forward counted)",
                     f"{format_sci(ledger.hfu, 3)} expected, "
                     f"{format_sci(ledger.roofline.ideal_mfu, 3)} at the bound"))
    rows.append(("tokens/s", f"{ledger.cluster_tokens_per_s:,.0f} tokens/s on "
                             f"{ledger.count} × {ledger.hardware}"
                 + (f", {ledger.cluster_bound_tokens_per_s:,.0f} tokens/s at the bound"
                    if ledger.cluster_bound_tokens_per_s else "")))
    r = ledger.run
    if r is None:
        rows.append(("the run", "not asked: give the run's tokens (--tokens) for its days "
                                "and cost"))
    else:
        cost = (f", ${r.cost_usd:,.2f} at ${r.usd_per_device_hour:g} per device-hour"
                if r.cost_usd is not None and r.usd_per_device_hour is not None else
                " (cost: give the price per device-hour)")
        rows.append(("the run", f"{format_sci(r.tokens)} tokens: {r.days:,.4g} days, "
                                f"{r.device_hours:,.4g} device-hours{cost}"))
    return rows


def headline_html(ledger: Ledger) -> str:
    """The headline as a definition list in ``<section id="headline">``."""
    items = "".join(f"<dt>{html.escape(q)}</dt><dd>{html.escape(a)}</dd>"
                    for q, a in headline_rows(ledger))
    return f"<section id='{HEADLINE_ID}'><dl>{items}</dl></section>"


#: An artist with more vertices than this is drawn into the SVG as an image (at 100 dpi).
_RASTER_VERTICES = 2000


def _svg(figure: Any) -> str:
    """A matplotlib figure as inline SVG: text kept as text, no metadata, no XML prolog."""
    from matplotlib import pyplot, rc_context

    for axes in figure.axes:  # a fill over thousands of ops as an image: kB, not MB
        for artist in [*axes.collections, *axes.lines]:
            paths: list[Any] = getattr(artist, "get_paths", list)()
            vertices = sum(len(p.vertices) for p in paths) if paths else len(
                getattr(artist, "get_xdata", list)())
            if vertices > _RASTER_VERTICES:
                artist.set_rasterized(True)
    buffer = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "tensorledger"}):
        figure.savefig(buffer, format="svg", dpi=100, bbox_inches="tight",
                       metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    pyplot.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _ledger_svgs(ledger: Ledger) -> list[tuple[str, str]]:
    """(id, svg) of the roofline and memory-over-the-step plots; none without matplotlib, and
    no roofline for a chip the catalog no longer knows."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return []
    from tensorledger.hardware import get_hardware
    from tensorledger.report.memory import memory_figure
    from tensorledger.report.roofline import roofline_figure

    plots = []
    try:
        chip = get_hardware(ledger.hardware)
    except TensorLedgerError:
        chip = None
    if chip is not None:
        plots.append(("roofline", _svg(roofline_figure(ledger.roofline, chip))))
    plots.append(("memory-timeline", _svg(memory_figure(ledger.memory))))
    return plots


def _figures_html(plots: list[tuple[str, str]]) -> str:
    return "\n".join(f"<figure id='{name}'>{svg}</figure>" for name, svg in plots)


def ledger_display_html(ledger: Ledger) -> str:
    """Jupyter's view of a ledger: the headline, the tables, the roofline and memory plots as
    SVG; one fragment with no script."""
    from tensorledger.report.account import account_view

    title = html.escape(f"{ledger.model} on {ledger.count} × {ledger.hardware}")
    return (f"<div class='tensorledger'>{STYLE}<h3>{title}</h3>\n{headline_html(ledger)}\n"
            f"{view_html(account_view(ledger))}\n{_figures_html(_ledger_svgs(ledger))}</div>")


def result_display_html(result: Any) -> str:
    """Jupyter's view of any other result: the tables its command prints, and for a memory
    ledger its plot over the step."""
    from tensorledger.memory.ledger import MemoryLedger
    from tensorledger.report.render import render

    plots: list[tuple[str, str]] = []
    if isinstance(result, MemoryLedger):
        try:
            from tensorledger.report.memory import memory_figure

            plots.append(("memory-timeline", _svg(memory_figure(result))))
        except TensorLedgerError:  # no matplotlib: the tables alone
            pass
    return (f"<div class='tensorledger'>{STYLE}{view_html(render(result).renderables)}\n"
            f"{_figures_html(plots)}</div>")


def trace_display_html(trace: Trace) -> str:
    """Jupyter's view of a raw trace: its totals and the ops no cost rule covered."""
    from rich.table import Table

    totals = Table(title=f"Trace on {trace.device}: attention counted {trace.attention_convention}")
    for column in ("ops", "FLOPs", "FLOPs, causal attention halved", "bytes moved",
                   "uncovered ops"):
        totals.add_column(column)
    totals.add_row(f"{len(trace.records):,}", format_sci(trace.flops),
                   format_sci(trace.flops_causal_halved), format_bytes(trace.bytes, "auto"),
                   f"{len(trace.uncovered):,}")
    view: View = [totals]
    if trace.uncovered:
        uncovered = Table(title="Ops with no cost rule (counted as 0 FLOPs, 0 bytes)")
        uncovered.add_column("op")
        uncovered.add_column("calls")
        for op, calls in trace.uncovered.items():
            uncovered.add_row(op, f"{calls:,}")
        view.append(uncovered)
    return f"<div class='tensorledger'>{STYLE}{view_html(view)}</div>"
