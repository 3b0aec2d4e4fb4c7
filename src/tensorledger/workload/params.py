"""A model's parameter count: the closed form when it has a reference config (no torch),
else ``sum(p.numel())`` of the module built on fake tensors (nothing allocated)."""

from __future__ import annotations

from tensorledger.napkin.transformer import ModelParams, parameter_count
from tensorledger.workload.source import ModelSource, resolve_source

__all__ = ["model_params"]


def model_params(model: str | ModelSource) -> ModelParams:
    """Total parameters of the model ``model`` names.

    >>> model_params("gpt2").params
    124439808
    """
    source = model if isinstance(model, ModelSource) else resolve_source(model)
    if source.builder == "reference" and source.config is not None:
        total = parameter_count(source.config).total_params
        return ModelParams(model=source.label, params=total,
                           source=f"closed-form total from the {source.kind} (embeddings and "
                                  "head included)")
    from tensorledger.workload.spec import resolve_workload
    from tensorledger.workload.step import build_module, placement

    work = resolve_workload(source, step="forward", precision="fp32", device="fake", seq=1)
    with placement(work.device) as target:
        module, _ = build_module(work, target)
        total = sum(p.numel() for p in dict.fromkeys(module.parameters()))
    return ModelParams(model=source.label, params=total,
                       source=f"sum of parameter numel of {source.built_by}, built on fake "
                              "tensors")
