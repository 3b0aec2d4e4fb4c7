"""``tensorledger serve``: serving capacity on a napkin.  No torch is imported on this path."""

from __future__ import annotations

from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit_with_plot, integer_parser, real_parser
from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.arithmetic import MAX_COUNT
from tensorledger.napkin.kvcache import kv_layout, kv_layout_from_hf
from tensorledger.napkin.serving import MAX_CURVE_BATCH, WEIGHT_FORMATS, serving
from tensorledger.report.plots import check_figure_path
from tensorledger.report.serve import serve_view, write_serve_plot
from tensorledger.workload.source import resolve_source

__all__ = ["MAX_CONTEXT", "register"]

#: The longest --context asked about: 2^31 tokens, far past any model's.
MAX_CONTEXT = 1 << 31


def serve_command(
    model: Annotated[str, typer.Option("--model", "-m", help=(
        "A preset (llama-3-8b, ...) or a config.json of a GPT-2 or Llama model; the KV cache "
        "is read from the config (GQA, sliding windows)."))],
    hardware: Annotated[str, typer.Option("--hardware", "-H", help=(
        "Catalog chip (h100, a100, ...), 'local' or a TOML file."))] = "h100",
    count: Annotated[int, typer.Option("--count", "-n", parser=integer_parser(1, MAX_COUNT),
                                       help="Chips, in groups of --tp.")] = 1,
    tp: Annotated[int, typer.Option("--tp", parser=integer_parser(1, MAX_COUNT),
                                    help="Tensor-parallel chips a replica.")] = 1,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help=(
        "KV cache dtype: bf16, fp16, fp8 (e4m3, e5m2), int8, fp4, ..."))] = "bf16",
    weights_dtype: Annotated[str, typer.Option("--weights-dtype", help=(
        f"Weights: {', '.join(WEIGHT_FORMATS)}."))] = "bf16",
    context: Annotated[int | None, typer.Option("--context", parser=integer_parser(
        1, MAX_CONTEXT), help="Tokens a sequence holds (default: the model's context).")]
    = None,
    memory_utilization: Annotated[float, typer.Option(
        "--memory-utilization", parser=real_parser(0.0, 1.0, minimum_open=True),
        help="Fraction of the chip's memory for weights and cache (vLLM's "
             "gpu_memory_utilization), in (0, 1].")] = 0.9,
    block_size: Annotated[int, typer.Option("--block-size", parser=integer_parser(
        1, MAX_CURVE_BATCH), help="Tokens a KV page holds (vLLM's block_size).")] = 16,
    plot: Annotated[str | None, typer.Option("--plot", help=(
        "Write tokens/s against batch with the ridge marked (PNG/SVG/PDF)."))] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """How many users a chip serves: weights and KV budget, the largest batch, time to first
    token and per output token by batch, tokens/s, and the ridge batch."""
    chip = get_hardware(hardware)
    if plot is not None:
        check_figure_path(plot)
    source = resolve_source(model)
    if source.config is None:
        raise InputError(f"serve works from closed forms of GPT-2 and Llama shapes (presets and "
                         f"their config.json); {source.label[:80]!r} is not one")
    layout = (kv_layout_from_hf(source.hf_config, source.name, str(source.path))
              if source.hf_config is not None else kv_layout(source.config))
    result = serving(source.config, layout, chip, count=count, tp=tp,
                     weights_dtype=weights_dtype, kv_dtype=kv_dtype, context=context,
                     memory_utilization=memory_utilization, block_size=block_size)
    emit_with_plot("serve", result, as_json, serve_view(result), plot, write_serve_plot)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
