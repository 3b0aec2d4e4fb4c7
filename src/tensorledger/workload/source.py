"""The one resolver for ``--model``: a preset, a ``config.json`` (or a folder holding one), or a
factory ``path/to/file.py:name``.  Torch-free: nothing is imported, built or called here, so a
command refuses a bad source (or a bad option beside it) before any user code runs.

>>> s = resolve_source("gpt2")
>>> s.kind, s.builder, s.name, s.config.n_layers
('preset', 'reference', 'gpt2', 12)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tensorledger.errors import ConfigError, ModelError, UnknownNameError
from tensorledger.napkin.transformer import PRESETS, TransformerConfig, get_preset
from tensorledger.workload.hf_checks import Head, check_hf_config
from tensorledger.workload.hf_config import HF_MODEL_TYPES, config_from_hf, read_config_json

__all__ = ["ModelSource", "hf_available", "resolve_source"]

SourceKind = Literal["preset", "config", "factory"]
Builder = Literal["reference", "transformers", "factory"]

@dataclass(frozen=True)
class ModelSource:
    """What ``--model`` named, and which code will build it.

    ``builder`` is ``reference`` (tensorledger's einops Transformer), ``transformers`` (the
    Hugging Face class of the config's ``model_type``) or ``factory`` (the user's function).
    ``config`` is the reference Transformer's config when the model has one: a preset, or a
    config.json of a family the closed forms share (GPT-2, Llama) — also when transformers
    builds it, so closed forms can be set beside the trace.  A config.json was checked by
    :func:`~tensorledger.workload.hf_checks.check_hf_config`: ``head`` is the head its
    ``architectures`` asks for, ``filled`` the fields taken from transformers' defaults
    (``fill_defaults``), ``learned_positions`` the length of its table of positions, if it has
    one.
    """

    label: str  # the text the user gave
    kind: SourceKind
    builder: Builder
    name: str
    config: TransformerConfig | None = None
    hf_config: Mapping[str, Any] | None = field(default=None, repr=False)
    path: Path | None = None  # the config.json or the factory file
    function: str | None = None  # the factory's name
    head: Head | None = None  # a config.json's head: causal-lm, masked-lm, ...
    filled: tuple[str, ...] = ()  # fields of a config.json filled with transformers' defaults
    learned_positions: int | None = None  # a config.json's table of positions

    @property
    def max_seq(self) -> int | None:
        """The longest sequence the model can take: its table of learned positions; None
        where positions are computed (RoPE, ALiBi) and a longer sequence still runs."""
        if self.learned_positions is not None:
            return self.learned_positions
        if self.config is not None and self.config.positions == "learned":
            return self.config.context_length
        return None

    def __repr__(self) -> str:
        return f"ModelSource({self.label!r}, {self.kind}, built by {self.builder})"

    @property
    def built_by(self) -> str:
        """One phrase for the output: which path built the model."""
        if self.builder == "reference":
            return "tensorledger's reference Transformer" + (
                f" (from the config{self._filled})" if self.filled else "")
        if self.builder == "transformers":
            head = f", {_HEAD_WORDS[self.head]} head" if self.head else ""
            return f"Hugging Face transformers (from the config, no weights{head}{self._filled})"
        return f"the factory {self.function}() in {self.path}"


    @property
    def _filled(self) -> str:
        if not self.filled or self.hf_config is None:
            return ""
        taken = ", ".join(f"{key} = {self.hf_config[key]}" for key in self.filled)
        return f"; transformers' defaults taken: {taken}"


_HEAD_WORDS = {"causal-lm": "causal LM", "masked-lm": "masked LM",
               "sequence-classification": "sequence classification"}


def hf_available() -> bool:
    """True when the optional ``transformers`` package is installed (it is not imported)."""
    return importlib.util.find_spec("transformers") is not None


def _config_source(text: str, path: Path, fill_defaults: bool) -> ModelSource:
    file = path / "config.json" if path.is_dir() else path
    raw = read_config_json(file)
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a JSON object at the top level")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{file}: field 'model_type' must be a name such as \"llama\", got "
                          f"{model_type!r}")
    checked = check_hf_config(raw, str(file), fill_defaults=fill_defaults)
    raw = checked.raw
    name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
    reference = None
    # the closed forms are a causal LM's; another head is transformers' alone
    if model_type in HF_MODEL_TYPES and checked.head == "causal-lm":
        try:
            reference = config_from_hf(raw, str(file), name)
        except ConfigError:
            if not hf_available():
                raise
    if hf_available():
        return ModelSource(label=text, kind="config", builder="transformers", name=name,
                           config=reference, hf_config=raw, path=file, head=checked.head,
                           filled=checked.filled, learned_positions=checked.max_seq)
    if reference is None:
        raise ConfigError(f"{file}: model_type {model_type!r} needs the Hugging Face extra "
                          "(pip install 'tensorledger[hf]'); without it only "
                          f"{', '.join(HF_MODEL_TYPES)} configs are read")
    if checked.head != "causal-lm":
        raise ConfigError(f"{file}: field 'architectures' asks for a {checked.head} head, which "
                          "the Hugging Face extra builds (pip install 'tensorledger[hf]'); "
                          "tensorledger's reference Transformer is a causal LM")
    return ModelSource(label=text, kind="config", builder="reference", name=name,
                       config=reference, hf_config=raw, path=file, head=checked.head,
                       filled=checked.filled, learned_positions=checked.max_seq)


def _factory_source(text: str) -> ModelSource:
    path_text, _, function = text.rpartition(":")
    if not function.isidentifier():
        raise ModelError(f"model factory {text!r} is not of the form path/to/file.py:function")
    file = Path(path_text)
    if not file.is_file():
        raise ConfigError(f"model factory file not found: {file}")
    return ModelSource(label=text, kind="factory", builder="factory", name=function, path=file,
                       function=function)


def _looks_like_a_path(text: str) -> bool:
    """A ``--model`` written as a path (``./cfg/pythia``, ``~/models/x``, ``C:\\m``), which no
    preset name is: its error says the path is missing, not that a name is unknown."""
    return "/" in text or "\\" in text or text.startswith((".", "~"))


def resolve_source(text: str, *, fill_defaults: bool = False) -> ModelSource:
    """Resolve ``--model``: a preset (``llama-3-8b``), a ``config.json`` file or a folder
    holding one, or ``path/to/file.py:make_model``.  Nothing is built or called yet.

    A config.json's sizes are checked first (:func:`.hf_checks.check_hf_config`); one that
    leaves a size out is refused unless ``fill_defaults``, which takes transformers' default
    and names it in :attr:`ModelSource.filled` (and in :attr:`ModelSource.built_by`).

    >>> resolve_source("llama-7")
    Traceback (most recent call last):
    ...
    tensorledger.errors.UnknownNameError: unknown model (a preset, a config.json path, or file.py:function) 'llama-7'; did you mean llama-2-7b, llama-3-70b, llama-3-8b? known: deepseek-v3, deepseek-v3-mtp, gpt2, gpt2-large, gpt2-medium, gpt2-xl, gpt3-175b, llama-2-7b, llama-3-405b, llama-3-70b, llama-3-8b, mixtral-8x7b, qwen3-30b-a3b, tiny, tiny-moe
    """  # noqa: E501
    stripped = text.strip()
    if stripped.lower() in PRESETS:
        config = get_preset(stripped)
        return ModelSource(label=stripped, kind="preset", builder="reference", name=config.name,
                           config=config)
    path_text, colon, _ = stripped.rpartition(":")
    if colon and path_text.endswith(".py"):
        return _factory_source(stripped)
    path = Path(stripped)
    if stripped.endswith(".json") or path.is_dir() or path.is_file():
        return _config_source(stripped, path, fill_defaults)
    if _looks_like_a_path(stripped):
        raise ConfigError(f"model path {stripped} does not exist (expected a config.json, or a "
                          "folder holding one)")
    raise UnknownNameError("model (a preset, a config.json path, or file.py:function)",
                           stripped, PRESETS)
