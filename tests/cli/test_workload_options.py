"""trace, memory and roofline take the same workload options, read from the CLI itself."""

from __future__ import annotations

import typer

from tensorledger.cli.main import app
from tensorledger.cli.workload import WORKLOAD_OPTIONS
from tensorledger.workload.spec import DEFAULTS

COMMANDS = ("trace", "memory", "roofline")


def _options(command: str) -> dict[str, tuple[object, ...]]:
    group = typer.main.get_command(app)
    click_command = group.commands[command]  # type: ignore[attr-defined]
    return {p.name: (tuple(p.opts), p.default, getattr(p, "help", None), p.is_flag)
            for p in click_command.params if p.name in WORKLOAD_OPTIONS}


def test_the_same_workload_options_with_the_same_names_help_and_defaults() -> None:
    found = {command: _options(command) for command in COMMANDS}
    assert set(found["trace"]) == set(WORKLOAD_OPTIONS)
    assert found["trace"] == found["memory"] == found["roofline"]
    defaults = {name: spec[1] for name, spec in found["trace"].items() if name != "model"}
    assert defaults == {"batch": DEFAULTS.batch, "seq": DEFAULTS.seq, "step": DEFAULTS.step,
                        "precision": DEFAULTS.precision, "optimizer": DEFAULTS.optimizer,
                        "device": DEFAULTS.device, "checkpoint": DEFAULTS.checkpoint}
    assert defaults["precision"] == "mixed-bf16"  # language models train in bf16


def test_every_optimizer_and_recipe_works_in_every_command(cli) -> None:  # type: ignore[no-untyped-def]
    from tensorledger.napkin import OPTIMIZERS, PRECISIONS

    for optimizer in OPTIMIZERS:
        for command in COMMANDS:
            result = cli(command, "--model", "tiny", "--seq", "8", "--optimizer", optimizer,
                         "--precision", "bf16-master", "--json")
            assert result.code == 0, (command, optimizer, result.stderr)
    for precision in PRECISIONS:
        result = cli("roofline", "--model", "tiny", "--seq", "8", "--optimizer", "lion",
                     "--precision", precision, "--json")
        assert result.code == 0, (precision, result.stderr)
        assert result.json()["precision"] == precision
