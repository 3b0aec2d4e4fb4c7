"""Number-line plots of the values of small formats (matplotlib, imported when called)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tensorledger.errors import ConfigError, InputError
from tensorledger.formats.spec import finite_values, resolve_format
from tensorledger.report.files import write_atomic

__all__ = ["number_line", "number_line_figure"]

_KINDS = {".png": "png", ".svg": "svg"}


def number_line_figure(formats: Sequence[str], *, title: str | None = None) -> Any:
    """Every finite value of each format (at most 8 bits) on one row, as a matplotlib figure.
    A symmetric-log axis shows fp8's range: linear up to the smallest positive value, and a
    tick at each power of ten far enough from zero that no two labels touch."""
    resolved = [resolve_format(name) for name in formats]
    rows = [(fmt.name, finite_values(fmt)) for fmt in resolved]  # refuses wide formats
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        raise ConfigError("plots need matplotlib (pip install 'tensorledger[plot]')") from None
    figure, axes = plt.subplots(figsize=(11, 0.7 * len(rows) + 1.3), layout="constrained")
    wide = max(max(abs(v) for v in values) for _, values in rows) > 64
    for index, (_, values) in enumerate(rows):
        axes.scatter(values, [index] * len(values), s=12, marker="|" if wide else "o")
    heading = title or "Every finite value, by format"
    if wide:
        smallest = min(min(abs(v) for v in values if v) for _, values in rows)
        largest = max(max(abs(v) for v in values) for _, values in rows)
        axes.set_xscale("symlog", linthresh=smallest)
        axes.xaxis.set_major_locator(FixedLocator(_symlog_ticks(smallest, largest)))
        axes.xaxis.set_minor_locator(NullLocator())
        heading += f" (symmetric log axis, linear within ±{smallest:.3g})"
    axes.set_yticks(range(len(rows)), [f"{name}\n{len(values)} values" for name, values in rows])
    axes.set_ylim(-0.7, len(rows) - 0.3)
    axes.grid(axis="x", alpha=0.3)
    axes.set_title(heading)
    return figure


def _symlog_ticks(linthresh: float, largest: float) -> list[float]:
    """0 and ±10^k for every k from the first power of ten at least two decades' width from
    zero on a symlog axis (its linear part is one decade wide) up to past ``largest``; every
    other power when there are more than eight a side, so that labels never crowd."""
    low = math.ceil(math.log10(linthresh) + 1)  # 10^low sits ≥ 2 decade widths from 0
    high = math.ceil(math.log10(largest))
    powers = list(range(low, high + 1))
    if len(powers) > 8:
        powers = [k for k in powers if (high - k) % 2 == 0]
    positive = [10.0**k for k in powers]
    return [-x for x in reversed(positive)] + [0.0] + positive


def number_line(formats: Sequence[str], path: str | Path, *, title: str | None = None) -> Path:
    """Write :func:`number_line_figure` to ``path`` (.png or .svg), whole or not at all."""
    target = Path(path)
    kind = _KINDS.get(target.suffix.lower())
    if kind is None:
        raise InputError(f"cannot plot to {target.name!r}; expected a .png or .svg file")
    figure = number_line_figure(formats, title=title)
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format=kind, dpi=150)
    plt.close(figure)
    return write_atomic(target, buffer.getvalue())
