"""Build a model on the meta device (shapes only), on a real device, or under FakeTensorMode."""

from __future__ import annotations

import torch
from torch import nn

from tensorledger.devices import resolve_device
from tensorledger.errors import InputError
from tensorledger.models.transformer import TransformerLM
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["build_model", "parameter_parts"]


def build_model(config: TransformerConfig, device: str | torch.device = "meta",
                dtype: torch.dtype = torch.float32) -> TransformerLM:
    """The Transformer LM of ``config`` with its parameters on ``device`` in ``dtype``.

    On ``meta`` no weight is allocated, so llama-3-405b builds in well under 1 GiB.  Under an
    active ``FakeTensorMode`` every parameter is a fake tensor and nothing is allocated either.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> model = build_model(get_preset("llama-3-70b"), "meta", torch.bfloat16)
    >>> next(model.parameters()).is_meta, next(model.parameters()).dtype
    (True, torch.bfloat16)
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise InputError(f"parameters need a floating-point dtype, got {dtype!r}")
    target = device if isinstance(device, torch.device) else resolve_device(device)
    with torch.device(target):
        return TransformerLM(config, dtype)


def parameter_parts(model: nn.Module) -> dict[str, str]:
    """Parameter name → part (embeddings, attention, mlp, norms, head, mtp) for a
    TransformerLM; a mixture of experts' router and experts are mlp.

    The names follow :mod:`tensorledger.models.transformer`; a tied head appears under the
    token table's name only, as ``named_parameters()`` lists a shared tensor once.
    """
    parts: dict[str, str] = {}
    for name, _ in model.named_parameters():
        if name.startswith("mtp."):
            parts[name] = "mtp"
        elif name.startswith(("token_embedding.", "position_embedding.")):
            parts[name] = "embeddings"
        elif "norm." in name:
            parts[name] = "norms"
        elif ".attention." in name:
            parts[name] = "attention"
        elif ".mlp." in name:
            parts[name] = "mlp"
        elif name.startswith("head."):
            parts[name] = "head"
        else:
            raise InputError(f"parameter {name!r} belongs to no known part")
    return parts
