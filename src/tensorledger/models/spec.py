"""One resolver for ``--model``: a preset name, a config.json path, or ``file.py:factory``.

>>> spec = load_model_spec("gpt2")
>>> spec.kind, spec.name, spec.config is not None
('preset', 'gpt2', True)
>>> sum(p.numel() for p in spec.build().parameters())
124439808
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from tensorledger.errors import UnknownNameError
from tensorledger.models.build import build_model
from tensorledger.models.factory import (
    Factory,
    call_factory,
    is_factory_spec,
    load_factory,
    parse_factory_spec,
)
from tensorledger.models.hf import load_hf_config
from tensorledger.napkin.transformer import (
    PRESETS,
    ModelParams,
    TransformerConfig,
    get_preset,
    parameter_count,
)

__all__ = ["ModelSpec", "load_model_spec", "model_params"]

SpecKind = Literal["preset", "config.json", "factory"]


@dataclass(frozen=True)
class ModelSpec:
    """What ``--model`` named: how to build it, and its config when it is a TransformerLM.

    ``config`` is ``None`` for a user factory, whose module is opaque until built.
    """

    name: str
    kind: SpecKind
    source: str
    config: TransformerConfig | None
    factory: Factory | None = None

    def build(self, device: str | torch.device = "meta",
              dtype: torch.dtype = torch.float32) -> nn.Module:
        """The model with parameters on ``device`` (meta by default: nothing allocated)."""
        if self.config is not None:
            return build_model(self.config, device, dtype)
        assert self.factory is not None
        return call_factory(self.factory, self.name, device).to(dtype=dtype)


def load_model_spec(text: str) -> ModelSpec:
    """Resolve ``text``: a preset (``llama-3-8b``), a ``config.json`` file or a folder holding
    one, or ``path/to/file.py:make_model``.  Nothing is built or called yet."""
    stripped = text.strip()
    if stripped.lower() in PRESETS:
        config = get_preset(stripped)
        return ModelSpec(name=config.name, kind="preset", source="preset", config=config)
    if is_factory_spec(stripped):
        factory_spec = parse_factory_spec(stripped)
        factory = load_factory(factory_spec)
        return ModelSpec(name=factory_spec.function, kind="factory", source=str(factory_spec),
                         config=None, factory=factory)
    path = Path(stripped)
    if stripped.endswith(".json") or path.is_dir() or path.is_file():
        config = load_hf_config(path)
        return ModelSpec(name=config.name, kind="config.json", source=str(path), config=config)
    raise UnknownNameError("model (a preset, a config.json path, or file.py:function)",
                           stripped, PRESETS)


def model_params(text: str) -> ModelParams:
    """Total parameters of the model ``text`` names: the closed form when it has a config,
    else ``sum(p.numel())`` of the factory's model built on the meta device."""
    spec = load_model_spec(text)
    if spec.config is not None:
        total = parameter_count(spec.config).total_params
        return ModelParams(model=spec.name, params=total,
                           source=f"closed-form total from {spec.kind} "
                                  "(embeddings and head included)")
    model = spec.build("meta")
    total = sum(p.numel() for p in model.parameters())
    return ModelParams(model=spec.name, params=total,
                       source=f"sum of parameter numel of {spec.source} built on meta")
