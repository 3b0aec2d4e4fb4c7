"""Figures written whole or not at all: matplotlib is imported only when a plot is asked for."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tensorledger.errors import InputError
from tensorledger.report.files import check_output_path, write_atomic

__all__ = ["FIGURE_SUFFIXES", "check_figure_path", "new_figure", "save_figure"]

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure_path(path: str | Path) -> Path:
    """Refuse a figure path we cannot write before any work is done."""
    return check_output_path(path, FIGURE_SUFFIXES)


def new_figure(width_in: float = 8.0, height_in: float = 5.5) -> tuple[Any, Any]:
    """A figure and axes on the non-interactive Agg backend."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("plots need matplotlib: pip install 'tensorledger[plot]'") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot.subplots(figsize=(width_in, height_in), layout="constrained")


def save_figure(figure: Any, path: str | Path) -> Path:
    target = check_figure_path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=target.suffix.lower().lstrip("."), dpi=150)
    from matplotlib import pyplot

    pyplot.close(figure)
    return write_atomic(target, buffer.getvalue())
