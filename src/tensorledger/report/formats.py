"""Terminal views of numeric formats, casts and quantization comparisons."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.console import RenderableType
from rich.table import Table

from tensorledger.formats.spec import CodeValue, FormatProperties, ScalarCast
from tensorledger.units import format_bytes, format_sci

if TYPE_CHECKING:  # the comparison holds torch-derived numbers; this module imports no torch
    from tensorledger.formats.metrics import Comparison

__all__ = ["cast_view", "comparison_view", "format_view", "formats_table"]

View = list[RenderableType | str]


def _number(value: float | None, digits: int = 8) -> str:
    if value is None:
        return "—"
    return format_sci(value, digits) if value == value else "nan"


def _specials(p: FormatProperties) -> str:
    parts = [name for name, present in (("inf", p.has_inf), ("nan", p.has_nan)) if present]
    if not p.has_zero:
        parts.append("no 0")
    elif not p.has_negative_zero:
        parts.append("no -0")
    return " ".join(parts) or "none"


def formats_table(rows: Iterable[FormatProperties]) -> Table:
    """One row per format: layout, bias, range, epsilon, specials."""
    table = Table(title="Numeric formats (every figure computed from the bit layout)",
                  title_justify="left", header_style="bold")
    for column in ("format", "bits", "S/E/M", "bias", "max finite", "min normal",
                   "min subnormal", "epsilon", "decades", "specials"):
        table.add_column(column, justify="left" if column in ("format", "specials") else "right")
    for p in rows:
        table.add_row(p.name, str(p.bits), f"{p.sign_bits}/{p.exponent_bits}/{p.mantissa_bits}",
                      str(p.bias), _number(p.max_finite, 6), _number(p.min_normal, 6),
                      _number(p.min_subnormal, 6), _number(p.epsilon, 6),
                      f"{p.dynamic_range_decades:.2f}", _specials(p))
    return table


def format_view(p: FormatProperties, codes: Sequence[CodeValue] | None,
                finite: Sequence[float] | None) -> View:
    """Every property of one format and, for at most 8 bits, the value of every code."""
    view: View = [formats_table([p])]
    if p.aliases:
        view.append(f"aliases: {', '.join(p.aliases)}")
    if p.note:
        view.append(f"note: {p.note}")
    if codes is None or finite is None:
        view.append(f"{p.name} has 2^{p.sign_bits + p.exponent_bits + p.mantissa_bits} codes; "
                    "only formats of at most 8 bits are listed value by value")
        return view
    table = Table(title=f"Every code of {p.name}", title_justify="left", header_style="bold")
    for column in ("code", "bits", "value", "kind"):
        table.add_column(column, justify="right" if column != "kind" else "left")
    for row in codes:
        table.add_row(f"0x{row.code:02X}", row.bits, _number(row.value), row.kind)
    view.append(table)
    view.append(f"{len(finite)} distinct finite values: "
                + ", ".join(f"{v:g}" for v in finite))
    return view


def cast_view(c: ScalarCast) -> View:
    """A cast in one sentence, then its working."""
    code = "" if c.code is None else f" (code 0x{c.code:02X})"
    line = f"{c.value!r} → {_number(c.result)} in {c.format}{code}"
    if c.input_overflowed:
        return [f"{c.input_text} overflowed to {c.value!r} before the cast: it is beyond the "
                f"largest finite fp64 value (1.797e308), where the input is read; {line}"]
    if c.input_underflowed:
        return [f"{c.input_text} underflowed to {c.value!r} before the cast: it is below the "
                f"smallest positive fp64 value (4.9e-324), where the input is read; {line}"]
    if c.outcome == "underflow":
        line += (f": underflowed to zero (the smallest positive {c.format} value is "
                 f"{_number(c.min_positive)})")
    elif c.outcome == "overflow":
        line += f": overflowed (the largest finite {c.format} value is {_number(c.max_finite)})"
    elif c.outcome == "saturated":
        line += f": saturated to ± the largest finite value {_number(c.max_finite)}"
    elif c.outcome == "exact":
        line += ": exact"
    elif c.outcome == "rounded":
        rel = "" if c.rel_error is None else f", relative error {format_sci(c.rel_error, 3)}"
        line += f": rounded to nearest even (error {format_sci(c.abs_error, 3)}{rel})"
    else:
        line += ": NaN in, NaN (or 0, where the format has no NaN) out"
    return [line]


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.2g}%"


def comparison_view(comparison: Comparison) -> View:
    """One row per scheme: storage, then error."""
    shape = "×".join(str(d) for d in comparison.shape)
    table = Table(title=f"Quantization of {comparison.source} ({shape}, fp32 "
                        f"{format_bytes(comparison.fp32_bytes, 'auto-binary')})",
                  title_justify="left", header_style="bold")
    for column in ("scheme", "element", "block", "scale", "bits", "packed", "MSE", "SQNR dB",
                   "mean rel err", "underflow", "saturated"):
        table.add_column(column, justify="left" if column in ("scheme", "element", "scale")
                         else "right")
    for r in comparison.results:
        e = r.error
        table.add_row(r.scheme, r.element_format,
                      "×".join(str(b) for b in r.block_shape) or "tensor" if r.scale_format
                      else "—", r.scale_format or "—", f"{r.bits_per_value:.4g}",
                      format_bytes(r.packed_bytes, "auto-binary", 3), format_sci(e.mse, 4),
                      f"{e.sqnr_db:.2f}", format_sci(e.mean_rel_error, 3),
                      _percent(e.underflow_fraction),
                      _percent(r.saturated_fraction))
    best = comparison.best
    return [table, "bits: per value, scales included; packed: bytes of codes and scales",
            f"best SQNR: {best.scheme} at {best.error.sqnr_db:.2f} dB, "
                   f"{best.bits_per_value:.4g} bits per value "
                   f"(rounding: {comparison.rounding}; blocks along axis {comparison.axis})"]
