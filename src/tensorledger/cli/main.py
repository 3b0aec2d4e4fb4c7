"""Entry point: builds the app, runs it, and turns every user error into one line + exit 2."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

import typer

from tensorledger.cli import account as account_commands
from tensorledger.cli import bench as bench_commands
from tensorledger.cli import checkpoint as checkpoint_commands
from tensorledger.cli import formats as formats_commands
from tensorledger.cli import hardware as hardware_commands
from tensorledger.cli import memory as memory_commands
from tensorledger.cli import models as models_commands
from tensorledger.cli import napkin as napkin_commands
from tensorledger.cli import plan as plan_commands
from tensorledger.cli import roofline as roofline_commands
from tensorledger.cli import serve as serve_commands
from tensorledger.cli import trace as trace_commands
from tensorledger.cli.common import harden_numbers, quiet_stdout
from tensorledger.errors import TensorLedgerError

__all__ = ["app", "build_command", "main"]

#: The longest error line printed; a 5000-character argument is shown shortened.
MAX_ERROR_CHARS = 400
_NEGATIVE_NUMBER = re.compile(r"-(?:[0-9.]|inf|nan)", re.IGNORECASE)

app = typer.Typer(
    name="tensorledger",
    help="Resource accounting for language-model training: FLOPs, bytes, memory and time.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for _module in (account_commands, napkin_commands, hardware_commands, models_commands,
                trace_commands, memory_commands, roofline_commands, formats_commands,
                bench_commands, plan_commands, checkpoint_commands, serve_commands):
    _module.register(app)


def _error(message: str) -> int:
    first_line = " ".join(str(message).split()).replace(": Value error, ", ": ")
    if len(first_line) > MAX_ERROR_CHARS:
        first_line = first_line[:MAX_ERROR_CHARS - 1] + "…"
    print(f"tensorledger: error: {first_line}", file=sys.stderr)
    return 2


def build_command() -> Any:
    """The click command of the app, with every number option bounded (see ``harden_numbers``).
    Tests enumerate its commands and options."""
    return harden_numbers(typer.main.get_command(app))


def _negative_number_hint(error: Exception) -> str:
    name = getattr(error, "option_name", None)
    if type(error).__name__ == "NoSuchOption" and isinstance(name, str) \
            and _NEGATIVE_NUMBER.match(name):
        return (f"{name} looks like a negative number, which is read as an option here; "
                f"give it as --option={name}, or after '--' when it is an argument")
    return ""


def _with_number_rules(message: str) -> str:
    """typer's own number errors say what was wrong; add what would be accepted."""
    if "should be a valid integer" in message:
        return f"{message}; expected a whole number in ASCII digits 0-9, at most 2^63 - 1"
    if "should be a valid number" in message:
        return f"{message}; expected a finite number in ASCII digits such as 0.5 or 1e-3"
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status instead of raising ``SystemExit``.

    What user code (a model factory) prints is held and written to stderr only when the
    command succeeds: a refusal stays one line."""
    from tensorledger.workload.factory import hold_user_output

    with hold_user_output() as held:
        code = _main(argv)
    if code == 0 and held.getvalue():
        sys.stderr.write(held.getvalue())
    return code


def _main(argv: Sequence[str] | None) -> int:
    command = build_command()
    try:
        result = command.main(args=list(sys.argv[1:] if argv is None else argv),
                              prog_name="tensorledger", standalone_mode=False)
    except TensorLedgerError as error:
        return _error(str(error))
    except BrokenPipeError:
        quiet_stdout()
        return 0
    except SystemExit as error:  # typer's own end of a broken pipe not met in emit
        if isinstance(error.__context__, BrokenPipeError):
            quiet_stdout()
            return 0
        return 0 if error.code is None else error.code if isinstance(error.code, int) else 2
    except KeyboardInterrupt:
        print("tensorledger: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        # Usage errors come from click, or from the copy of click that newer typer carries:
        # recognised by their interface, so both work.
        code = getattr(error, "exit_code", None)
        if type(error).__name__ == "Abort":  # click's word for Ctrl-C
            print("tensorledger: interrupted", file=sys.stderr)
            return 130
        if not isinstance(code, int):
            raise
        hint = _negative_number_hint(error)
        if hint:
            return _error(hint)
        if type(error).__name__ == "NoArgsIsHelpError":
            context = getattr(error, "ctx", None)
            print(context.get_help() if context else "", file=sys.stderr)
            return 2
        format_message = getattr(error, "format_message", None)
        if format_message is None:  # Exit(code)
            return code
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        return _error(_with_number_rules(format_message()) + hint) if code else code
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    return int(result) if isinstance(result, int) else 0
