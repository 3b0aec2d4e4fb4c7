"""``tensorledger trace`` (a model's step, op by op) and ``tensorledger einsum`` (one
contraction).  torch is imported inside ``trace`` only; ``einsum`` never loads it."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, Quiet, emit, progress
from tensorledger.cli.workload import LayoutOptions, WorkloadOptions, check_depth, shared_options
from tensorledger.errors import EinsumError
from tensorledger.units import parse_integer

__all__ = ["register"]

JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


@shared_options
def trace_command(
    *,
    options: WorkloadOptions,
    layout_options: LayoutOptions,
    depth: Annotated[int, typer.Option(help=(
        "Module tree depth shown: 0 the whole step only, 1 the model, 2 its top modules, ... "
        "Repeated modules are summed into one row: blocks.{0..11}.mlp ×12."))] = 4,
    as_json: JsonOpt = False,
    quiet: Quiet = False,
) -> None:
    """Record every aten op of one step: FLOPs and bytes by category, phase and module; under a
    layout (--dp, --fsdp, --tp), one rank's step with every collective it issues."""
    check_depth(depth)
    work = options.resolve(layout_options.resolve())
    from tensorledger.ledger.trace import trace_report
    from tensorledger.report.trace import trace_view

    with progress(quiet, as_json) as say:
        report = trace_report(work, depth, progress=say)
    emit("trace", report, as_json, *trace_view(report))


def _sizes(items: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EinsumError(f"axis sizes are written name=value, e.g. batch=2; got {item!r}")
        # ASCII digits, 1 to int64: the same rule as every other count
        sizes[name.strip()] = parse_integer(value.strip(), what=f"axis {name.strip()!r}",
                                            minimum=1)
    return sizes


def einsum_command(
    pattern: Annotated[str, typer.Argument(help=(
        "Named axes, operands separated by commas: 'batch seq1 hidden, batch seq2 hidden -> "
        "batch seq1 seq2'."))],
    sizes: Annotated[list[str] | None, typer.Argument(help="Axis sizes: batch=2 seq1=3 ...")
                     ] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Element type: fp32, bf16, fp8, ...")
                     ] = "fp32",
    as_json: JsonOpt = False,
) -> None:
    """FLOPs, bytes, arithmetic intensity and the equivalent matmul of one einsum."""
    from tensorledger.costs.einsum import einsum_cost
    from tensorledger.report.trace import einsum_view

    cost = einsum_cost(pattern, _sizes(sizes or []), dtype)
    emit("einsum", cost, as_json, *einsum_view(cost))


def register(app: typer.Typer) -> None:
    app.command("trace")(trace_command)
    app.command("einsum")(einsum_command)
