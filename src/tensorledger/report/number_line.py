"""Number-line plots of the values of small formats (matplotlib, imported when called)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from tensorledger.errors import ConfigError, InputError
from tensorledger.formats.spec import finite_values, resolve_format
from tensorledger.report.files import write_atomic

__all__ = ["number_line"]

_KINDS = {".png": "png", ".svg": "svg"}


def number_line(formats: Sequence[str], path: str | Path, *, title: str | None = None) -> Path:
    """Draw every finite value of each format (at most 8 bits) on one row, and write the figure
    to ``path`` (.png or .svg) whole or not at all.  A symmetric-log axis shows fp8's range."""
    target = Path(path)
    kind = _KINDS.get(target.suffix.lower())
    if kind is None:
        raise InputError(f"cannot plot to {target.name!r}; expected a .png or .svg file")
    resolved = [resolve_format(name) for name in formats]
    rows = [(fmt.name, finite_values(fmt)) for fmt in resolved]  # refuses wide formats
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plots need matplotlib (pip install 'tensorledger[plot]')") from None
    figure, axes = plt.subplots(figsize=(10, 0.7 * len(rows) + 1.2))
    wide = max(max(abs(v) for v in values) for _, values in rows) > 64
    for index, (_, values) in enumerate(rows):
        axes.scatter(values, [index] * len(values), s=12, marker="|" if wide else "o")
        axes.annotate(f"{len(values)} values", (values[-1], index), xytext=(6, -3),
                      textcoords="offset points", fontsize=8)
    if wide:
        smallest = min(min(abs(v) for v in values if v) for _, values in rows)
        axes.set_xscale("symlog", linthresh=smallest)
    axes.set_yticks(range(len(rows)), [name for name, _ in rows])
    axes.set_ylim(-0.7, len(rows) - 0.3)
    axes.grid(axis="x", alpha=0.3)
    axes.set_title(title or "Every finite value, by format")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format=kind)
    plt.close(figure)
    return write_atomic(target, buffer.getvalue())
