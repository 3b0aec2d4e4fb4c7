"""A Hugging Face ``config.json`` checked before anything is built (torch-free).

transformers fills every field a config leaves out with the defaults of one published model
(``{"model_type": "llama", "hidden_size": 4096}`` builds Llama-2-7B's 32 layers of 11,008) and
builds whatever sizes it is given (no layers for ``n_layer: -1``, a million for a million).  Here
the fields that size the model must be present (or, with ``fill_defaults``, are taken from
transformers' defaults and named), whole, positive and within :data:`SIZES`' bounds, and the
heads must divide as the architecture needs; ``architectures`` decides the head.

Each family is a small table (transformers' configuration classes import torch, so they are
not read here; tests/workload/test_hf_checks.py holds the table equal to them).

>>> checked = check_hf_config({"model_type": "gpt2", "n_embd": 40, "n_layer": 2, "n_head": 4,
...                            "vocab_size": 97, "n_positions": 64})
>>> checked.head, checked.max_seq, checked.filled
('causal-lm', 64, ())
>>> try:
...     check_hf_config({"model_type": "llama", "hidden_size": 4096})
... except ConfigError as error:
...     print(error)
config.json: missing fields 'num_hidden_layers', 'num_attention_heads', 'vocab_size', 'intermediate_size' (model_type 'llama'); write them, or fill transformers' defaults (32, 32, 32000, 11008) with --fill-defaults
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tensorledger.errors import ConfigError

__all__ = ["FAMILIES", "HEADS", "LABELS", "SIZES", "CheckedConfig", "Family", "Head",
           "SizeField", "check_hf_config"]

#: The heads a config's ``architectures`` can ask for; each has a loss the step computes.
Head = Literal["causal-lm", "masked-lm", "sequence-classification"]

#: Class-name endings → head (``GPT2LMHeadModel`` is GPT-2's causal LM).
HEADS: dict[str, Head] = {
    "ForCausalLM": "causal-lm",
    "LMHeadModel": "causal-lm",
    "ForMaskedLM": "masked-lm",
    "ForSequenceClassification": "sequence-classification",
}


@dataclass(frozen=True)
class SizeField:
    """One size every transformer has, under transformers' standard name, and its bounds."""

    standard: str
    what: str
    largest: int  # far past any published model, small enough to build in seconds on fake


#: Standard name → bounds.  The largest published models sit well inside: 126 layers (Llama 3
#: 405B), hidden 16,384–18,432, vocabularies of 256k, contexts of 10M positions.
SIZES: dict[str, SizeField] = {f.standard: f for f in (
    SizeField("hidden_size", "the hidden size", 1 << 17),
    SizeField("num_hidden_layers", "the number of layers", 1 << 10),
    SizeField("num_attention_heads", "attention heads", 1 << 12),
    SizeField("num_key_value_heads", "key/value heads", 1 << 12),
    SizeField("vocab_size", "the vocabulary", 1 << 22),
    SizeField("intermediate_size", "the MLP's inner size", 1 << 20),
    SizeField("max_position_embeddings", "positions", 1 << 24),
    SizeField("head_dim", "the size of one head", 1 << 12),
)}

#: transformers writes a name for every label (``id2label``): a million labels are minutes.
LABELS = SizeField("num_labels", "the number of labels", 1 << 16)

_LLAMA_KEYS = {name: name for name in SIZES}


@dataclass(frozen=True)
class Family:
    """What one ``model_type`` needs.

    ``keys`` maps a standard name onto this config's own key (transformers' ``attribute_map``);
    ``defaults`` are transformers' class defaults of the ``required`` fields (one published
    model's sizes, so never taken silently); a ``nullable`` field written as null is derived by
    transformers (key/value heads = heads).  ``heads`` lists the heads it can build, the default
    first."""

    keys: Mapping[str, str]
    required: tuple[str, ...]
    defaults: Mapping[str, int]
    nullable: frozenset[str] = frozenset({"num_key_value_heads", "head_dim",
                                          "intermediate_size"})
    heads: tuple[Head, ...] = ("causal-lm", "sequence-classification")
    learned_positions: bool = False  # a table of positions: a longer sequence cannot run
    heads_divide_hidden: bool = False  # the attention splits hidden_size into the heads
    kv_only_if: str | None = None  # a flag without which the key/value heads are not read
    pad_token_default: int | None = None  # transformers' pad_token_id when none is written


_CORE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
_DECODER = (*_CORE, "intermediate_size")


def _defaults(*values: int, names: tuple[str, ...] = _DECODER) -> dict[str, int]:
    return dict(zip(names, values, strict=True))


#: model_type → what it needs.
FAMILIES: dict[str, Family] = {
    "llama": Family(_LLAMA_KEYS, _DECODER, _defaults(4096, 32, 32, 32000, 11008)),
    # qwen2 and mistral default their key/value heads to one model's (32, 8): required
    "qwen2": Family(_LLAMA_KEYS, (*_DECODER, "num_key_value_heads"),
                    _defaults(4096, 32, 32, 151936, 22016, 32,
                              names=(*_DECODER, "num_key_value_heads"))),
    "mistral": Family(_LLAMA_KEYS, (*_DECODER, "num_key_value_heads"),
                      _defaults(4096, 32, 32, 32000, 14336, 8,
                                names=(*_DECODER, "num_key_value_heads"))),
    "gemma2": Family(_LLAMA_KEYS, (*_DECODER, "num_key_value_heads", "head_dim"),
                     _defaults(2304, 26, 8, 256000, 9216, 4, 256,
                               names=(*_DECODER, "num_key_value_heads", "head_dim")),
                     pad_token_default=0),
    "phi3": Family({k: k for k in SIZES if k != "head_dim"}, _DECODER,
                   _defaults(3072, 32, 32, 32064, 8192), pad_token_default=32000),
    "gpt_neox": Family({k: k for k in SIZES if k not in ("num_key_value_heads", "head_dim")},
                       _DECODER, _defaults(6144, 44, 64, 50432, 24576),
                       heads_divide_hidden=True),
    "falcon": Family({**{k: k for k in (*_CORE, "max_position_embeddings")},
                      "num_key_value_heads": "num_kv_heads",
                      "intermediate_size": "ffn_hidden_size"},
                     _CORE, _defaults(4544, 32, 71, 65024, names=_CORE),
                     heads_divide_hidden=True, kv_only_if="new_decoder_architecture"),
    "gpt2": Family({"hidden_size": "n_embd", "num_hidden_layers": "n_layer",
                    "num_attention_heads": "n_head", "vocab_size": "vocab_size",
                    "intermediate_size": "n_inner", "max_position_embeddings": "n_positions"},
                   (*_CORE, "max_position_embeddings"),
                   _defaults(768, 12, 12, 50257, 1024,
                             names=(*_CORE, "max_position_embeddings")),
                   learned_positions=True, heads_divide_hidden=True),
    "bert": Family({k: k for k in SIZES if k not in ("num_key_value_heads", "head_dim")},
                   (*_DECODER, "max_position_embeddings"),
                   _defaults(768, 12, 12, 30522, 3072, 512,
                             names=(*_DECODER, "max_position_embeddings")),
                   nullable=frozenset(), heads=("masked-lm", "causal-lm",
                                                "sequence-classification"),
                   learned_positions=True, heads_divide_hidden=True, pad_token_default=0),
}

#: Any other model_type: nothing is required, every standard size it writes is bounded.
_OTHER = Family(_LLAMA_KEYS, (), {}, heads=("causal-lm", "masked-lm", "sequence-classification"))


@dataclass(frozen=True)
class CheckedConfig:
    """A config.json that passed: its fields (with any defaults filled in), the names of the
    fields filled, the head ``architectures`` asks for, and the longest sequence its table of
    learned positions holds (None where positions are computed)."""

    raw: dict[str, Any] = field(repr=False)
    filled: tuple[str, ...]
    head: Head
    max_seq: int | None


def _head(raw: Mapping[str, Any], family: Family, model_type: str, where: str) -> Head:
    names = raw.get("architectures")
    if names is None or names == []:
        return family.heads[0]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}: field 'architectures' must be a list of class names such as "
                          f"[\"LlamaForCausalLM\"], got {str(names)[:80]}")
    name = names[0]
    head = next((h for ending, h in HEADS.items() if name.endswith(ending)), None)
    if head is None or head not in family.heads:
        known = ", ".join(f"…{e}" for e, h in HEADS.items() if h in family.heads)
        raise ConfigError(f"{where}: field 'architectures' asks for {name[:80]!r}; a "
                          f"{model_type} model is built here with one of the heads {known}")
    return head


def _whole(raw: Mapping[str, Any], key: str, size: SizeField, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: field {key!r} ({size.what}) must be a whole number, got "
                          f"{str(value)[:40]}")
    if not 1 <= value <= size.largest:
        shown = f"{value:,}" if abs(value) < 10**30 else f"a number of {len(str(value))} digits"
        raise ConfigError(f"{where}: field {key!r} ({size.what}) must be between 1 and "
                          f"{size.largest:,}, got {shown}")
    return value


def check_hf_config(raw: Mapping[str, Any], where: str = "config.json", *,
                    fill_defaults: bool = False) -> CheckedConfig:
    """Check ``raw`` (a parsed config.json with a ``model_type``) before anything is built.

    Refuses, in one line naming the field: a required size that is missing (unless
    ``fill_defaults``: then transformers' default is written in and its name kept in
    ``filled``), a size that is not a whole number in ``1 … SIZES[...].largest``, attention
    heads that do not divide the hidden size where the attention splits it, key/value heads
    that do not divide the heads, a padding token outside the vocabulary, and an
    ``architectures`` entry whose head this family does not have.
    """
    model_type = str(raw.get("model_type"))
    family = FAMILIES.get(model_type, _OTHER)
    fields = dict(raw)
    missing = [s for s in family.required if fields.get(family.keys[s]) is None
               and not (family.keys[s] in fields and s in family.nullable)]
    if missing and not fill_defaults:
        keys = ", ".join(repr(family.keys[s]) for s in missing)
        values = ", ".join(str(family.defaults[s]) for s in missing)
        plural = "s" if len(missing) > 1 else ""
        raise ConfigError(f"{where}: missing field{plural} {keys} (model_type {model_type!r}); "
                          f"write {'them' if plural else 'it'}, or fill transformers' "
                          f"default{plural} ({values}) with --fill-defaults")
    for standard in missing:
        fields[family.keys[standard]] = family.defaults[standard]
    sizes = {s: _whole(fields, key, SIZES[s], where) for s, key in family.keys.items()
             if key in fields and not (fields[key] is None and s in family.nullable)}
    _whole(fields, LABELS.standard, LABELS, where)
    hidden, heads = sizes.get("hidden_size"), sizes.get("num_attention_heads")
    if family.heads_divide_hidden and hidden and heads and hidden % heads:
        raise ConfigError(f"{where}: field {family.keys['num_attention_heads']!r} ({heads}) "
                          f"must divide {family.keys['hidden_size']!r} ({hidden}): the "
                          "attention splits the hidden size into the heads")
    kv = sizes.get("num_key_value_heads")
    if family.kv_only_if is not None and not fields.get(family.kv_only_if):
        kv = None
    if kv and heads and heads % kv:
        raise ConfigError(f"{where}: field {family.keys['num_key_value_heads']!r} ({kv}) must "
                          f"divide {family.keys['num_attention_heads']!r} ({heads}): each "
                          "key/value head serves a whole group of query heads")
    pad = fields.get("pad_token_id", family.pad_token_default)
    vocab = sizes.get("vocab_size")
    if (vocab and isinstance(pad, int) and not isinstance(pad, bool)
            and not 0 <= pad < vocab):
        written = "" if "pad_token_id" in fields else " (transformers' default)"
        raise ConfigError(f"{where}: field 'pad_token_id' is {pad}{written}, outside the "
                          f"vocabulary of {vocab}; write a pad_token_id below {vocab}")
    head = _head(fields, family, model_type, where)
    positions = sizes.get("max_position_embeddings")
    return CheckedConfig(raw=fields, filled=tuple(family.keys[s] for s in missing), head=head,
                         max_seq=positions if family.learned_positions else None)
