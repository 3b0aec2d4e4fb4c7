"""Reference models written with einops, built from presets or config.json
files of their families (user factories and Hugging Face classes are built in ``workload``).

This package imports torch; the torch-free config, presets and closed forms live in
:mod:`tensorledger.napkin.transformer` and are re-exported here for convenience.
"""

from __future__ import annotations

from tensorledger.models.build import build_model, parameter_parts
from tensorledger.models.cache import KVCache, LayerCache
from tensorledger.models.deep import DeepNetwork, MatmulBlock
from tensorledger.models.transformer import MLP, Attention, Block, TransformerLM
from tensorledger.napkin.transformer import PRESETS, TransformerConfig, get_preset

__all__ = [
    "MLP",
    "PRESETS",
    "Attention",
    "Block",
    "DeepNetwork",
    "KVCache",
    "LayerCache",
    "MatmulBlock",
    "TransformerConfig",
    "TransformerLM",
    "build_model",
    "get_preset",
    "parameter_parts",
]
