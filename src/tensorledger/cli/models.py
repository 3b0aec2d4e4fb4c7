"""``tensorledger models``: the presets with their closed-form parameter counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from tensorledger.cli.common import JSON_HELP, emit
from tensorledger.napkin.transformer import (
    ForwardFlops,
    ParameterCount,
    TransformerConfig,
    forward_flops_per_token,
    get_preset,
    parameter_count,
    preset_summaries,
)
from tensorledger.report.models import model_detail_view, presets_view

__all__ = ["register"]


@dataclass(frozen=True)
class ModelDetail:
    """What ``tensorledger models NAME --json`` prints."""

    config: TransformerConfig
    params: ParameterCount
    forward_full: ForwardFlops
    forward_causal_halved: ForwardFlops


def _config_of(name: str) -> TransformerConfig:
    try:
        return get_preset(name)
    except KeyError:
        if not name.endswith(".json"):
            raise
    from tensorledger.models.hf import load_hf_config  # torch only on this path

    return load_hf_config(name)


def models_command(
    name: Annotated[str | None, typer.Argument(
        help="A preset or a local config.json: show its parameters and FLOPs by part.")] = None,
    seq_len: Annotated[int | None, typer.Option(
        "--seq-len", help="Sequence length for attention FLOPs (default: the context).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """List the model presets with parameter counts, or show one model's counts by part."""
    if name is None:
        summaries = preset_summaries()
        emit("models", {"presets": summaries}, as_json, *presets_view(summaries))
        return
    config = _config_of(name)
    detail = ModelDetail(config=config, params=parameter_count(config),
                         forward_full=forward_flops_per_token(config, seq_len, "full"),
                         forward_causal_halved=forward_flops_per_token(config, seq_len,
                                                                       "causal-halved"))
    emit("models", detail, as_json,
         *model_detail_view(config, detail.params, detail.forward_full,
                            detail.forward_causal_halved))


def register(app: typer.Typer) -> None:
    app.command("models")(models_command)
