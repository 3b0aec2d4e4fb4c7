"""Entry point: builds the app, runs it, and turns every user error into one line + exit 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from tensorledger.cli import account as account_commands
from tensorledger.cli import bench as bench_commands
from tensorledger.cli import formats as formats_commands
from tensorledger.cli import hardware as hardware_commands
from tensorledger.cli import memory as memory_commands
from tensorledger.cli import models as models_commands
from tensorledger.cli import napkin as napkin_commands
from tensorledger.cli import roofline as roofline_commands
from tensorledger.cli import trace as trace_commands
from tensorledger.errors import TensorLedgerError

__all__ = ["app", "main"]

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
                bench_commands):
    _module.register(app)


def _error(message: str) -> int:
    first_line = " ".join(str(message).split())
    print(f"tensorledger: error: {first_line}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status instead of raising ``SystemExit``."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=list(sys.argv[1:] if argv is None else argv),
                              prog_name="tensorledger", standalone_mode=False)
    except TensorLedgerError as error:
        return _error(str(error))
    except BrokenPipeError:
        return 0
    except Exception as error:
        # Usage errors come from click, or from the copy of click that newer typer carries:
        # recognised by their interface, so both work.
        code = getattr(error, "exit_code", None)
        if type(error).__name__ == "Abort":
            return _error("aborted")
        if not isinstance(code, int):
            raise
        if type(error).__name__ == "NoArgsIsHelpError":
            context = getattr(error, "ctx", None)
            print(context.get_help() if context else "", file=sys.stderr)
            return 2
        format_message = getattr(error, "format_message", None)
        if format_message is None:  # Exit(code)
            return code
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        return _error(format_message() + hint) if code else code
    return int(result) if isinstance(result, int) else 0
