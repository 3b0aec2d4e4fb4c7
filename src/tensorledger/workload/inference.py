"""Prefill and decode with the model's own KV cache: the reference model's
(:class:`tensorledger.models.cache.KVCache`, written in place) or, for a Hugging Face causal LM,
transformers' ``DynamicCache`` built from the model's config — so each layer caches what its
architecture caches: full or sliding-window layers (Mistral, Gemma 2's alternation), GQA and
MQA heads, DeepSeek's compressed latent and RoPE key (transformers 5 caches MLA compressed).

- **prefill**: a new, empty cache; one forward over the ``--seq`` prompt tokens fills it; the
  logits of the last position only (as ``generate`` and serving engines compute them).
- **decode**: the cache of ``--context`` tokens is made before the step (its *priming*: a
  prompt of ``context − 1`` tokens, then one decode step, so a sliding layer is in the state it
  keeps from then on); the step adds one token per sequence.  transformers' cache grows by
  ``torch.cat`` (the whole cache copied each step, the old one freed); the reference cache
  holds ``context + 1`` tokens from the start and writes the new one in place.

Run again (timing), a decode step starts from the same primed cache each time: the reference
cache is rewound; transformers' layers are copied (their tensors shared: ``cat`` makes new
ones), so the primed cache stays.  Traced (:meth:`InferencePath.step` with ``own``), the step
is handed the primed cache itself, so that the old tensors are freed as they are in a real
generation loop; the cache is primed again if the step is run after that.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import UnknownNameError
from tensorledger.models.cache import KVCache
from tensorledger.trace.storage import storage_bytes, storage_key
from tensorledger.workload.spec import Workload

__all__ = ["CacheLayerFacts", "InferencePath", "TracedCache"]


@dataclass(frozen=True)
class CacheLayerFacts:
    """One layer of a KV cache, as its tensors are after the step."""

    index: int
    kind: str  # the cache layer's class (DynamicLayer, DynamicSlidingWindowLayer, ...)
    key_shape: tuple[int, ...]
    value_shape: tuple[int, ...]
    dtype: str
    tokens: int  # per sequence, as the tensors show them (a sliding layer: window − 1)
    tensor_bytes: int  # keys + values, as the tensors show them
    storage_bytes: int  # the storages they keep alive: a view keeps its whole storage


@dataclass(frozen=True)
class TracedCache:
    """The KV cache a prefill or decode step leaves, layer by layer, and what it started from.

    ``storage_bytes`` is what memory holds (the memory ledger's ``kv cache``);
    ``tensor_bytes`` what the cache's tensors show: they differ where a view keeps a larger
    storage alive (transformers' sliding layers keep ``window − 1`` tokens as a view of the
    ``torch.cat`` that made them)."""

    cache_class: str  # DynamicCache, or the reference model's KVCache
    context: int  # tokens per sequence before the step (0: a prefill's empty cache)
    tokens_after: int  # tokens per sequence the cache has seen after the step
    layers: tuple[CacheLayerFacts, ...]
    bytes_before: int  # storages of the cache the step started from

    @property
    def storage_bytes(self) -> int:
        return sum(layer.storage_bytes for layer in self.layers)

    @property
    def tensor_bytes(self) -> int:
        return sum(layer.tensor_bytes for layer in self.layers)

    @property
    def dtype(self) -> str:
        return self.layers[0].dtype if self.layers else ""

    @property
    def kinds(self) -> dict[str, int]:
        """Layers by kind: ``{"DynamicSlidingWindowLayer": 1, "DynamicLayer": 1}``."""
        counts: dict[str, int] = {}
        for layer in self.layers:
            counts[layer.kind] = counts.get(layer.kind, 0) + 1
        return counts


def _dtype_name(dtype: torch.dtype) -> str:
    """The house's name of a torch dtype (bf16, fp32, ...)."""
    text = str(dtype).removeprefix("torch.")
    try:
        return resolve_dtype(text).name
    except UnknownNameError:
        return text


def _distinct_bytes(tensors: list[torch.Tensor]) -> int:
    seen: dict[int, int] = {}
    for tensor in tensors:
        seen.setdefault(storage_key(tensor), storage_bytes(tensor))
    return sum(seen.values())


class InferencePath:
    """How one model runs with its cache: built for a prepared module, it makes caches,
    primes a decode step's and runs the step."""

    def __init__(self, work: Workload, module: nn.Module, device: str) -> None:
        self.work = work
        self.module = module
        self.device = device
        self.reference = work.source.builder == "reference"
        self.primed: Any = None  # decode: the cache of --context tokens the step starts from
        self.cache: Any = None  # the cache the last step left
        if not self.reference:
            parameters = inspect.signature(module.forward).parameters
            self._cache_keyword = "cache" if "cache" in parameters else "past_key_values"
            self._keep_last = "logits_to_keep" in parameters

    # ---- caches of either kind ------------------------------------------------------------
    def new_cache(self, capacity: int) -> Any:
        """An empty cache: the reference model's holds ``capacity`` tokens a sequence;
        transformers' ``DynamicCache`` grows (its layers as the config has them)."""
        if self.reference:
            return KVCache(capacity)
        from transformers import DynamicCache

        return DynamicCache(config=self.module.config)  # type: ignore[arg-type]

    def tensors(self, cache: Any) -> list[torch.Tensor]:
        """The tensors the cache holds (keys and values of every layer)."""
        if cache is None:
            return []
        if isinstance(cache, KVCache):
            return list(cache.tensors())
        found = []
        for layer in cache.layers:
            for name in ("keys", "values"):
                tensor = getattr(layer, name, None)
                if isinstance(tensor, torch.Tensor):
                    found.append(tensor)
        return found

    def _layers(self, cache: Any) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
        if isinstance(cache, KVCache):
            for index in sorted(cache.keys):
                yield "KVCache layer", cache.keys[index], cache.values[index]
            return
        for layer in cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor):
                yield type(layer).__name__, keys, values

    def _forward(self, tokens: torch.Tensor, cache: Any) -> None:
        if self.reference:
            self.module(tokens, cache)
            return
        kwargs: dict[str, Any] = {self._cache_keyword: cache, "use_cache": True}
        if self._keep_last:
            kwargs["logits_to_keep"] = 1
        self.module(tokens, **kwargs)

    def _tokens(self, count: int) -> torch.Tensor:
        # zeros are valid ids of every vocabulary; the values do not change what a step costs
        return torch.zeros(self.work.batch, count, dtype=torch.long, device=self.device)

    # ---- the step --------------------------------------------------------------------------
    def prime(self) -> None:
        """Decode: fill a cache with ``context`` tokens a sequence (untraced)."""
        context = self.work.context
        assert context is not None
        cache = self.new_cache(context + 1)
        if context > 1:
            self._forward(self._tokens(context - 1), cache)
        self._forward(self._tokens(1), cache)
        self.primed = cache

    def start(self, own: bool = False) -> Any:
        """The cache the step starts from: a prefill's empty one; decode's primed one (itself
        with ``own``: it is the step's from then on; else a copy sharing its tensors)."""
        self.cache = None  # the last step's: a new prompt's cache replaces it
        if not self.work.step.decodes:
            return self.new_cache(self.work.seq)
        if self.primed is None:
            self.prime()
        primed = self.primed
        context = self.work.context
        assert context is not None
        if isinstance(primed, KVCache):
            primed.rewind(context)  # the new token is written over the last step's
            return primed
        if own:
            self.primed = None
            return primed
        fresh = copy.copy(primed)
        fresh.layers = [copy.copy(layer) for layer in primed.layers]
        return fresh

    def step(self, tokens: torch.Tensor, own: bool = False) -> None:
        """One prefill or decode step of ``tokens`` (b, seq)."""
        cache = self.start(own)
        self._forward(tokens, cache)
        self.cache = cache

    def before(self) -> list[torch.Tensor]:
        """The tensors of the cache the next step starts from (none for a prefill)."""
        if not self.work.step.decodes:
            return []
        if self.primed is None:
            self.prime()
        return self.tensors(self.primed)

    def facts(self, bytes_before: int) -> TracedCache:
        """The cache the last step left (:class:`TracedCache`)."""
        cache = self.cache
        layers = []
        for index, (kind, keys, values) in enumerate(self._layers(cache)):
            layers.append(CacheLayerFacts(
                index=index, kind=kind, key_shape=tuple(keys.shape),
                value_shape=tuple(values.shape), dtype=_dtype_name(keys.dtype),
                tokens=int(keys.shape[-2]),
                tensor_bytes=keys.numel() * keys.element_size()
                + values.numel() * values.element_size(),
                storage_bytes=_distinct_bytes([keys, values])))
        after = cache.length if isinstance(cache, KVCache) else int(cache.get_seq_length())
        return TracedCache(cache_class=type(cache).__name__,
                           context=self.work.context or 0, tokens_after=after,
                           layers=tuple(layers), bytes_before=bytes_before)

