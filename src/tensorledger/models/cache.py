"""The reference Transformer's KV cache: a key and a value tensor per layer, allocated once for a
given number of tokens and written in place, as a serving engine's cache is.

Each layer holds ``keys`` and ``values`` of shape (b, k, capacity, d) — ``k`` the key/value
heads (MHA, GQA, MQA alike), in the dtype the projections produce (bf16 under autocast).  A
forward of ``n`` tokens writes them at positions ``length .. length + n`` and attends to the
first ``length + n``; :meth:`KVCache.advance` moves ``length`` on once every layer has written.
So one token adds ``2 · k · d`` elements to each layer: napkin's closed form
(:func:`tensorledger.napkin.kvcache.kv_layout`), which the tests hold equal to the traced bytes.

>>> cache = KVCache(capacity=5)
>>> k = torch.zeros(2, 3, 4, 8, device="meta")
>>> keys, values = cache.layer(0).update(k, k)
>>> tuple(keys.shape), tuple(cache.keys[0].shape)
((2, 3, 4, 8), (2, 3, 5, 8))
>>> cache.advance(4); cache.length
4
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from tensorledger.errors import InputError

__all__ = ["KVCache", "LayerCache"]


class KVCache:
    """Every layer's keys and values for up to ``capacity`` tokens per sequence."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise InputError(f"a KV cache holds 1 token or more, got {capacity}")
        self.capacity = capacity
        self.length = 0  # tokens held before the forward that is running
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def layer(self, index: int) -> LayerCache:
        return LayerCache(self, index)

    def advance(self, tokens: int) -> None:
        """After a forward of ``tokens`` new tokens: they are held from now on."""
        self.length += tokens

    def rewind(self, length: int) -> None:
        """Forget every token after the first ``length`` (they are written over next time)."""
        if not 0 <= length <= self.length:
            raise InputError(f"cannot rewind a cache of {self.length} tokens to {length}")
        self.length = length

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every cached tensor, layer by layer: keys, then values."""
        for index in sorted(self.keys):
            yield self.keys[index]
            yield self.values[index]


@dataclass(frozen=True)
class LayerCache:
    """One layer's view of a :class:`KVCache`."""

    cache: KVCache
    index: int

    @property
    def start(self) -> int:
        """The position of the first token this forward writes (for the rotary angles and the
        learned positions)."""
        return self.cache.length

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this forward's keys and values (b, k, n, d) in place; return every cached
        token's, the new ones included (views of the cache: nothing is copied)."""
        cache = self.cache
        start, new = cache.length, k.shape[2]
        if start + new > cache.capacity:
            raise InputError(f"the KV cache holds {cache.capacity} tokens; {start} cached and "
                             f"{new} new do not fit")
        if self.index not in cache.keys:
            batch, heads, _, width = k.shape
            cache.keys[self.index] = k.new_empty((batch, heads, cache.capacity, width))
            cache.values[self.index] = v.new_empty((batch, v.shape[1], cache.capacity,
                                                    v.shape[3]))
        keys, values = cache.keys[self.index], cache.values[self.index]
        keys[:, :, start:start + new].copy_(k)
        values[:, :, start:start + new].copy_(v)
        return keys[:, :, :start + new], values[:, :, :start + new]
