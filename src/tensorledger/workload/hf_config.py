"""A Hugging Face ``config.json`` of a family the reference Transformer shares → its
:class:`TransformerConfig` (torch-free; nothing is fetched).  Other model types are built by
transformers itself (see :mod:`.step`); these readers give their closed forms.

GPT-2 (``model_type: gpt2``) and Llama (``model_type: llama``) are understood; Llama's
``rope_theta`` is read at the top level or, as transformers 5 writes it, in
``rope_parameters``.  A missing
field, an unknown ``model_type`` or an architecture option this model cannot express is a
:class:`~tensorledger.errors.ConfigError` that names the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tensorledger.errors import ConfigError, ModelError
from tensorledger.files import parse_json_text, read_text_file
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["CONFIG_MAX_BYTES", "HF_MODEL_TYPES", "config_from_hf", "load_hf_config",
           "read_config_json"]


class _Fields:
    """Typed access to a config.json's fields; every complaint names the file and field."""

    def __init__(self, raw: Mapping[str, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    def _fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {message}")

    def get_int(self, key: str, default: int | None = None) -> int:
        value = self.raw.get(key, default)
        if value is None:
            if key in self.raw and default is not None:
                return default
            raise self._fail(f"missing field {key!r} (model_type {self.raw['model_type']!r})")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(f"field {key!r} must be a whole number, got {value!r}")
        return value

    def get_float(self, key: str, default: float) -> float:
        value = self.raw.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(f"field {key!r} must be a number, got {value!r}")
        return float(value)

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(f"field {key!r} must be true or false, got {value!r}")
        return value

    def expect(self, key: str, allowed: tuple[str, ...], default: str) -> None:
        value = self.raw.get(key, default)
        if value not in allowed:
            raise self._fail(f"field {key!r} is {value!r}; this model supports "
                             f"{', '.join(map(repr, allowed))}")


def _gpt2(fields: _Fields, name: str) -> TransformerConfig:
    fields.expect("activation_function", ("gelu_new", "gelu_pytorch_tanh", "gelu"), "gelu_new")
    d_model = fields.get_int("n_embd")
    return TransformerConfig(
        name=name, vocab_size=fields.get_int("vocab_size"),
        context_length=fields.get_int("n_positions"), d_model=d_model,
        n_layers=fields.get_int("n_layer"), n_heads=fields.get_int("n_head"),
        d_ff=fields.get_int("n_inner", 4 * d_model), mlp="gelu", norm="layernorm",
        positions="learned", tied_embeddings=fields.get_bool("tie_word_embeddings", True),
        bias=True, norm_eps=fields.get_float("layer_norm_epsilon", 1e-5))


def _llama(fields: _Fields, name: str) -> TransformerConfig:
    fields.expect("hidden_act", ("silu",), "silu")
    attention_bias = fields.get_bool("attention_bias", False)
    if fields.get_bool("mlp_bias", False) or attention_bias:
        raise ConfigError(f"{fields.where}: field 'attention_bias'/'mlp_bias' is true; this "
                          "model supports Llama without biases")
    n_heads = fields.get_int("num_attention_heads")
    d_model = fields.get_int("hidden_size")
    head_dim = fields.get_int("head_dim", d_model // n_heads if n_heads else 0)
    return TransformerConfig(
        name=name, vocab_size=fields.get_int("vocab_size"),
        context_length=fields.get_int("max_position_embeddings"), d_model=d_model,
        n_layers=fields.get_int("num_hidden_layers"), n_heads=n_heads,
        n_kv_heads=fields.get_int("num_key_value_heads", n_heads), head_dim=head_dim,
        d_ff=fields.get_int("intermediate_size"), mlp="swiglu", norm="rmsnorm", positions="rope",
        tied_embeddings=fields.get_bool("tie_word_embeddings", False), bias=False,
        norm_eps=fields.get_float("rms_norm_eps", 1e-6),
        rope_theta=_rope_theta(fields))


def _rope_theta(fields: _Fields) -> float:
    """``rope_theta`` at the top level (transformers 4) or in ``rope_parameters`` (5)."""
    nested = fields.raw.get("rope_parameters")
    if nested is not None:
        if not isinstance(nested, Mapping):
            raise fields._fail(f"field 'rope_parameters' must be an object, got {nested!r}")
        if "rope_theta" in nested:
            return _Fields(nested, fields.where).get_float("rope_theta", 10000.0)
    return fields.get_float("rope_theta", 10000.0)


#: model_type → reader.
HF_MODEL_TYPES: dict[str, Callable[[_Fields, str], TransformerConfig]] = {
    "gpt2": _gpt2,
    "llama": _llama,
}


def config_from_hf(raw: Mapping[str, Any], where: str = "config.json",
                   name: str | None = None) -> TransformerConfig:
    """A parsed config.json (a mapping) → :class:`TransformerConfig`.

    >>> config_from_hf({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024,
    ...                 "n_embd": 768, "n_layer": 12, "n_head": 12}).d_ff
    3072
    >>> try:
    ...     config_from_hf({"model_type": "llama", "hidden_size": 64})
    ... except ConfigError as error:
    ...     print(error)
    config.json: missing field 'num_attention_heads' (model_type 'llama')
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a JSON object at the top level")
    model_type = raw.get("model_type")
    if model_type is None:
        raise ConfigError(f"{where}: missing field 'model_type'; supported: "
                          f"{', '.join(HF_MODEL_TYPES)}")
    if model_type not in HF_MODEL_TYPES:
        raise ConfigError(f"{where}: unsupported model_type {model_type!r} (field "
                          f"'model_type'); supported: {', '.join(HF_MODEL_TYPES)}")
    fields = _Fields(raw, where)
    try:
        return HF_MODEL_TYPES[model_type](fields, name or str(model_type))
    except ModelError as error:
        raise ConfigError(f"{where}: {error}") from None


#: A config.json larger than this is not a config (real ones are a few kilobytes).
CONFIG_MAX_BYTES = 1 << 20


def read_config_json(file: Path) -> Any:
    """A config.json: a regular UTF-8 file of at most CONFIG_MAX_BYTES, sanely nested."""
    text = read_text_file(file, what="config.json", max_bytes=CONFIG_MAX_BYTES)
    return parse_json_text(text, where=str(file))


def load_hf_config(path: str | Path) -> TransformerConfig:
    """Read a local ``config.json`` (or a folder holding one) into a TransformerConfig."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    raw = read_config_json(file)
    name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
    return config_from_hf(raw, str(file), name)
