"""What every command shares: the console, ``--json`` output and option helpers."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console, RenderableType

from tensorledger.report.json import to_json

__all__ = ["JSON_HELP", "console", "emit"]

JSON_HELP = "Print one JSON document on stdout instead of tables (keys carry their units)."


def console() -> Console:
    """A console on stdout; wide enough for tables when stdout is not a terminal."""
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "120"))
    return Console(width=width, highlight=False, soft_wrap=False)


def emit(command: str, result: Any, as_json: bool, *renderables: RenderableType | str) -> None:
    """Print ``result`` as JSON, or the renderables as tables and lines."""
    if as_json:
        sys.stdout.write(to_json(command, result) + "\n")
        return
    out = console()
    for renderable in renderables:
        out.print(renderable)
