"""``tensorledger trace`` (a model's step, op by op) and ``tensorledger einsum`` (one
contraction).  torch is imported inside ``trace`` only; ``einsum`` never loads it."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.errors import EinsumError, InputError

__all__ = ["register"]

JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def trace_command(
    model: Annotated[str, typer.Option("--model", "-m", help=(
        "A preset (tiny, gpt2, llama-3-8b, ...), a config.json, or file.py:make_model."))],
    batch: Annotated[int, typer.Option(help="Sequences per step.")] = 1,
    seq: Annotated[int, typer.Option(help="Tokens per sequence.")] = 128,
    step: Annotated[str, typer.Option(help="forward, forward-backward or train.")] = "train",
    optimizer: Annotated[str, typer.Option(help=(
        "For --step train: sgd, momentum, adagrad, rmsprop, adam or adamw."))] = "adamw",
    depth: Annotated[int, typer.Option(help=(
        "Module tree depth shown: 0 the whole step only, 1 its top modules, ... (default 2)."))
                     ] = 2,
    device: Annotated[str, typer.Option(help=(
        "meta (default: no memory), fake (FakeTensorMode) or cpu (real tensors)."))] = "meta",
    dtype: Annotated[str, typer.Option(help="Parameter dtype: fp32, bf16, ...")] = "fp32",
    as_json: JsonOpt = False,
) -> None:
    """Record every aten op of one step: FLOPs and bytes by category, phase and module."""
    from tensorledger.report.trace import trace_view
    from tensorledger.trace.workload import TraceReport, trace_model

    if depth < 0:
        raise InputError(f"--depth must be 0 or more, got {depth}")
    run = trace_model(model, batch=batch, seq=seq, step=step, optimizer=optimizer,
                      device=device, dtype=dtype)
    report = TraceReport.of(run, depth)
    emit("trace", report, as_json, *trace_view(report))


def _sizes(items: list[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EinsumError(f"axis sizes are written name=value, e.g. batch=2; got {item!r}")
        try:
            sizes[name.strip()] = int(value)
        except ValueError:
            raise EinsumError(f"axis {name.strip()!r} needs a whole-number size, got "
                              f"{value!r}") from None
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
