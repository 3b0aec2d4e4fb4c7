"""One-line summaries for the ``repr`` of result objects: what a person wants from ``print``.

A result holds every op or every point of a timeline; its ``repr`` names the figures that
matter (counts with thousands separators, FLOPs and bytes to four significant digits) and
leaves the rest to the fields and to the presentation layer.  Torch-free.

>>> summary("Trace", show_count(2252, "ops"), show_flops(7.179e12), show_count(3, "uncovered"))
'Trace(2,252 ops, 7.179e12 FLOPs, 3 uncovered)'
"""

from __future__ import annotations

from tensorledger.units import format_bytes, format_duration, format_flops

__all__ = ["show_bytes", "show_count", "show_flops", "show_time", "summary"]


def summary(name: str, *parts: str) -> str:
    """``name(part, part, ...)``, empty parts left out."""
    return f"{name}({', '.join(p for p in parts if p)})"


def show_count(value: int, noun: str) -> str:
    """``2,252 ops``."""
    return f"{value:,} {noun}"


def show_flops(value: float) -> str:
    """``7.179e12 FLOPs`` (four significant digits)."""
    return format_flops(value)


def show_bytes(value: float) -> str:
    """``9.745 GB`` (decimal units, four significant digits)."""
    return format_bytes(value, "auto")


def show_time(value: float) -> str:
    """``21.44 ms``."""
    return format_duration(value)
