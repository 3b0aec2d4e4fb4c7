"""``tensorledger models``: the presets with their closed-form parameter counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.cli.workload import FillDefaults
from tensorledger.napkin.transformer import (
    ForwardFlops,
    ParameterCount,
    TransformerConfig,
    forward_flops_per_token,
    parameter_count,
    preset_summaries,
)
from tensorledger.report.models import model_detail_view, model_params_note, presets_view
from tensorledger.workload.source import resolve_source

__all__ = ["register"]


@dataclass(frozen=True)
class ModelDetail:
    """What ``tensorledger models NAME --json`` prints."""

    config: TransformerConfig
    params: ParameterCount
    forward_full: ForwardFlops
    forward_causal_halved: ForwardFlops


def models_command(
    name: Annotated[str | None, typer.Argument(
        help=("A preset, a Hugging Face config.json (or a folder holding one), or a factory "
              "path/to/file.py:make_model: its parameters (and FLOPs by part where the "
              "reference Transformer's closed forms apply)."))] = None,
    seq_len: Annotated[int | None, typer.Option(
        "--seq-len", help="Sequence length for attention FLOPs (default: the context).")] = None,
    fill_defaults: FillDefaults = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the model presets with parameter counts, or show one model's counts by part."""
    if name is None:
        summaries = preset_summaries()
        emit("models", {"presets": summaries}, as_json, *presets_view(summaries))
        return
    source = resolve_source(name, fill_defaults=fill_defaults)
    if source.config is None:  # a factory or an architecture only transformers knows
        from tensorledger.workload import model_params  # builds it on fake tensors

        params = model_params(source)
        emit("models", params, as_json, model_params_note(params))
        return
    config = source.config
    detail = ModelDetail(config=config, params=parameter_count(config),
                         forward_full=forward_flops_per_token(config, seq_len, "full"),
                         forward_causal_halved=forward_flops_per_token(config, seq_len,
                                                                       "causal-halved"))
    emit("models", detail, as_json,
         *model_detail_view(config, detail.params, detail.forward_full,
                            detail.forward_causal_halved))


def register(app: typer.Typer) -> None:
    app.command("models")(models_command)
