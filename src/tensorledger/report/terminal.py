"""Rich renderables for the terminal, built from core results."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tensorledger.napkin.arithmetic import Step
from tensorledger.units import (
    format_bytes,
    format_count,
    format_duration,
    format_flop_rate,
    format_sci,
)

__all__ = ["TailText", "format_value", "steps_table", "tail_cut"]


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


def tail_cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut from the front: module paths differ at their
    end (``blocks.{0..11}.attention.query``, ``.key``), so the end is what is kept.

    >>> tail_cut("TransformerLM.blocks.{0..11}.attention.query ×12", 30)
    '…{0..11}.attention.query ×12'
    >>> tail_cut("TransformerLM.blocks.{0..11}.attention.query ×12", 24)
    '…attention.query ×12'
    >>> tail_cut("TransformerLM.head", 30)
    'TransformerLM.head'
    """
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    kept = text
    while cell_len(kept) > width - 1:
        kept = kept[1:]
    # start the kept tail at a path component where one is near, not mid-word (nor inside a
    # group's braces, ``{0..11}``)
    closing, opening = kept.find("}"), kept.find("{")
    depth = 1 if closing >= 0 and (opening < 0 or closing < opening) else 0
    for at, char in enumerate(kept[:len(kept) // 2]):
        depth += (char == "{") - (char == "}")
        if char == "." and depth == 0:
            return "…" + kept[at + 1:]
    return "…" + kept


class TailText:
    """A table cell that, when its column is narrower than the text, keeps the text's end
    (:func:`tail_cut`) where rich would keep its start."""

    def __init__(self, text: str, min_width: int = 20) -> None:
        self.text = text
        self.min_width = min_width

    def __str__(self) -> str:
        return self.text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        full = cell_len(self.text)
        return Measurement(min(full, self.min_width), full)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield Text(tail_cut(self.text, options.max_width), no_wrap=True, overflow="crop",
                   end="")
