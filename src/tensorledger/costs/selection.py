"""Ops that choose, order or count by value: a router's ``topk``, the ``sort`` that groups
tokens by expert, ``histc``/``bincount`` of tokens per expert and ``nonzero``.

One FLOP is one compare (or one add to a bin), as in :mod:`.elementwise`; every count is per
row of the dimension the op runs along, n elements to a row:

- ``sort`` (``argsort``): n · ⌈log₂ n⌉ compares, a comparison sort's;
- ``topk`` of k: n · ⌈log₂(k + 1)⌉ compares, each element tried against a heap of the k best
  (n compares for k = 1, the ``max`` it then is);
- ``histc``: 4 per element (subtract the lower edge, scale by bins / width, floor, add one to
  the bin); ``bincount``: 1 per element (add to its bin);
- ``nonzero``: 1 compare per element (the indices are written, not computed).

>>> from tensorledger.costs.registry import lookup
>>> class T:
...     def __init__(self, *shape): self.shape = shape
>>> lookup("aten.topk").flops((T(6, 8), 2), {}, None)     # 6 rows · 8 · ⌈log₂ 3⌉ = 96
96
>>> lookup("aten.sort").flops((T(16),), {}, None)         # 16 · ⌈log₂ 16⌉ = 64
64
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorledger.costs.registry import numel, register

__all__ = ["sort_flops", "topk_flops"]


def _ceil_log2(n: int) -> int:
    return max(0, (n - 1).bit_length())


def _width(tensor: Any, dim: int) -> int:
    shape = tuple(tensor.shape)
    return int(shape[dim]) if shape else 1


def topk_flops(elements: int, width: int, k: int) -> int:
    """Compares of a top-``k`` over rows of ``width`` (``elements`` in all): a heap of k."""
    return elements * max(1, _ceil_log2(k + 1)) if width > 0 else 0


def sort_flops(elements: int, width: int) -> int:
    """Compares of sorting rows of ``width`` (``elements`` in all)."""
    return elements * _ceil_log2(width)


def _topk(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    dim = int(args[2]) if len(args) > 2 else int(kwargs.get("dim", -1))
    k = int(args[1]) if len(args) > 1 else int(kwargs["k"])
    return topk_flops(numel(args[0]), _width(args[0], dim), k)


def _sort(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    dim = kwargs.get("dim", -1)
    for value in args[1:]:
        if isinstance(value, int) and not isinstance(value, bool):
            dim = value
            break
    return sort_flops(numel(args[0]), _width(args[0], int(dim)))


def _histc(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return 4 * numel(args[0])


def _per_element(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return numel(args[0])


register("aten.topk", category="reduction")(_topk)
register("aten.sort", "aten.argsort", "aten.msort", category="reduction")(_sort)
register("aten.histc", category="reduction")(_histc)
register("aten.bincount", "aten.nonzero", "aten.nonzero_static", category="reduction")(
    _per_element)
