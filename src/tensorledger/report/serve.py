"""Terminal view and plot of ``tensorledger serve``: the working, a table by batch, the ridge."""

from __future__ import annotations

from pathlib import Path

from rich.console import RenderableType
from rich.table import Table

from tensorledger.napkin.serving import Serving
from tensorledger.report.plots import new_figure, save_figure
from tensorledger.report.terminal import steps_table
from tensorledger.units import format_bytes, format_duration

__all__ = ["serve_figure", "serve_view", "write_serve_plot"]

View = list[RenderableType | str]


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def serve_view(result: Serving) -> View:
    """The working, then one row per batch that fits: TTFT, TPOT, what bounds it, tokens/s."""
    layout = f"{result.count} × {result.hardware}" + (
        f" (tp {result.tp}, {result.replicas} replica{'s' * (result.replicas > 1)})"
        if result.tp > 1 or result.count > 1 else "")
    table = Table(title=f"Serving {result.model} on {layout}: {result.weights_format} weights, "
                        f"{result.kv_dtype} KV cache, context {result.context:,}",
                  title_justify="left", header_style="bold")
    for number, name in enumerate(["batch", "TTFT (prefill)", "TPOT (decode)", "bound",
                                   "tokens/s a chip", "tokens/s a user"]):
        table.add_column(name, justify="right" if number != 3 else "left")
    for row in result.rows:
        if row.fits:
            table.add_row(f"{row.batch:,}", format_duration(row.ttft_s),
                          format_duration(row.tpot_s), row.bound,
                          _rate(row.tokens_per_s_per_chip), _rate(row.tokens_per_s_per_user))
    first = result.rows[0]
    ridge_context = ("decode never turns compute-bound at this context: each sequence's cache "
                     "adds more bytes than its FLOPs can hide"
                     if result.ridge_batch_at_context is None else
                     f"with the cache at this context: batch ≈ "
                     f"{result.ridge_batch_at_context:,.0f}")
    return [
        steps_table(result.steps, f"Serving on a napkin ({result.attention} attention, "
                                  f"{result.kv_bytes_per_token:,} KV bytes a token)"),
        table,
        f"≈ {result.max_batch:,} sequences of {result.context:,} tokens fit a replica "
        f"({result.max_sequences:,} on {result.count} chip{'s' * (result.count > 1)}; "
        f"{format_bytes(result.kv_budget_bytes_per_chip, 'auto')} of KV a chip at "
        f"memory utilization {result.memory_utilization:g}, blocks of {result.block_size})",
        f"batch 1 decode is {first.bound}-bound: {format_duration(first.tpot_s)} a token "
        f"= {format_bytes(first.decode_bytes, 'auto')} / "
        f"{format_bytes(result.expected_bandwidth_bytes_per_s, 'auto')}/s expected bandwidth",
        f"ridge (roofline, datasheet peak / bandwidth): batch ≈ {result.ridge_batch:,.0f} "
        f"where the weights' matmuls turn compute-bound; {ridge_context}",
        *(f"note: {note}" for note in result.notes),
    ]


def serve_figure(result: Serving) -> object:
    """Tokens/s a chip against batch (log-log), memory- and compute-bound points apart, the
    batches past the memory budget dashed, the ridge and the largest batch marked."""
    figure, axes = new_figure(8, 5)
    fits = [r for r in result.rows if r.fits]
    beyond = [r for r in result.rows if not r.fits]
    axes.plot([r.batch for r in fits], [r.tokens_per_s_per_chip for r in fits], color="C0",
              linewidth=1.5, label="tokens/s a chip (fits the KV budget)", zorder=3)
    if beyond:
        joined = [fits[-1], *beyond] if fits else beyond
        axes.plot([r.batch for r in joined], [r.tokens_per_s_per_chip for r in joined],
                  color="C0", linewidth=1.2, linestyle=":",
                  label="past the KV budget (does not fit)", zorder=2)
    for bound, marker, colour in (("memory", "o", "C0"), ("compute", "s", "C3")):
        points = [r for r in result.rows if r.bound == bound]
        if points:
            axes.plot([r.batch for r in points], [r.tokens_per_s_per_chip for r in points],
                      marker=marker, linestyle="", color=colour, markersize=5,
                      label=f"{bound}-bound decode", zorder=4)
    axes.axvline(result.ridge_batch, color="C2", linestyle="--", linewidth=1.2,
                 label=f"ridge ≈ {result.ridge_batch:,.0f} (datasheet peak / bandwidth)")
    axes.axvline(result.max_batch, color="0.4", linestyle="-.", linewidth=1.0,
                 label=f"largest batch that fits: {result.max_batch:,}")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("batch (sequences decoded together on one replica)")
    axes.set_ylabel("output tokens/s a chip (expected)")
    axes.set_title(f"Decode of {result.model} on {result.hardware}: {result.weights_format} "
                   f"weights, {result.kv_dtype} KV, context {result.context:,}", fontsize=9)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    return figure


def write_serve_plot(result: Serving, path: str | Path) -> Path:
    """Write :func:`serve_figure` to ``path`` (.png, .svg or .pdf), whole or not at all."""
    return save_figure(serve_figure(result), path)
