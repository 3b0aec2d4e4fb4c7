"""Rich renderables for the terminal, built from core results."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table

from tensorledger.napkin.arithmetic import Step
from tensorledger.units import (
    format_bytes,
    format_count,
    format_duration,
    format_flop_rate,
    format_sci,
)

__all__ = ["format_value", "steps_table"]


def format_value(value: float, unit: str) -> str:
    """A number with its unit word (see ``napkin.Step.unit``), the way a person writes it."""
    if unit == "flops":
        return f"{format_sci(value)} FLOPs"
    if unit == "flop_per_s":
        return f"{format_flop_rate(value)} ({format_sci(value)} FLOP/s)"
    if unit == "flops_per_day":
        return f"{format_sci(value)} FLOPs/day"
    if unit == "days":
        return format_duration(value * 86400.0)
    if unit == "s":
        return format_duration(value)
    if unit == "bytes":
        return f"{format_bytes(value, 'auto')} ({format_bytes(value, 'auto-binary')})"
    if unit == "bytes_per_param":
        return f"{value:g} bytes/param"
    if unit == "params":
        return f"{format_count(value)} params ({format_sci(value)})"
    if unit == "devices":
        return f"{value:,.0f}"
    return f"{value:.4g} {unit}"


def steps_table(steps: Iterable[Step], title: str | None = None) -> Table:
    """The working of a napkin answer: one row per step (label, formula, value)."""
    table = Table(title=title, show_header=True, header_style="bold", title_justify="left")
    table.add_column("step")
    table.add_column("formula", style="dim")
    table.add_column("value", justify="right")
    for step in steps:
        table.add_row(step.label, step.formula, format_value(step.value, step.unit))
    return table
