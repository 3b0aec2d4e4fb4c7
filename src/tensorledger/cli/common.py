"""What every command shares: the console, ``--json`` output and option helpers.

Numbers on the command line: :func:`integer_parser` and :func:`real_parser` make ``parser=``
functions for ``typer.Option`` that read ASCII digits only, refuse NaN and infinities and bound
the value, quoting the user's own text in the refusal::

    batch: Annotated[int, typer.Option(parser=integer_parser(1, MAX_INT64))] = 1

:func:`harden_numbers` is the net under every other ``int`` or ``float`` option of the app:
after typer has read the value it refuses an integer beyond int64 and a float that is NaN or
infinite, naming the option, before the command sees it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console, RenderableType

from tensorledger.errors import UnitError
from tensorledger.report.json import to_json
from tensorledger.units import MAX_INT64, NUMBER_RULES, parse_integer, parse_real

__all__ = ["JSON_HELP", "NUMBER_HELP", "Quiet", "console", "emit", "emit_with_plot",
           "harden_numbers", "integer_parser", "progress", "quiet_stdout", "real_parser"]

_Result = TypeVar("_Result")

JSON_HELP = "Print one JSON document on stdout instead of tables (keys carry their units)."
NUMBER_HELP = f"Numbers: {NUMBER_RULES}; NaN and infinities are refused."


Quiet = Annotated[bool, typer.Option("--quiet", "-q", help=(
    "No progress on stderr (it shows only for work over a second, on a terminal, never with "
    "--json)."))]


@contextlib.contextmanager
def progress(quiet: bool = False, as_json: bool = False, *, delay_s: float = 1.0,
             stream: typing.TextIO | None = None) -> Iterator[Callable[[str], None]]:
    """A progress callback for the core's stages: a spinner on stderr naming the current
    stage, shown once the work has run ``delay_s``, and only when stderr is a terminal and
    neither ``--quiet`` nor ``--json`` was given (then the callback does nothing)."""
    target = stream or sys.stderr
    if quiet or as_json or not target.isatty():
        yield lambda _: None
        return
    status = Console(file=target).status("working ...", spinner="dots")
    lock = threading.Lock()
    state = {"stage": "working", "shown": False, "done": False}

    def show() -> None:
        with lock:
            if not state["done"]:
                status.update(f"{state['stage']} ...")
                status.start()
                state["shown"] = True

    def say(stage: str) -> None:
        with lock:
            state["stage"] = stage
            if state["shown"]:
                status.update(f"{stage} ...")

    timer = threading.Timer(delay_s, show)
    timer.daemon = True
    timer.start()
    try:
        yield say
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["shown"]:
                status.stop()


def integer_parser(minimum: int = -MAX_INT64 - 1, maximum: int = MAX_INT64
                   ) -> Callable[[Any], int]:
    """A ``parser=`` for a whole-number option: ASCII digits, ``minimum`` to ``maximum``."""

    def parse(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= maximum:
            return value  # a default
        return parse_integer(value if isinstance(value, int) else str(value), what="",
                             minimum=minimum, maximum=maximum)

    return parse


def real_parser(minimum: float = -math.inf, maximum: float = math.inf, *,
                minimum_open: bool = False) -> Callable[[Any], float]:
    """A ``parser=`` for a number option: finite, ASCII digits, ``minimum`` to ``maximum``."""

    def parse(value: Any) -> float:
        return parse_real(value if isinstance(value, float | int) else str(value), what="",
                          minimum=minimum, maximum=maximum, minimum_open=minimum_open)

    return parse


def _number_kind(param: Any) -> type | None:
    """``int`` or ``float`` when the parameter is declared as one (or as one or None)."""
    descriptor = getattr(param, "type_descriptor", None)
    info = getattr(descriptor, "parameter_info", None)
    if getattr(info, "parser", None) is not None:
        return None  # the command reads it itself
    annotation = getattr(descriptor, "annotation", None)
    kinds = set(typing.get_args(annotation)) - {type(None)} or {annotation}
    if kinds == {int}:
        return int
    if kinds == {float}:
        return float
    return None


def _option_name(param: Any) -> str:
    opts = [o for o in getattr(param, "opts", []) if isinstance(o, str)]
    return max(opts, key=len) if opts else str(getattr(param, "name", "value")).upper()


def _bounded(kind: type, previous: Callable[..., Any] | None) -> Callable[..., Any]:
    def check(ctx: Any, param: Any, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            name = _option_name(param)
            if kind is int and not -MAX_INT64 - 1 <= value <= MAX_INT64:
                raise UnitError(f"{name} {str(value)[:30]!r}{'…' if len(str(value)) > 30 else ''}"
                                " is out of range; expected a whole number within int64 "
                                "(at most 9223372036854775807)")
            if kind is float and not math.isfinite(value):
                raise UnitError(f"{name} {value!r} is not finite; expected a finite number in "
                                f"{NUMBER_RULES}")
        return previous(ctx, param, value) if previous is not None else value

    return check


def harden_numbers(command: Any) -> Any:
    """Bound every ``int``/``float`` parameter of ``command`` and its subcommands that has no
    parser of its own (int64, finite); done once, where the app is built."""
    stack = [command]
    while stack:
        current = stack.pop()
        for param in getattr(current, "params", []):
            kind = _number_kind(param)
            if kind is not None:
                param.callback = _bounded(kind, param.callback)
        stack.extend(getattr(current, "commands", {}).values())
    return command


def console() -> Console:
    """A console on stdout; wide enough for tables when stdout is not a terminal."""
    width = None
    if not sys.stdout.isatty():
        columns = os.environ.get("COLUMNS", "120").strip()
        width = int(columns) if columns.isascii() and columns.isdigit() \
            and 20 <= int(columns) <= 1000 else 120
    return Console(width=width, highlight=False, soft_wrap=False)


def emit(command: str, result: Any, as_json: bool, *renderables: RenderableType | str) -> None:
    """Print ``result`` as JSON, or the renderables as tables and lines.

    The output is rendered whole before a byte is written, so an error while rendering leaves
    stdout empty; a reader that goes away (``| head``) raises :class:`BrokenPipeError`, which
    ``main`` ends quietly.
    """
    if as_json:
        text = to_json(command, result) + "\n"
    else:
        out = console()
        with out.capture() as captured:
            for renderable in renderables:
                out.print(renderable)
        text = captured.get()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (| head): end quietly, as a success
        quiet_stdout()
        raise typer.Exit(0) from None


def emit_with_plot(command: str, result: _Result, as_json: bool,
                   views: list[RenderableType | str], plot: str | None,
                   write_plot: Callable[[_Result, str], Path]) -> None:
    """:func:`emit`, after writing the ``--plot`` asked for (if any) with ``write_plot``; the
    views end with the path it was written to."""
    if plot is not None:
        views.append(f"plot written to {write_plot(result, plot)}")
    emit(command, result, as_json, *views)


def quiet_stdout() -> None:
    """The reader of stdout went away (``| head``): send what is still buffered nowhere, so
    the interpreter's last flush raises nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (a test)
        pass
