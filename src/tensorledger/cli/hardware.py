"""``tensorledger hardware``: list the catalog, or show one chip with every source."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.hardware import catalog, get_hardware
from tensorledger.report.hardware import catalog_table, chip_view

__all__ = ["register"]


def hardware_command(
    name: Annotated[str | None, typer.Argument(help=(
        "Chip id or alias, or a TOML file (a path with a '/' or ending in .toml; at most "
        "1 MiB)."))] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the hardware catalog, or show one chip: every number, its source, its intensity."""
    if name is None:
        chips = list(catalog().values())
        emit("hardware", {"chips": chips}, as_json, catalog_table(chips))
        return
    chip = get_hardware(name)
    intensities = {k: chip.intensity_flop_per_byte(k) for k in chip.dense_flop_per_s}
    emit("hardware", {"chip": chip, "intensity_flop_per_byte": intensities}, as_json,
         *chip_view(chip, intensities))


def register(app: typer.Typer) -> None:
    app.command("hardware")(hardware_command)
