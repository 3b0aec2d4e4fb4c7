"""The KV cache on a napkin: what one token leaves behind in each layer, and the whole cache of a
batch × context, for the attention the architecture has.

Torch-free.  One token's cache, per layer, in elements:

- MHA, GQA, MQA: a key and a value per KV head, ``n_kv_heads · (head_dim + v_head_dim)``
  (``2 · n_kv_heads · head_dim`` when keys and values are as wide; MQA has one KV head).
- MLA (DeepSeek-V2/V3): the compressed latent and the decoupled RoPE key, shared by every head,
  ``kv_lora_rank + qk_rope_head_dim`` — no factor 2 (what vLLM and SGLang keep, and what
  transformers 5's DeepSeek-V3 classes cache: the latent as the layer's "keys", the RoPE key as
  its "values"; the traced cache holds them equal; an implementation that caches the
  decompressed keys and values holds :attr:`KvLayout.decompressed_elements_per_token_per_layer`).
- A sliding-window layer holds at most ``window`` tokens whatever the context; a hybrid model
  (Gemma 2: local and global layers alternating) sums its layers.

Bytes are elements × the cache dtype's bits / 8 (fp8 is one byte; per-tensor scales are not
counted).  See /work/shared/FACTS.md, "Inference".

>>> kv = kv_layout(get_preset("llama-3-8b"))
>>> kv.attention, kv.bytes_per_token("bf16")         # 32 layers · 2 · 8 heads · 128 · 2 bytes
('gqa', 131072)
>>> KV_PRESETS["deepseek-v3"].bytes_per_token("bf16")  # 61 · (512 + 64) · 2
70272
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tensorledger.dtypes import DType, resolve_dtype
from tensorledger.errors import ConfigError, InputError, ModelError, UnknownNameError
from tensorledger.napkin.arithmetic import MAX_COUNT
from tensorledger.napkin.transformer import PRESETS, TransformerConfig, get_preset  # noqa: F401

__all__ = ["KV_PRESETS", "AttentionKind", "KvCache", "KvLayout", "get_kv_layout",
           "kv_cache", "kv_layout", "kv_layout_from_hf", "resolve_cache_dtype"]

AttentionKind = Literal["mha", "gqa", "mqa", "mla"]

#: The largest size a config field may give (layers, heads, widths, windows): far beyond any model.
_MAX_FIELD = 1 << 24


@dataclass(frozen=True)
class KvLayout:
    """What the cache of one model holds per token, layer by layer.

    ``windows`` has one entry per layer, ``None`` for full (global) attention or the number of
    tokens a sliding-window layer keeps; empty means every layer is full.
    """

    name: str
    # Transformer blocks with an attention cache.
    n_layers: int
    # Query heads: with n_kv_heads they say MHA (equal), MQA (one KV head) or GQA (between).
    n_heads: int
    # Heads with their own keys and values (1 for MQA; unused by MLA).
    n_kv_heads: int
    # Width of one cached key head (of the query/key head for MLA's decompressed form).
    head_dim: int
    # Width of one cached value head; 0 takes head_dim.
    v_head_dim: int = 0
    # MLA: width of the compressed KV latent that is cached (0: not MLA).
    kv_lora_rank: int = 0
    # MLA: width of the decoupled RoPE key, cached beside the latent and shared by all heads.
    qk_rope_head_dim: int = 0
    # Per layer: None for full attention, else the sliding window in tokens.
    windows: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        for key in ("n_layers", "n_heads", "n_kv_heads", "head_dim"):
            _check(self.name, key, getattr(self, key), low=1)
        for key in ("v_head_dim", "kv_lora_rank", "qk_rope_head_dim"):
            _check(self.name, key, getattr(self, key), low=0)
        if self.v_head_dim == 0:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        if self.n_heads % self.n_kv_heads:
            raise ModelError(f"model {self.name!r}: n_heads ({self.n_heads}) must be a "
                             f"multiple of n_kv_heads ({self.n_kv_heads})")
        if self.windows and len(self.windows) != self.n_layers:
            raise ModelError(f"model {self.name!r}: {len(self.windows)} layer windows for "
                             f"{self.n_layers} layers")
        for window in self.windows:
            if window is not None:
                _check(self.name, "sliding window", window, low=1)

    @property
    def attention(self) -> AttentionKind:
        """``mla``, ``mqa`` (one KV head), ``mha`` (as many as query heads) or ``gqa``."""
        if self.kv_lora_rank:
            return "mla"
        if self.n_kv_heads == self.n_heads:
            return "mha"
        return "mqa" if self.n_kv_heads == 1 else "gqa"

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """One entry per layer (``None``: full attention)."""
        return self.windows or (None,) * self.n_layers

    @property
    def sliding_layers(self) -> int:
        return sum(w is not None for w in self.layer_windows)

    @property
    def elements_per_token_per_layer(self) -> int:
        """Cache elements one token adds to one layer (see the module docstring)."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.n_kv_heads * (self.head_dim + self.v_head_dim)

    @property
    def decompressed_elements_per_token_per_layer(self) -> int:
        """MHA's cache of the same heads: what an MLA model caches when it keeps keys and
        values decompressed (transformers 5.25's DeepSeek-V2 and V3 classes do not); the same as
        :attr:`elements_per_token_per_layer` for every other model."""
        return self.n_kv_heads * (self.head_dim + self.v_head_dim) if self.kv_lora_rank \
            else self.elements_per_token_per_layer

    def bytes_per_token(self, dtype: str | DType = "bf16") -> int:
        """Cache bytes one token adds over all layers (below every sliding window)."""
        bits = _dtype(dtype).bits
        return _whole_bytes(self.n_layers * self.elements_per_token_per_layer * bits)

    def bytes_per_token_per_layer(self, dtype: str | DType = "bf16") -> float:
        return self.elements_per_token_per_layer * _dtype(dtype).bits / 8

    def cached_tokens(self, context: int) -> tuple[int, ...]:
        """Tokens each layer holds for one sequence of ``context`` tokens."""
        return tuple(context if w is None else min(context, w) for w in self.layer_windows)

    def sequence_bytes(self, context: int, dtype: str | DType = "bf16",
                       block_size: int = 1) -> int:
        """Cache bytes of one sequence of ``context`` tokens, in pages of ``block_size`` tokens
        per layer (1: no paging): each layer holds ⌈min(context, window) / block_size⌉ pages."""
        bits = _dtype(dtype).bits
        held = sum(-(-tokens // block_size) * block_size for tokens in self.cached_tokens(context))
        return _whole_bytes(held * self.elements_per_token_per_layer * bits)


def _check(model: str, key: str, value: object, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_FIELD:
        raise ModelError(f"model {model!r}: {key} must be a whole number from {low} to "
                         f"{_MAX_FIELD}, got {value!r}")


def _dtype(dtype: str | DType) -> DType:
    return resolve_dtype(dtype) if isinstance(dtype, str) else dtype


def _whole_bytes(bits: int) -> int:
    return -(-bits // 8)


def resolve_cache_dtype(name: str) -> DType:
    """A dtype a cache can be stored in: a float or integer type of 4 to 32 bits."""
    dtype = resolve_dtype(name)
    if dtype.name in ("bool", "tf32", "e8m0") or not 4 <= dtype.bits <= 32:
        raise InputError(f"a KV cache is not stored as {dtype.name}; use bf16, fp16, fp32, "
                         "fp8 (e4m3, e5m2), int8, int4 or fp4")
    return dtype


@dataclass(frozen=True)
class KvCache:
    """The cache of ``batch`` sequences of ``context`` tokens in ``dtype``."""

    model: str
    attention: AttentionKind
    dtype: str
    batch: int
    context: int
    block_size: int
    bytes_per_token: int  # all layers, below every window
    sequence_bytes: int  # one sequence at this context, paged
    total_bytes: int  # batch × sequence_bytes
    sliding_layers: int
    n_layers: int


def kv_cache(layout: KvLayout, batch: int, context: int, dtype: str = "bf16",
             block_size: int = 1) -> KvCache:
    """The whole cache of ``batch`` × ``context``.

    >>> kv_cache(kv_layout(get_preset("llama-2-7b")), 4, 4096, "fp16").total_bytes
    8589934592
    """
    for key, value in (("batch", batch), ("context", context), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise InputError(f"{key} must be a whole number from 1 to 2^63 - 1, got {value!r}")
    cache_dtype = resolve_cache_dtype(dtype)
    per_sequence = layout.sequence_bytes(context, cache_dtype, block_size)
    return KvCache(model=layout.name, attention=layout.attention, dtype=cache_dtype.name,
                   batch=batch, context=context, block_size=block_size,
                   bytes_per_token=layout.bytes_per_token(cache_dtype),
                   sequence_bytes=per_sequence, total_bytes=batch * per_sequence,
                   sliding_layers=layout.sliding_layers, n_layers=layout.n_layers)


def kv_layout(config: TransformerConfig) -> KvLayout:
    """The cache of the reference Transformer: full attention in every layer, MHA or GQA."""
    return KvLayout(name=config.name, n_layers=config.n_layers, n_heads=config.n_heads,
                    n_kv_heads=config.n_kv_heads, head_dim=config.head_dim)


def _alternating(n_layers: int, window: int, every: int) -> tuple[int | None, ...]:
    """Gemma's pattern: every ``every``-th layer (1-based) is global, the others slide."""
    return tuple(None if (layer + 1) % every == 0 else window for layer in range(n_layers))


#: Published shapes of models the reference Transformer does not express (their config.json on
#: the Hugging Face Hub), beside the cache of every reference preset.
KV_PRESETS: dict[str, KvLayout] = {
    **{name: kv_layout(config) for name, config in PRESETS.items()},
    # deepseek-ai/DeepSeek-V3: 61 layers, 128 heads, kv_lora_rank 512, qk_rope_head_dim 64,
    # qk_nope_head_dim 128 (a decompressed query/key head is 128 + 64), v_head_dim 128.
    "deepseek-v3": KvLayout(name="deepseek-v3", n_layers=61, n_heads=128, n_kv_heads=128,
                            head_dim=192, v_head_dim=128, kv_lora_rank=512,
                            qk_rope_head_dim=64),
    # mistralai/Mistral-7B-v0.1: GQA 32/8, head 128, a 4096-token window in every layer.
    "mistral-7b-v0.1": KvLayout(name="mistral-7b-v0.1", n_layers=32, n_heads=32, n_kv_heads=8,
                                head_dim=128, windows=(4096,) * 32),
    # google/gemma-2-9b: 42 layers, GQA 16/8, head 256; local (4096) and global alternate,
    # the first layer local.
    "gemma-2-9b": KvLayout(name="gemma-2-9b", n_layers=42, n_heads=16, n_kv_heads=8,
                           head_dim=256, windows=_alternating(42, 4096, 2)),
    # tiiuae/falcon-7b: multi-query attention, 71 heads of 64 sharing one key and value.
    "falcon-7b": KvLayout(name="falcon-7b", n_layers=32, n_heads=71, n_kv_heads=1, head_dim=64),
}


def get_kv_layout(name: str) -> KvLayout:
    """The cache layout of a preset (case-insensitive).

    >>> get_kv_layout("gemma-2-9b").sliding_layers
    21
    """
    key = name.strip().lower()
    if key not in KV_PRESETS:
        raise UnknownNameError("model", name, KV_PRESETS)
    return KV_PRESETS[key]


# ----------------------------------------------------------------------- a config.json's cache

def _field(raw: Mapping[str, Any], where: str, *keys: str, default: int | None = None,
           low: int = 1) -> int:
    for key in keys:
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_FIELD:
            raise ConfigError(f"{where}: field {key!r} must be a whole number from {low} to "
                              f"{_MAX_FIELD}, got {str(value)[:40]!r}")
        return value
    if default is None:
        raise ConfigError(f"{where}: missing field {keys[0]!r}, which the KV cache needs")
    return default


def _windows(raw: Mapping[str, Any], where: str, n_layers: int) -> tuple[int | None, ...]:
    model_type = raw.get("model_type")
    window = raw.get("sliding_window")
    if window is None or raw.get("use_sliding_window") is False:
        return ()
    size = _field(raw, where, "sliding_window")
    layer_types = raw.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != n_layers or not all(
                t in ("sliding_attention", "full_attention") for t in layer_types):
            raise ConfigError(f"{where}: field 'layer_types' must list 'sliding_attention' or "
                              f"'full_attention' for each of the {n_layers} layers")
        return tuple(size if t == "sliding_attention" else None for t in layer_types)
    if model_type == "gemma2":
        return _alternating(n_layers, size, 2)
    if model_type in ("gemma3", "gemma3_text"):
        return _alternating(n_layers, size, _field(raw, where, "sliding_window_pattern",
                                                   default=6))
    return (size,) * n_layers


def kv_layout_from_hf(raw: Mapping[str, Any], name: str, where: str = "config.json"
                      ) -> KvLayout:
    """The cache a Hugging Face ``config.json`` describes (any decoder: GQA fields, MLA's
    ``kv_lora_rank``, ``sliding_window`` with ``layer_types`` or Gemma's alternation).

    >>> kv_layout_from_hf({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64,
    ...                    "num_attention_heads": 4, "num_key_value_heads": 2,
    ...                    "sliding_window": 8}, "m").cached_tokens(100)
    (8, 8)
    """
    n_layers = _field(raw, where, "num_hidden_layers", "n_layer", "num_layers")
    n_heads = _field(raw, where, "num_attention_heads", "n_head")
    if raw.get("kv_lora_rank") is not None:
        rope = _field(raw, where, "qk_rope_head_dim", low=0)
        nope = _field(raw, where, "qk_nope_head_dim", low=0)
        if nope + rope < 1:
            raise ConfigError(f"{where}: fields 'qk_nope_head_dim' + 'qk_rope_head_dim' must "
                              "be at least 1")
        v_dim = _field(raw, where, "v_head_dim", default=nope + rope)
        rank = _field(raw, where, "kv_lora_rank")
        windows = _windows(raw, where, n_layers)
        try:
            return KvLayout(name=name, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_heads,
                            head_dim=nope + rope, v_head_dim=v_dim, kv_lora_rank=rank,
                            qk_rope_head_dim=rope, windows=windows)
        except ModelError as error:
            raise ConfigError(f"{where}: {error}") from None
    multi_query = raw.get("multi_query") is True and not raw.get("new_decoder_architecture")
    n_kv = 1 if multi_query else _field(raw, where, "num_key_value_heads", "num_kv_heads",
                                        default=n_heads)
    hidden = raw.get("hidden_size", raw.get("n_embd"))
    derived = hidden // n_heads if isinstance(hidden, int) and not isinstance(hidden, bool) \
        and hidden >= n_heads else None
    head_dim = _field(raw, where, "head_dim", default=derived)
    try:
        layout = KvLayout(name=name, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                          head_dim=head_dim, windows=_windows(raw, where, n_layers))
    except ModelError as error:
        raise ConfigError(f"{where}: {error}") from None
    return layout

