"""Reference models written with einops, built from presets, config.json files or factories.

This package imports torch; the torch-free config, presets and closed forms live in
:mod:`tensorledger.napkin.transformer` and are re-exported here for convenience.
"""

from __future__ import annotations

from tensorledger.models.build import build_model, parameter_parts
from tensorledger.models.deep import DeepNetwork, MatmulBlock
from tensorledger.models.factory import call_factory, load_factory, parse_factory_spec
from tensorledger.models.hf import HF_MODEL_TYPES, config_from_hf, load_hf_config
from tensorledger.models.spec import ModelSpec, load_model_spec, model_params
from tensorledger.models.transformer import MLP, Attention, Block, TransformerLM
from tensorledger.napkin.transformer import PRESETS, TransformerConfig, get_preset

__all__ = [
    "HF_MODEL_TYPES",
    "MLP",
    "PRESETS",
    "Attention",
    "Block",
    "DeepNetwork",
    "MatmulBlock",
    "ModelSpec",
    "TransformerConfig",
    "TransformerLM",
    "build_model",
    "call_factory",
    "config_from_hf",
    "get_preset",
    "load_factory",
    "load_hf_config",
    "load_model_spec",
    "model_params",
    "parameter_parts",
    "parse_factory_spec",
]
